#!/bin/sh
# test_secagg_procs.sh - secure aggregation with real fednode processes on
# 127.0.0.1: an aggregator with --secagg and 5 clients (logreg, 3 local
# epochs, IID fifths of Fashion-MNIST, 5 rounds; logreg, since an MLP's
# rounds amplify any tiny difference and would compare noise; c0 trains on
# everything, so its masked input comes late). Client c0 is killed (-9) the moment its log
# says its shares went out in round 1, before its masked input can leave:
# round 1 still completes with the other 4 (c0's pairwise masks removed
# from its neighbours' shares), c0's row says it dropped after sharing, the
# tries table and `status` show it, verify checks every signed masked
# input. The same run without --secagg, c0 never started (the same 4
# clients in every round): the accuracy after round 5 is within 0.5 point.
# Needs ./fednode (make) and Fashion-MNIST; exits 77 (skipped) without them.
# KEEP=1 keeps the temporary directory.
. "$(dirname "$0")/proc_lib.sh"

K=$TMP/keys
allow_keys "$K" agg c0 c1 c2 c3 p0
mkdir -p "$TMP/s" "$TMP/p"
COMMON="--data fashion-mnist --threads 1"
SETTINGS="--model logreg --optimizer sgd --momentum 0.9 --lr 0.05 --batch 64 --local-epochs 3
          --rounds 5 --min-clients 4 --deadline-ms 4000 --poll-ms 1000"
# client RUN NAME SHARD: client NAME on shard SHARD (I/K) of run RUN's aggregator
client() {
    start "$1$2" --role client --keys "$K/$2" --allow "$K/allow.txt" --db "$TMP/$1/$2.db" \
        --aggregator "tcp://127.0.0.1:$(cat "$TMP/$1/port")" --aggregator-key agg \
        --partition iid --shard "$3" --poll-ms 1000 --retry-ms 1000 $COMMON
}

# ---- secure: c0 dies after its shares went out
# shellcheck disable=SC2086
start aggS --role aggregator --keys "$K/agg" --allow "$K/allow.txt" --db "$TMP/s/agg.db" \
    --listen tcp://127.0.0.1:0 --port-file "$TMP/s/port" $COMMON $SETTINGS \
    --wait-clients 5 --gather-ms 2000 --secagg --secagg-stage-ms 3000 --linger-ms 3000
wait_for "the secure aggregator wrote its port" 20 test -s "$TMP/s/port"
# c0 trains on all of the training set, five times the others' work: its
# shares go out at once, its masked input only seconds later, long after
# the test has killed it (however loaded the host)
client s c0 0/1
i=1
for n in c1 c2 c3 p0; do client s $n $i/5; i=$((i + 1)); done
wait_for "c0's shares went out in round 1" 60 logged sc0 "secagg round 1: shares out"
kill -9 "$(pid sc0)"
ok "c0 killed as its shares went out"
wait_for "secure round 1 merged" 60 logged aggS "round 1 merged"
logged aggS "round 1 merged 4 of 5" || fail "round 1 merged the 4 live clients"
logged aggS "secagg: round 1 try 0 unmasked: 4 in the sum, 1 dropped after sharing" ||
    fail "round 1 unmasked with c0 dropped after sharing"
ok "round 1 completed with 4, c0's masks removed"
exits0 aggS 120
C0=$(keyhex "$K/c0")
[ "$(contrib "$TMP/s/agg.db" 1 "$C0")" = "false,secagg: dropped after sharing" ] ||
    fail "c0's round-1 row says it dropped after sharing (got $(contrib "$TMP/s/agg.db" 1 "$C0"))"
rounds_once "$TMP/s/agg.db" 5
"$FEDNODE" status --db "$TMP/s/agg.db" >"$TMP/status.out" 2>&1 || fail "status"
grep -q "secure aggregation" "$TMP/status.out" || fail "status shows the secure tries"
verify "$TMP/s/agg.db"
grep -q "contributions: 20 signatures ok, 0 bad" "$TMP/verify.out" ||
    fail "verify checked the 20 signed masked inputs ($(tail -3 "$TMP/verify.out"))"
ok "c0's row, 5 rounds, status, verify (20 signed masked inputs)"
acc_s=$(field "$TMP/s/agg.db" 5 accuracy)

# ---- plain: the same 4 clients
# shellcheck disable=SC2086
start aggP --role aggregator --keys "$K/agg" --allow "$K/allow.txt" --db "$TMP/p/agg.db" \
    --listen tcp://127.0.0.1:0 --port-file "$TMP/p/port" $COMMON $SETTINGS --wait-clients 4 \
    --gather-ms 300 --linger-ms 3000
wait_for "the plain aggregator wrote its port" 20 test -s "$TMP/p/port"
i=1
for n in c1 c2 c3 p0; do client p $n $i/5; i=$((i + 1)); done
exits0 aggP 120
acc_p=$(field "$TMP/p/agg.db" 5 accuracy)
echo "accuracy after round 5: secure $acc_s, plain $acc_p"
awk -v a="$acc_s" -v b="$acc_p" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.005) }' ||
    fail "secure $acc_s within 0.5 point of plain $acc_p"
ok "accuracy within 0.5 point of the plain run"
