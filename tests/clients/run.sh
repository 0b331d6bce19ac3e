#!/bin/sh
# run.sh: starts three `graft serve` on free ports of 127.0.0.1 (the model's own template, a
# thinking model's, and a random-weight coder with DeepSeek-Coder's vocabulary, written by
# graft synth, for fill in the middle) and runs the official openai npm client
# (openai_test.mjs) and Anthropic's (anthropic_test.mjs) against them; then SIGTERM, and each
# graft must exit 0. ctest runs it as test_clients with GRAFT_BIN and GRAFT_TEST_TMP set. Needs node and the clients installed
# by tools/install-deps.sh (tests/clients/node_modules, from package-lock.json).
set -e
here=$(cd "$(dirname "$0")" && pwd)
bin=${GRAFT_BIN:?GRAFT_BIN is not set}
tmp=${GRAFT_TEST_TMP:-/tmp}
command -v node >/dev/null || { echo "test_clients: node is not installed" >&2; exit 1; }
for client in openai @anthropic-ai/sdk; do
    [ -d "$here/node_modules/$client" ] || { echo "test_clients: run tools/install-deps.sh (npm ci in tests/clients)" >&2; exit 1; }
done
# start NAME ARGS...: graft serve on a free port, its stderr in a log; sets $pid and $port.
start() {
    log="$tmp/clients-serve-$1-$$.log"
    shift
    "$bin" serve --port 0 --threads 1 --ctx 256 "$@" 2>"$log" &
    pid=$!
    port=
    for _ in $(seq 1 3000); do
        port=$(sed -n 's|^graft: listening on http://127.0.0.1:\([0-9]*\)$|\1|p' "$log")
        [ -n "$port" ] && return 0
        kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; exit 1; }
        sleep 0.02
    done
    echo "test_clients: graft serve did not start" >&2
    kill "$pid"
    exit 1
}
start plain
plain_pid=$pid plain_port=$port
# the second serves a thinking model's template (QwQ's), for thoughts given apart
start thinking --chat-template "${GRAFT_TEMPLATES_DIR:?GRAFT_TEMPLATES_DIR is not set}/Qwen-QwQ-32B.jinja"
thinking_pid=$pid thinking_port=$port
coder="$tmp/clients-coder-$$.gguf"
"$bin" synth --arch qwen2 --preset tiny --type F32 --seed 5 -o "$coder" \
    --vocab "${GRAFT_MODELS_DIR:?GRAFT_MODELS_DIR is not set}/vocab/ggml-vocab-deepseek-coder.gguf" >/dev/null
start coder -m "$coder"
status=0
# each client request times out after 60 s, so a request that hangs fails naming its check
# (the "ok N" lines before it) well within ctest's limit
node "$here/openai_test.mjs" "$plain_port" "$thinking_port" "$port" || status=$?
node "$here/anthropic_test.mjs" "$plain_port" "$thinking_port" || status=$?
rm -f "$coder"
for p in $plain_pid $thinking_pid $pid; do
    kill -TERM "$p"
    wait "$p" || { echo "test_clients: graft serve exited with $?" >&2; status=1; }
done
exit $status
