#!/bin/sh
# test_fedsim_mpi.sh - fedsim across ranks (issue 26): the same scenario
# under `mpirun -np R fedsim` gives the same CSV rows and final model hash
# as one plain process, for R = 3 (RANKS; long_fedsim_mpi.sh in `make
# test-long` runs R = 1, 2 and 3), for 200 clients of an aggregator
# and for 64 peers on random:3, each with a crash (and restart) and a loss
# window (the peers with jitter above the latency floor too), 20 clients
# with Byzantine ones, stragglers, random crashes and a partition for R = 2,
# and 20 clients under --secagg with one crashed after sharing; each rank
# prints its peak RSS; a scenario with no lookahead is refused under mpirun.
# Skips without mpirun or an MPI build.
. tests/proc_lib.sh
need_mpi
FEDSIM=${FEDSIM:-./fedsim}
[ -x "$FEDSIM" ] || { echo "skipped: no $FEDSIM (run make)"; exit 77; }
FEDNODE_LOG=warn; export FEDNODE_LOG

# same NAME ARGS...: plain, then each R of RANKS (3): the same CSV and hash
same() {
    name=$1; shift
    "$FEDSIM" "$@" --csv "$TMP/$name-plain.csv" >"$TMP/$name-plain.log" 2>&1 ||
        fail "$name: plain fedsim"
    want=$(grep "final model sha256" "$TMP/$name-plain.log")
    [ -n "$want" ] || fail "$name: no hash"
    rows=$(($(wc -l <"$TMP/$name-plain.csv") - 1))
    for r in ${RANKS:-3}; do
        $MPIRUN -np $r "$FEDSIM" "$@" --csv "$TMP/$name-$r.csv" >"$TMP/$name-$r.log" 2>&1 ||
            fail "$name: mpirun -np $r fedsim"
        cmp -s "$TMP/$name-plain.csv" "$TMP/$name-$r.csv" ||
            { diff "$TMP/$name-plain.csv" "$TMP/$name-$r.csv" | head; fail "$name: R=$r rows differ"; }
        got=$(grep "final model sha256" "$TMP/$name-$r.log")
        [ "$got" = "$want" ] || fail "$name: R=$r hash '$got', plain '$want'"
        [ "$(grep -c "^rank [0-9]* of $r: peak RSS" "$TMP/$name-$r.log")" -eq "$r" ] ||
            fail "$name: R=$r: not one peak RSS line a rank"
    done
    ok "$name: $rows rows and ${want#final model } the same for plain and R = ${RANKS:-3}"
    sed 's/^/  /' "$TMP/$name-plain.csv"
    grep "peak RSS" "$TMP/$name-$r.log" | sed "s/^/  R=$r /"
}

same agg200 --nodes 200 --rounds 2 --model logreg --crash 7@0.05,restart@0.2 \
    --loss-window 0.2@0.01-0.1 --deadline-ms 300 --min-clients 100
same peer64 --nodes 64 --role peer --topology random:3 --rounds 2 --model logreg \
    --crash 5@0.05,restart@0.4 --loss-window 0.3@0.02-0.3 --jitter-ms 2 --deadline-ms 500

# the other faults across 2 ranks: Byzantine clients against median,
# stragglers, random crashes, a partition that heals, jitter
RANKS=2 same faults20 --nodes 20 --rounds 3 --model logreg --byzantine 0.2:signflip:10 \
    --strategy median --stragglers 0.2:3 --crash-rate 0.3 --partition-net 2@0.1-0.5 \
    --deadline-ms 300 --min-clients 4 --jitter-ms 1

# secure aggregation across ranks: 20 clients, client 7 crashes after its
# shares went out, so round 1 unmasks without it (its pair masks removed
# through t of its neighbours' shares, wherever they run)
FEDNODE_LOG=info same secagg20 --nodes 20 --rounds 3 --model logreg --secagg --crash 7@0.03 \
    --deadline-ms 300 --min-clients 4
for r in plain ${RANKS:-3}; do
    grep -q "round 1 try 0 unmasked: 19 in the sum, 1 dropped after sharing" \
        "$TMP/secagg20-$r.log" || fail "secagg20 ($r): the crash did not land after sharing"
done
ok "secagg20: the client that crashed after sharing is unmasked out alike for plain and R = ${RANKS:-3}"

# no lookahead: jitter with no floor could bring a frame in at once
if $MPIRUN -np 2 "$FEDSIM" --nodes 4 --rounds 1 --model logreg --jitter-ms 2 \
    --latency-floor-ms 0 >"$TMP/nolook.log" 2>&1; then
    fail "a scenario with no lookahead ran across ranks"
fi
grep -q "latency-floor-ms above 0" "$TMP/nolook.log" || fail "no lookahead: not said why"
ok "no lookahead (jitter, --latency-floor-ms 0): refused under mpirun, saying why"
