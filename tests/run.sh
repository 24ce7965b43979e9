#!/bin/sh
# run.sh - runs test binaries and scripts in order, prints each one's output
# and a closing "N passed, N failed, N skipped" line that counts test cases;
# exits non-zero when any failed.
# A cmocka binary counts the cases its own summary lists ("[  PASSED  ] N
# test(s).", "[  SKIPPED ] N ...", "[  FAILED  ] N ..."); one that exits
# non-zero without a summary (a crash), or with one that lists no failure,
# adds one failed case. Anything else (a process test, a fuzz replay) is one
# case: exit 0 passed, exit 77 skipped (it says why on its own output).
# Before the closing line it repeats why each failed test failed (its FAIL
# lines, or its last lines), so the tail of a long log shows the cause.
# Each test ends with a "-- T: 12.3 s" line; before the closing line come the
# ten slowest and the total (wall-clock seconds, for seeing where the time
# goes: no test's verdict depends on them).
pass=0; fail=0; skip=0; failed=""
CMOCKA_MESSAGE_OUTPUT=stdout; export CMOCKA_MESSAGE_OUTPUT
out=$(mktemp) || exit 1
why=$(mktemp) || exit 1
times=$(mktemp) || exit 1
trap 'rm -f "$out" "$out.rc" "$why" "$times"' EXIT
trap 'exit 1' INT TERM HUP
# milliseconds since the epoch (GNU date's %N; elsewhere whole seconds)
now_ms() {
    ms=$(date +%s%3N 2>/dev/null)
    case "$ms" in
    *[!0-9]* | "") echo $(($(date +%s) * 1000)) ;;
    *) echo "$ms" ;;
    esac
}
# seconds with one decimal from milliseconds
secs() { awk -v ms="$1" 'BEGIN { printf "%.1f", ms / 1000 }'; }
# count KIND: N from the summary line "[  KIND  ] N test(s)..." (0: none)
count() {
    sed -n "s/.*\[ *$1 *\] \([0-9][0-9]*\) test(s).*/\1/p" "$out" |
        awk '{ n += $1 } END { print n + 0 }'
}
for t in "$@"; do
    case "$t" in
    *.sh) cmd="sh $t" ;;
    *) cmd="$t" ;;
    esac
    echo "== $t"
    t0=$(now_ms)
    # a test that hangs is a failure, not a suite that never ends: each runs
    # under FED_TEST_TIMEOUT seconds (900 by default), then SIGTERM, then SIGKILL
    { timeout -k 10 "${FED_TEST_TIMEOUT:-900}" $cmd 2>&1; echo $? >"$out.rc"; } | tee "$out"
    ms=$(($(now_ms) - t0))
    rc=$(cat "$out.rc")
    echo "$ms $t" >>"$times"
    echo "-- $t: $(secs "$ms") s"
    if grep -q '^\[==========\] [0-9][0-9]* test(s) run\.' "$out"; then
        p=$(count PASSED); f=$(count FAILED); s=$(count SKIPPED)
        if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
            echo "$t: exit status $rc after a summary with no failure"
            f=1
        fi
    elif [ "$rc" -eq 0 ]; then p=1 f=0 s=0
    elif [ "$rc" -eq 77 ]; then p=0 f=0 s=1
    else
        echo "$t: exit status $rc (no cmocka summary)"
        p=0 f=1 s=0
    fi
    pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
    if [ "$f" -gt 0 ]; then
        failed="$failed $t"
        echo "-- $t" >>"$why"
        { grep -E '^(FAIL|\[  (FAILED|ERROR) )' "$out" || tail -n 8 "$out"; } |
            head -n 20 >>"$why"
    fi
done
total=$(awk '{ n += $1 } END { print n + 0 }' "$times")
echo "== the slowest"
sort -rn "$times" | head -n 10 | while read -r ms t; do
    printf '%8s s  %s\n' "$(secs "$ms")" "$t"
done
echo "total $(secs "$total") s, $# test(s)"
if [ -n "$failed" ]; then
    echo "== why they failed"
    cat "$why"
    echo "failed:$failed"
fi
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
