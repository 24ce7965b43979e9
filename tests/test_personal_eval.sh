#!/bin/sh
# test_personal_eval.sh - a client's own model scored at its site (issue
# 38): an aggregator and two clients on Fashion-MNIST, labels:2 (each
# client holds two labels), Ditto (--ditto-lambda 0.1), 3 rounds of
# logreg. Each client runs --personal-eval: before each round's training it
# scores its own model (round 1: the global; later rounds its personal
# model) on its part of the test split, cut as its training part is; the
# log says so with the split's size, and its database keeps the figure as
# the round's accuracy. Round 3's figure beats round 1's (the personal
# model fits the client's two labels).
# Needs ./fednode and Fashion-MNIST; exits 77 (skipped) without.
. "$(dirname "$0")/proc_lib.sh"

K=$TMP/keys
allow_keys "$K" agg c0 c1
mkdir -p "$TMP/a"
start agg --role aggregator --keys "$K/agg" --allow "$K/allow.txt" --db "$TMP/a/agg.db" \
    --listen tcp://127.0.0.1:0 --port-file "$TMP/a/port" --data "$DATA" --model logreg \
    --rounds 3 --min-clients 2 --wait-clients 2 --gather-ms 500 --deadline-ms 60000 \
    --lr 0.05 --threads 1 --linger-ms 500 --ditto-lambda 0.1 --no-eval
wait_for "the aggregator wrote its port" 20 test -s "$TMP/a/port"
PORT=$(cat "$TMP/a/port")
for i in 0 1; do
    start "c$i" --role client --keys "$K/c$i" --allow "$K/allow.txt" --db "$TMP/a/c$i.db" \
        --aggregator "tcp://127.0.0.1:$PORT" --aggregator-key agg --threads 1 --data "$DATA" \
        --partition labels:2 --shard "$i/2" --personal-eval
done
wait_for "round 3 merged" 120 logged agg "round 3 merged"
exits0 agg 30
for i in 0 1; do exits0 "c$i" 30; done
for i in 0 1; do
    # labels:2 over 2 parties: each holds 2 labels, 2000 of the 10000 test samples
    logged "c$i" "client: round 1: its own model scores accuracy .* on its local test split (2000 samples), before training" ||
        { cat "$TMP/c$i.log"; fail "c$i logs its own model's score on its 2000 local test samples"; }
    a1=$(field "$TMP/a/c$i.db" 1 accuracy)
    a3=$(field "$TMP/a/c$i.db" 3 accuracy)
    [ -n "$a1" ] && [ -n "$a3" ] && [ "$a1" != "null" ] || fail "c$i's rounds keep the figure ($a1, $a3)"
    awk -v a="$a1" -v b="$a3" 'BEGIN { exit !(b > a && b > 0.8) }' ||
        fail "c$i: its personal model at round 3 ($a3) beats round 1's global ($a1) and passes 0.8"
    ok "c$i: its own model scored each round on its local test split ($a1 at round 1, $a3 at round 3)"
done
