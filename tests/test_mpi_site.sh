#!/bin/sh
# test_mpi_site.sh - a site run as two processes under mpirun (node/site.h)
# in a consortium with two plain clients, on 127.0.0.1; logreg on tenths of
# Fashion-MNIST (6000 samples a member), batch 50, 3 rounds.
#  A. The site as `mpirun --oversubscribe -np 2 fednode run` (each rank 50
#     of every 100-sample step): the aggregator's test accuracy after round
#     3 is within 0.3 point of B's.
#  B. The same job with the site as one process at the doubled batch
#     (--rank-batch 100); the site's training loss each round is A's to 1e-4.
#  C. A again: the aggregator's final model is bit-identical to A's, the
#     site's losses the same (the ranks' sums go in a fixed order).
#  F. R = 1 equals today's client: the site under `mpirun -np 1` and as a
#     plain process give bit-identical final models.
#  D. Rank 1 frozen (SIGSTOP) while the site trains: rank 0 logs that the
#     gradients' sum failed past --mpi-timeout-ms, and the job ends (exit
#     not 0) within the deadline and a margin, no hang.
#  E. Rank 1 killed (-9): mpirun ends the job (exit not 0), naming rank 1.
# Needs ./fednode built with MPI (mpicc), mpirun and Fashion-MNIST; exits
# 77 (skipped) without them. KEEP=1 keeps the temporary directory.
. "$(dirname "$0")/proc_lib.sh"
need_mpi

K=$TMP/keys
allow_keys "$K" agg c0 c1 c2
COMMON="--data fashion-mnist --threads 1 --partition iid"
SETTINGS="--model logreg --optimizer sgd --momentum 0.9 --lr 0.05 --batch 50 --local-epochs 1"
trap mpi_cleanup EXIT

# agg DIR: the aggregator of a run in $TMP/DIR, its port in $port
agg() {
    mkdir -p "$TMP/$1"
    # shellcheck disable=SC2086
    start "agg$1" --role aggregator --keys "$K/agg" --allow "$K/allow.txt" --db "$TMP/$1/agg.db" \
        --listen tcp://127.0.0.1:0 --port-file "$TMP/$1/port" $COMMON $SETTINGS \
        --rounds "${ROUNDS:-3}" --min-clients 3 --deadline-ms 60000 --gather-ms 200
    wait_for "aggregator $1 wrote its port" 20 test -s "$TMP/$1/port"
    port=$(cat "$TMP/$1/port")
}
# member NAME DIR SHARD ARGS...: a plain client (one process)
member() {
    n=$1 d=$2 sh=$3; shift 3
    # shellcheck disable=SC2086
    start "$n$d" --role client --keys "$K/$n" --allow "$K/allow.txt" --db "$TMP/$d/$n.db" \
        --aggregator "tcp://127.0.0.1:$port" --aggregator-key agg --shard "$sh" $COMMON "$@"
}
# site DIR ARGS...: c0 as two ranks under mpirun, output in $TMP/siteDIR.log
site() {
    d=$1; shift
    # shellcheck disable=SC2086
    $MPIRUN -np "${NP:-2}" "$FEDNODE" run --role client --keys "$K/c0" --allow "$K/allow.txt" \
        --db "$TMP/$d/c0.db" --aggregator "tcp://127.0.0.1:$port" --aggregator-key agg \
        --shard 0/10 $COMMON "$@" >"$TMP/site$d.log" 2>&1 &
    echo $! >"$TMP/site$d.pid"
    PIDS="$PIDS $!"
    MPIS="$MPIS $!"
}
export_model() { "$FEDNODE" export --db "$1" --out "$2" >/dev/null 2>&1 || fail "export $1"; }
accuracy() { field "$1" 3 accuracy; }

