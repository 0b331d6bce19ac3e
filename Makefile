# The commands the README tells people to type. Each one installs missing Debian packages first.
#   make run    build, then serve the default model (stories260K) over HTTP until Ctrl-C
#   make test   build and run every test flavour: release, ASan+UBSan, TSan (engine), fuzz (bounded time)
#   make bench  graft against llama.cpp side by side on BENCH_MODELS (see bench/README.md)
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

BENCH_MODELS ?=
BENCH_THREADS ?= 2

.PHONY: all run test bench deps release asan tsan fuzz test-release test-asan test-tsan test-fuzz clean

all: release

deps:
	@sh tools/install-deps.sh

build/%/Makefile: deps
	@true

release: deps
	@cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build build/release -j $(JOBS)

asan: deps
	@cmake -S . -B build/asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGRAFT_SANITIZE=address $(CMAKE_FLAGS) >/dev/null
	@cmake --build build/asan -j $(JOBS)

tsan: deps
	@cmake -S . -B build/tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGRAFT_SANITIZE=thread $(CMAKE_FLAGS) >/dev/null
	@cmake --build build/tsan -j $(JOBS)

fuzz: deps
	@cmake -S . -B build/fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DGRAFT_FUZZ=ON $(CMAKE_FLAGS) >/dev/null
	@cmake --build build/fuzz -j $(JOBS)

run: release
	./build/release/graft serve

# After ctest, check_skips lists the checks the tests skipped (ctest shows those tests as
# skipped) and fails when one was of a kernel path this processor runs.
test-release: release
	cd build/release && rm -f test-skips/*.skips && ctest --output-on-failure -j $(JOBS) && ./check_skips test-skips

test-asan: asan
	cd build/asan && rm -f test-skips/*.skips && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS) && ./check_skips test-skips

test-tsan: tsan
	cd build/tsan && rm -f test-skips/*.skips && TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure -j $(JOBS) && ./check_skips test-skips

test-fuzz: fuzz
	cd build/fuzz && ctest --output-on-failure

test: test-release test-asan test-tsan test-fuzz

bench: release
	sh bench/setup.sh
	sh bench/compare.sh $(BENCH_MODELS) --threads $(BENCH_THREADS)

clean:
	rm -rf build
