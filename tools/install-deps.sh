#!/bin/sh
# Installs the Debian packages graft needs to build and test (see README "Dependencies").
# Runs apt-get when root; otherwise prints the one command to run and fails.
set -e
pkgs="cmake make gcc clang libclang-rt-14-dev pkg-config libcmocka-dev libpcre2-dev libjansson-dev
      libmicrohttpd-dev libcurl4-openssl-dev python3 python3-jinja2"
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    if [ "$(id -u)" = 0 ]; then
        echo "graft: installing missing packages:$missing" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
    else
        echo "graft: missing packages:$missing" >&2
        echo "graft: run: sudo apt-get install -y$missing" >&2
        exit 1
    fi
fi
# The official openai and Anthropic npm clients (and zod), for tests/clients, as
# package-lock.json pins them:
# installed again when the lockfile is newer than what npm last installed.
client="$(dirname "$0")/../tests/clients"
installed="$client/node_modules/.package-lock.json"
if [ ! -f "$installed" ] || [ "$client/package-lock.json" -nt "$installed" ]; then
    command -v npm >/dev/null || { echo "graft: npm is needed for the client tests" >&2; exit 1; }
    echo "graft: installing the npm clients for tests/clients" >&2
    (cd "$client" && npm ci --no-audit --no-fund --silent)
fi