# ---- A, B, C
run_job() { # DIR SITE-KIND
    agg "$1"
    member c1 "$1" 1/10
    member c2 "$1" 2/10
    case $2 in
    mpi) site "$1" --mpi-timeout-ms 20000 ;;
    one) member c0 "$1" 0/10 --rank-batch 100 ;;
    plain) member c0 "$1" 0/10 ;;
    esac
    exits0 "agg$1" 180
    if [ "$2" = mpi ]; then exits0 "site$1" 30; else exits0 "c0$1" 30; fi
    grep -q "fednode: error" "$TMP"/*"$1".log && fail "$1: no error lines"
    exits0 "c1$1" 30
    exits0 "c2$1" 30
    export_model "$TMP/$1/agg.db" "$TMP/$1/final.safetensors"
}
run_job a mpi
grep -q "site: rank 0 of 2: this process is the node" "$TMP/sitea.log" ||
    fail "A: rank 0 says it is the node"
grep -q "site: rank 1 of 2: 6000 samples of shard 0/10" "$TMP/sitea.log" ||
    fail "A: rank 1 loads the site's shard"
grep -q "site: rank 1: rank 0 says the site is done" "$TMP/sitea.log" ||
    fail "A: rank 1 ends when rank 0 says so"
ok "A: a site of 2 ranks trains 3 rounds with 2 plain clients; the ranks end with rank 0"
run_job b one
accA=$(accuracy "$TMP/a/agg.db") accB=$(accuracy "$TMP/b/agg.db")
awk -v a="$accA" -v b="$accB" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0.7 && d <= 0.003) }' ||
    fail "A's accuracy $accA within 0.3 point of B's $accB (and above 0.7)"
ok "A ($accA, site of 2 ranks at batch 50 each) and B ($accB, one process at batch 100): within 0.3 point"
# the same steps: the site's training loss (both ranks' shares) each round is
# B's to float rounding (one rank's half alone, or other steps, would not be)
for r in 1 2 3; do
    la=$(field "$TMP/a/c0.db" $r loss) lb=$(field "$TMP/b/c0.db" $r loss)
    awk -v a="$la" -v b="$lb" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(b > 0 && d <= 1e-4 * b) }' ||
        fail "A's round $r training loss $la is B's $lb to 1e-4"
done
ok "A's training loss each round is B's to 1e-4 (the site takes the one process's steps)"
run_job c mpi
cmp -s "$TMP/a/final.safetensors" "$TMP/c/final.safetensors" ||
    fail "C: the final model is bit-identical to A's"
for r in 1 2 3; do
    la=$(field "$TMP/a/c0.db" $r loss) lc=$(field "$TMP/c/c0.db" $r loss)
    [ -n "$la" ] && [ "$la" = "$lc" ] || fail "C: the site's round $r loss ($lc) is A's ($la)"
done
ok "C: two runs with R = 2 give bit-identical models (the aggregator's final), the site the same losses"

# ---- F: R = 1
NP=1 run_job f mpi
run_job p plain
cmp -s "$TMP/f/final.safetensors" "$TMP/p/final.safetensors" ||
    fail "F: mpirun -np 1 gives the plain client's model"
ok "F: R = 1 (mpirun -np 1) and the plain client give bit-identical final models"

# ---- D: rank 1 frozen mid-training
ROUNDS=50 agg d
member c1 d 1/10
member c2 d 2/10
site d --mpi-timeout-ms 3000
wait_for "D: round 1 starts" 60 logged aggd "round 1 starts"
r1=$(mpi_rank_pid sited 1) || fail "D: rank 1's pid"
kill -STOP "$r1"
t=$(date +%s)
wait_exit sited 30
[ "$rc" -ne 0 ] || fail "D: the job exits non-zero (got 0)"
grep -q "site: rank 0 of 2: the gradients' sum failed (timed out; deadline 3000 ms)" "$TMP/sited.log" ||
    grep -q "site: rank 0 of 2: .* failed (timed out; deadline 3000 ms)" "$TMP/sited.log" ||
    fail "D: rank 0 logs that the ranks' exchange timed out"
ok "D: rank 1 frozen: rank 0 logs the timed-out exchange, the job exits $rc after $(($(date +%s) - t)) s"
kill -9 "$(pid aggd)" "$(pid c1d)" "$(pid c2d)" 2>/dev/null

# ---- E: rank 1 killed
ROUNDS=50 agg e
member c1 e 1/10
member c2 e 2/10
site e --mpi-timeout-ms 3000
wait_for "E: round 1 starts" 60 logged agge "round 1 starts"
r1=$(mpi_rank_pid sitee 1) || fail "E: rank 1's pid"
kill -9 "$r1"
wait_exit sitee 30
[ "$rc" -ne 0 ] || fail "E: the job exits non-zero (got 0)"
grep -q "process rank 1 .* exited on signal 9" "$TMP/sitee.log" ||
    fail "E: mpirun names rank 1 and its signal"
ok "E: rank 1 killed: the job exits $rc, mpirun's line names rank 1 and signal 9"
