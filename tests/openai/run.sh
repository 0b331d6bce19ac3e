#!/bin/sh
# run.sh: starts `graft serve` on a free port of 127.0.0.1 and runs the official openai npm
# client against it (client_test.mjs); then SIGTERM, and graft must exit 0. ctest runs it
# as test_openai with GRAFT_BIN and GRAFT_TEST_TMP set. Needs node and the client installed
# by tools/install-deps.sh (tests/openai/node_modules, from package-lock.json).
set -e
here=$(cd "$(dirname "$0")" && pwd)
bin=${GRAFT_BIN:?GRAFT_BIN is not set}
tmp=${GRAFT_TEST_TMP:-/tmp}
log="$tmp/openai-serve-$$.log"
command -v node >/dev/null || { echo "test_openai: node is not installed" >&2; exit 1; }
[ -d "$here/node_modules/openai" ] || { echo "test_openai: run tools/install-deps.sh (npm ci in tests/openai)" >&2; exit 1; }
"$bin" serve --port 0 --threads 1 --ctx 256 2>"$log" &
pid=$!
port=
for _ in $(seq 1 3000); do
    port=$(sed -n 's|^graft: listening on http://127.0.0.1:\([0-9]*\)$|\1|p' "$log")
    [ -n "$port" ] && break
    kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; exit 1; }
    sleep 0.02
done
[ -n "$port" ] || { echo "test_openai: graft serve did not start" >&2; kill "$pid"; exit 1; }
status=0
node "$here/client_test.mjs" "$port" || status=$?
kill -TERM "$pid"
wait "$pid" || { echo "test_openai: graft serve exited with $?" >&2; status=1; }
exit $status
