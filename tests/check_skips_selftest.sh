#!/bin/sh
# check_skips_selftest.sh TEST CHECK_SKIPS: the skip reporting itself (tests/support/skips.h).
# TEST (a test with AVX-512 checks) run as if the processor lacked avx512 must exit 77
# (ctest's "skipped"), and check_skips must then fail exactly when the processor does run
# avx512. Runs in a folder of its own, so the build's test-skips stay as the suite left them.
set -u
test_bin=$1
check_skips=$2
dir=${GRAFT_TEST_TMP:-/tmp}/check_skips_selftest.$$
mkdir -p "$dir" || exit 1
trap 'rm -rf "$dir"' EXIT
GRAFT_TEST_SKIPS=$dir GRAFT_TEST_HIDE_PATHS=avx512 "$test_bin" >"$dir/out" 2>&1
rc=$?
if [ "$rc" != 77 ]; then
    echo "FAIL: $test_bin with avx512 hidden exited $rc, not 77 (skipped)"; cat "$dir/out"; exit 1
fi
grep -q "^SKIPPED " "$dir/out" || { echo "FAIL: no SKIPPED line printed"; exit 1; }
"$check_skips" "$dir" >"$dir/check" 2>&1
rc=$?
cat "$dir/check"
if grep -q "^kernel paths this processor runs:.* avx512" "$dir/check"; then
    [ "$rc" = 1 ] || { echo "FAIL: check_skips passed a skip of avx512, which this processor runs"; exit 1; }
else
    [ "$rc" = 0 ] || { echo "FAIL: check_skips failed a skip of avx512, which this processor lacks"; exit 1; }
fi
echo "ok: a hidden path reads as skipped, and check_skips judges it by the processor"
