#!/bin/sh
# test_secagg_restart.sh - a secure aggregator killed mid-round with real
# fednode processes on 127.0.0.1: an aggregator with --secagg and 3 clients
# (logreg, 5 local epochs, c0 on all of Fashion-MNIST, so its masked input
# comes long after the shares; default retry and poll times), killed (-9)
# the moment a client's log says its shares of round 1 went out, and
# started again on the same port and database. Each client's next request reaches the new process,
# addressed to the dead epoch, and is answered FED_ERR_OLD_EPOCH: the
# client logs that the aggregator restarted and says HELLO at once (before,
# it asked the dead epoch for up to 64 + deadline/retry tries, about 3
# minutes with the defaults); the 3 rounds commit, 2 and 3 with all 3
# clients (round 1 is void when a masked input had gone out before the kill).
# Prints the seconds from the restart to the next round's start and the
# frames refused as addressed to the dead epoch (figures, not checks).
# Needs ./fednode (make) and Fashion-MNIST; exits 77 (skipped) without them.
# KEEP=1 keeps the temporary directory.
. "$(dirname "$0")/proc_lib.sh"

K=$TMP/keys
allow_keys "$K" agg c0 c1 c2
COMMON="--data fashion-mnist --threads 1"
SETTINGS="--model logreg --optimizer sgd --lr 0.05 --batch 64 --local-epochs 5 --rounds 3
          --min-clients 3 --wait-clients 3 --gather-ms 500 --secagg --secagg-stage-ms 5000"
# agg NAME LISTEN: the aggregator, its database in $TMP/agg.db
agg() {
    # shellcheck disable=SC2086
    start "$1" --role aggregator --keys "$K/agg" --allow "$K/allow.txt" --db "$TMP/agg.db" \
        --listen "$2" --port-file "$TMP/port" $COMMON $SETTINGS --linger-ms 3000
}
agg agg1 tcp://127.0.0.1:0
wait_for "the aggregator wrote its port" 20 test -s "$TMP/port"
P=$(cat "$TMP/port")
# c0 trains on all of the training set, 3 times the others' work: round 1
# lasts seconds after its shares went out, however fast the host
for n in c0:0/1 c1:1/3 c2:2/3; do
    # shellcheck disable=SC2086
    start "${n%%:*}" --role client --keys "$K/${n%%:*}" --allow "$K/allow.txt" \
        --db "$TMP/${n%%:*}.db" --aggregator "tcp://127.0.0.1:$P" --aggregator-key agg \
        --partition iid --shard "${n#*:}" $COMMON
done
wait_for "a client's shares of round 1 went out" 60 logged c0 "secagg round 1: shares out"
kill -9 "$(pid agg1)"
ok "the aggregator killed as round 1's shares went out"
rm -f "$TMP/port"
sleep 1
t_restart=$(date +%s%N)
agg agg2 "tcp://127.0.0.1:$P"
wait_for "the restarted aggregator listens" 20 test -s "$TMP/port"
wait_for "the restarted aggregator starts a round" 120 logged agg2 "round [0-9]* starts with 3 of 3"
t_start=$(date +%s%N)
for n in c0 c1 c2; do
    logged "$n" "client: the aggregator restarted (epoch" ||
        fail "$n heard that the aggregator restarted"
done
ok "each client heard the restart (FED_ERR_OLD_EPOCH) and said HELLO"
exits0 agg2 120
rounds_once "$TMP/agg.db" 3
# round 1: all 3, or none when a client's masked input had gone out before
# the kill (it declines a second try of the round, which is then void)
# merged DB ROUND: the contributions of ROUND merged
merged() { contrib "$1" "$2" '[0-9a-f]*' | grep -c '^true,'; }
m1=$(merged "$TMP/agg.db" 1)
[ "$m1" = 3 ] || [ "$m1" = 0 ] || fail "round 1 merged all 3 or none (void), not $m1"
for r in 2 3; do
    [ "$(merged "$TMP/agg.db" "$r")" = 3 ] || fail "round $r merged the 3 clients"
done
ok "rounds 1..3 committed (round 1 with $m1), rounds 2 and 3 with the 3 clients"
echo "restart to the next round's start: $(((t_start - t_restart) / 1000000)) ms;" \
    "frames to the dead epoch refused: $(counter "$TMP/agg.db" wire.rej_old_epoch)"
echo "passed ($(($(date +%s) - T0)) s)"
