#!/bin/sh
# bench/setup.sh: prepares the llama.cpp side of the benchmarks; safe to run again.
#
# llama.cpp is never committed to graft. This script fetches, at bench time only:
#   1. node-llama-cpp@3.21.1 into bench/node_modules (npm, with NODE_LLAMA_CPP_SKIP_DOWNLOAD
#      so nothing but the npm packages is fetched). Its @node-llama-cpp/linux-x64 package
#      carries prebuilt llama.cpp shared libraries: libllama, libggml and the CPU backend
#      variants libggml-cpu-*.so;
#   2. the matching llama.cpp source, cloned from the git bundle inside that package into
#      bench/llama.cpp-src (for include/llama.h and the ggml headers of that exact release);
#   3. bench/build/llama_speed, our harness (bench/llama_speed.c), compiled against those
#      headers and linked to those libraries with an rpath to their folder, and to graft's
#      benchmark library from build/release (make release first).
# Each step is skipped when its result is already there (llama_speed is rebuilt when its
# source is newer). Then: bench/compare.sh MODEL.gguf ...
set -eu

here=$(cd "$(dirname "$0")" && pwd)
version=3.21.1
package=$here/node_modules/node-llama-cpp
bins=$here/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
src=$here/llama.cpp-src
exe=$here/build/llama_speed

installed_version() {
    sed -n 's/^  "version": "\(.*\)",$/\1/p' "$package/package.json" 2>/dev/null
}

install_package() {
    if [ "$(installed_version)" = "$version" ] && ls "$bins"/libllama*.so >/dev/null 2>&1; then
        return
    fi
    echo "setup: npm install node-llama-cpp@$version into $here/node_modules"
    (cd "$here" && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true \
        npm install --prefix "$here" --no-save "node-llama-cpp@$version")
    if ! ls "$bins"/libllama*.so >/dev/null 2>&1; then
        echo "setup: no prebuilt llama.cpp libraries in $bins (linux-x64 only)" >&2
        exit 1
    fi
}

clone_source() {
    if [ -f "$src/include/llama.h" ]; then
        return
    fi
    echo "setup: cloning the llama.cpp source of the release into $src"
    rm -rf "$src"
    git -c advice.detachedHead=false clone --quiet "$package/llama/gitRelease.bundle" "$src"
}

# llama_speed links graft's benchmark library and argmax as CMake compiled them for graft
# (build/release/libgraftbench.a, libgraftcore.a), and is itself compiled with the release
# flags (CMake's Release: -O3 -DNDEBUG), so both harnesses run the same code the same way.
build_harness() {
    lib=$here/../build/release
    if [ ! -f "$lib/libgraftbench.a" ] || [ ! -f "$lib/libgraftcore.a" ]; then
        echo "setup: no $lib/libgraftbench.a (make release first)" >&2
        exit 1
    fi
    if [ -x "$exe" ] &&
        [ -z "$(find "$here/llama_speed.c" "$lib/libgraftbench.a" "$lib/libgraftcore.a" \
            -newer "$exe")" ]; then
        return
    fi
    echo "setup: compiling $exe"
    mkdir -p "$here/build"
    ${CC:-cc} -std=c11 -O3 -DNDEBUG -Wall -Wextra -Werror -D_GNU_SOURCE \
        -I"$src/include" -I"$src/ggml/include" -I"$here/../src" -I"$here/../include" \
        -DLLAMA_BINS_DIR="\"$bins\"" \
        "$here/llama_speed.c" "$lib/libgraftbench.a" "$lib/libgraftcore.a" \
        "$bins"/libllama.v*.so "$bins"/libggml.v*.so \
        "$bins"/libggml-base.so -Wl,-rpath,"$bins" -lpthread -lm -o "$exe"
}

install_package
clone_source
build_harness
echo "setup: ready ($exe)"
