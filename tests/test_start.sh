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
# (/proc/PID/maps). Refusals at the start, before anything is created: an
# unwritable --port-file named with its reason, --http ''. One writer a
# database: a second aggregator (fedsim, train) given a running one's --db
# is refused naming its pid, while status still reads it. Skips (77)
# without /proc or Fashion-MNIST (proc_lib.sh).
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

# refused_start DESC WANT ARGS...: `fednode run ARGS` exits 2 saying WANT,
# and leaves no database behind
refused_start() {
    d=$1 want=$2; shift 2
    rm -f "$TMP/r.db"*
    "$FEDNODE" run --role aggregator --keys "$TMP/aggregator" --allow "$TMP/allow.txt" \
        --db "$TMP/r.db" --data "$TMP/d.csv" --model logreg --listen tcp://127.0.0.1:0 \
        "$@" >"$TMP/r.log" 2>&1
    rc=$?
    [ "$rc" -eq 2 ] || fail "$d: exit $rc, wanted 2"
    grep -qF -- "$want" "$TMP/r.log" || fail "$d: said '$(cat "$TMP/r.log")', wanted '$want'"
    [ ! -e "$TMP/r.db" ] || fail "$d: left the database behind"
}
refused_start "a port file in a missing folder" \
    "run: --port-file $TMP/no/such/port: No such file or directory" --port-file "$TMP/no/such/port"
refused_start "a folder as the port file" "run: --port-file $TMP: Is a directory" --port-file "$TMP"
refused_start "a port file under a file" \
    "run: --port-file $TMP/d.csv/port: Not a directory" --port-file "$TMP/d.csv/port"
ok "an unwritable --port-file is refused before the database, naming it and why"
refused_start "--http ''" "run: --http '': expected http://HOST:PORT" --http ''
printf 'http =\n' >"$TMP/h.ini"
refused_start "http = in a file" "run: --http '': expected" --config "$TMP/h.ini"
ok "--http '' is refused, not taken as no HTTP"

# one writer a database
start w1 --role aggregator --keys "$TMP/aggregator" --allow "$TMP/allow.txt" --db "$TMP/w.db" \
    --data "$TMP/d.csv" --model logreg --rounds 0 --threads 1 --listen tcp://127.0.0.1:0 \
    --port-file "$TMP/w1.port"
wait_for "the first aggregator listens" 20 test -s "$TMP/w1.port"
"$FEDNODE" run --role aggregator --keys "$TMP/aggregator" --allow "$TMP/allow.txt" \
    --db "$TMP/w.db" --data "$TMP/d.csv" --model logreg --rounds 0 --threads 1 \
    --listen tcp://127.0.0.1:0 --port-file "$TMP/w2.port" >"$TMP/w2.log" 2>&1
rc=$?
[ "$rc" -eq 1 ] || fail "a second aggregator on the same --db exited $rc, wanted 1"
logged w2 "w.db is in use by another fednode process (pid $(pid w1))" ||
    fail "the second aggregator said: $(cat "$TMP/w2.log")"
[ ! -e "$TMP/w2.port" ] || fail "the second aggregator listened"
"$FEDNODE" train --data "$TMP/d.csv" --model logreg --epochs 1 --threads 1 --db "$TMP/w.db" \
    >"$TMP/wt.log" 2>&1 && fail "train --db beside a running aggregator ran"
logged wt "in use by another fednode process (pid $(pid w1))" || fail "train said: $(cat "$TMP/wt.log")"
FEDSIM=${FEDSIM:-./fedsim}
if [ -x "$FEDSIM" ]; then
    "$FEDSIM" --data "$TMP/d.csv" --model logreg --rounds 1 --db "$TMP/w.db" \
        >"$TMP/ws.log" 2>&1 && fail "fedsim --db beside a running aggregator ran"
    logged ws "in use by another fednode process (pid $(pid w1))" ||
        fail "fedsim said: $(cat "$TMP/ws.log")"
fi
"$FEDNODE" status --db "$TMP/w.db" >"$TMP/wst.log" 2>&1 || fail "status beside the writer: $(cat "$TMP/wst.log")"
"$FEDNODE" verify --db "$TMP/w.db" >"$TMP/wv.log" 2>&1 || fail "verify beside the writer: $(cat "$TMP/wv.log")"
alive w1 || fail "the first aggregator ended"
kill "$(pid w1)"
exits0 w1 20
"$FEDNODE" train --data "$TMP/d.csv" --model logreg --epochs 1 --threads 1 --db "$TMP/w.db" \
    >"$TMP/wt.log" 2>&1 || fail "train --db once the aggregator ended: $(cat "$TMP/wt.log")"
ok "a second writer of a database is refused naming the first's pid; status and verify still read"
