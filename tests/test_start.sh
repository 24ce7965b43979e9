#!/bin/sh
# test_start.sh - what a node's start loads. `fednode run` (like train and
# eval) runs again
# once with OPENBLAS_NUM_THREADS=1 in its environment when none gives
# OpenBLAS a thread count: OpenBLAS starts its workers when the process
# loads it and each spins 0.1 s, while every backend runs it on one thread.
# A count the environment gives (OPENBLAS_NUM_THREADS, OMP_NUM_THREADS) is
# kept, and FEDNODE_NO_REEXEC=1 runs it as it was started. Read from a
# client's /proc/PID/environ while it dials an aggregator that is not there
# (a small CSV). And libmicrohttpd (with the GnuTLS stack it links) is
# mapped only by a node started with --http (dlopen), not by one without
# (/proc/PID/maps). Skips (77) without /proc or Fashion-MNIST (proc_lib.sh).
. tests/proc_lib.sh
if [ ! -r /proc/self/environ ]; then echo "skipped: no /proc/PID/environ"; exit 77; fi
unset OPENBLAS_NUM_THREADS GOTO_NUM_THREADS OMP_NUM_THREADS FEDNODE_NO_REEXEC

printf 'a,b,label\n' >"$TMP/d.csv"
i=0; while [ $i -lt 50 ]; do echo "0.$((i % 10)),$((i % 2)),$((i % 2))" >>"$TMP/d.csv"; i=$((i + 1)); done
for n in aggregator c0; do
    "$FEDNODE" keygen --out "$TMP/$n" >/dev/null 2>&1 || fail "keygen $n"
    echo "$n $("$FEDNODE" pubkey "$TMP/$n")" >>"$TMP/allow.txt"
done

# blas_env [VAR=VALUE...]: the OpenBLAS variables in a client's environment
# once it runs (started with VAR=VALUE..., and $RUN_OPTS's options),
# space-separated, sorted; "" for none. Which of libmicrohttpd and libgnutls
# it mapped: in $TMP/libs, one a line.
RUN_OPTS=""
blas_env() {
    rm -f "$TMP/c0.db"*
    # shellcheck disable=SC2086
    env "$@" "$FEDNODE" run --role client --keys "$TMP/c0" \
        --allow "$TMP/allow.txt" --db "$TMP/c0.db" --aggregator tcp://127.0.0.1:9 \
        --data "$TMP/d.csv" --threads 1 $RUN_OPTS >"$TMP/c0.log" 2>&1 &
    p=$!
    PIDS="$PIDS $p"
    n=0 # until it has opened its database: the restart, if any, is behind it
    while [ ! -e "$TMP/c0.db" ] && [ $n -lt 300 ]; do sleep 0.1; n=$((n + 1)); done
    kill -0 "$p" 2>/dev/null || { cat "$TMP/c0.log"; fail "the client ended"; }
    tr '\0' '\n' <"/proc/$p/environ" | grep -E '^(OPENBLAS_NUM_THREADS|OMP_NUM_THREADS)=' | sort |
        tr '\n' ' '
    grep -o 'lib\(microhttpd\|gnutls\)[^/]*\.so' "/proc/$p/maps" | sed 's/\.so.*//' | sort -u >"$TMP/libs"
    kill "$p"
    wait "$p" 2>/dev/null
}

got=$(blas_env)
[ "$got" = "OPENBLAS_NUM_THREADS=1 " ] || fail "no count given: '$got', want OPENBLAS_NUM_THREADS=1"
ok "run restarts with one OpenBLAS thread"
got=$(blas_env OPENBLAS_NUM_THREADS=2)
[ "$got" = "OPENBLAS_NUM_THREADS=2 " ] || fail "OPENBLAS_NUM_THREADS=2 given: '$got'"
got=$(blas_env OMP_NUM_THREADS=3)
[ "$got" = "OMP_NUM_THREADS=3 " ] || fail "OMP_NUM_THREADS=3 given: '$got'"
ok "a count the environment gives is kept"
got=$(blas_env FEDNODE_NO_REEXEC=1)
[ "$got" = "" ] || fail "FEDNODE_NO_REEXEC=1: '$got', want none"
ok "FEDNODE_NO_REEXEC=1 runs it as started"

blas_env >"$TMP/env"
[ ! -s "$TMP/libs" ] || fail "a node without --http mapped $(tr '\n' ' ' <"$TMP/libs")"
RUN_OPTS="--http 127.0.0.1:0"
blas_env >"$TMP/env"
[ "$(tr '\n' ' ' <"$TMP/libs")" = "libgnutls libmicrohttpd " ] ||
    fail "a node with --http mapped '$(tr '\n' ' ' <"$TMP/libs")', want libgnutls libmicrohttpd"
ok "libmicrohttpd and GnuTLS are mapped with --http only"
