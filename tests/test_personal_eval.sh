#!/bin/sh
# test_personal_eval.sh - a client's own model scored at its site (issue
# 38): an aggregator and two clients on Fashion-MNIST, labels:2 (each
# client holds two labels), Ditto (--ditto-lambda 0.1), 3 rounds of
# logreg. Each client runs --personal-eval: before each round's training it
# scores its own model (round 1: the global; later rounds its personal
# model) on its part of the test split, cut as its training part is; the
# log says so with the split's size, and its database keeps the figure as
# the round's accuracy. Round 3's figure beats round 1's (the personal
# model fits the client's two labels). Then FedAvg + fine-tuning: a client
# with --finetune-epochs 1 scores a fine-tuned copy (above 0.8 at round 1),
# one without scores the initial global model (below 0.5).
# Last, noise:3: the noisy party is scored on noisy test inputs.
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

# An aggregator (logreg, ROUNDS rounds, no Ditto) named A in $TMP/DIR and
# clients B0, B1 (c0's and c1's keys) with --partition PART, c0 with
# options OPTS0 and c1 with OPTS1, run to the end.
pair() {
    dir=$1 a=$2 b=$3 rounds=$4 part=$5 opts0=$6 opts1=$7
    mkdir -p "$TMP/$dir"
    start "$a" --role aggregator --keys "$K/agg" --allow "$K/allow.txt" --db "$TMP/$dir/agg.db" \
        --listen tcp://127.0.0.1:0 --port-file "$TMP/$dir/port" --data "$DATA" --model logreg \
        --rounds "$rounds" --min-clients 2 --wait-clients 2 --gather-ms 500 --deadline-ms 60000 \
        --lr 0.05 --threads 1 --linger-ms 500 --no-eval
    wait_for "the aggregator wrote its port" 20 test -s "$TMP/$dir/port"
    PORT=$(cat "$TMP/$dir/port")
    for i in 0 1; do
        if [ "$i" = 0 ]; then o=$opts0; else o=$opts1; fi
        # shellcheck disable=SC2086
        start "$b$i" --role client --keys "$K/c$i" --allow "$K/allow.txt" \
            --db "$TMP/$dir/c$i.db" --aggregator "tcp://127.0.0.1:$PORT" --aggregator-key agg \
            --threads 1 --data "$DATA" --partition "$part" --shard "$i/2" --personal-eval $o
    done
    wait_for "round $rounds merged" 120 logged "$a" "round $rounds merged"
    exits0 "$a" 30
    for i in 0 1; do exits0 "$b$i" 30; done
}

# FedAvg + fine-tuning, the baseline: c0 fine-tunes one epoch before it
# scores, c1 does not; at round 1 (the initial global model) c0's figure is
# that of a model fitted to its two labels, c1's that of the untrained one
pair b agg2 d 2 labels:2 "--finetune-epochs 1" ""
f0=$(field "$TMP/b/c0.db" 1 accuracy)
f1=$(field "$TMP/b/c1.db" 1 accuracy)
awk -v a="$f0" -v b="$f1" 'BEGIN { exit !(a > 0.8 && b < 0.5) }' ||
    fail "round 1: c0 fine-tuned scores above 0.8 ($f0), c1 on the initial global below 0.5 ($f1)"
ok "--finetune-epochs 1: the fine-tuned copy is scored ($f0 against $f1 without)"

# noise:3 over 2 parties: c1's inputs get Gaussian noise of std 3, c0's
# none. Each fine-tunes one epoch and scores at round 1: c1's local test
# inputs carry its noise too, so its figure falls far below c0's (scored on
# clean inputs, a model trained with noise scores nearly as c0's does)
pair n agg3 n 1 noise:3 "--finetune-epochs 1" "--finetune-epochs 1"
g0=$(field "$TMP/n/c0.db" 1 accuracy)
g1=$(field "$TMP/n/c1.db" 1 accuracy)
awk -v a="$g0" -v b="$g1" 'BEGIN { exit !(a > 0.7 && b < a - 0.15) }' ||
    fail "noise:3: c1 scored on its noisy test inputs ($g1) far below c0 on clean ones ($g0)"
ok "noise:3: a party's local test inputs carry its noise (c1 $g1, c0 $g0)"
