#!/bin/sh
# run.sh - runs test binaries and scripts in order, prints each result and a
# closing "N passed, N failed" line; exits non-zero when any failed.
# A test that exits 77 was skipped (and says why on its own output).
pass=0; fail=0; skip=0; failed=""
for t in "$@"; do
    case "$t" in
    *.sh) cmd="sh $t" ;;
    *) cmd="$t" ;;
    esac
    echo "== $t"
    $cmd
    rc=$?
    if [ $rc -eq 0 ]; then pass=$((pass + 1))
    elif [ $rc -eq 77 ]; then skip=$((skip + 1))
    else fail=$((fail + 1)); failed="$failed $t"
    fi
done
[ -n "$failed" ] && echo "failed:$failed"
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
