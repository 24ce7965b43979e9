#!/bin/sh
# long_fed_schedule.sh - `make test-long`: federated as good as centralized.
# Trained in one place, `fednode train --model mlp:256,128 --epochs 10` (Adam
# 0.002, cosine, batch 64) reaches 0.8975 test accuracy (seed 1; seeds 1-4
# mean 0.8952). Ten IID clients of the same model in fedsim, FedAvg, one
# local epoch a round, with docs/simulator.md's recipe (a learning-rate schedule across
# the rounds, sent in each round's settings) must end 40 rounds at 0.885 or
# more (that mean less 1 point), for seeds 1, 2 and 3: the model after the
# last round, not only a good round on the way (at a fixed rate the rounds
# swing: seed 2 touched 0.8874 on the way yet ended at 0.8848). Ten peers on
# the same shards (push-sum on random:3, bsp), with the same settings and
# rounds, must end (round 40, the peers' mean) within 1 point of FedAvg's
# round-40 figure of the same seed. Prints the table. Skips (77) without the
# data set. Seven minutes of CPU (two cores; 10-16 minutes on a busy host).
set -u
FEDSIM=${FEDSIM:-./fedsim}
DATA=${FEDNODE_DATA:-/usr/share/datasets/fashion-mnist}
if [ ! -r "$DATA/train-images-idx3-ubyte.gz" ] && [ ! -r "$DATA/train-images-idx3-ubyte" ]; then
    echo "long_fed_schedule: no Fashion-MNIST at $DATA: skipped"
    exit 77
fi
if [ ! -x "$FEDSIM" ]; then
    echo "long_fed_schedule: $FEDSIM not built"
    exit 1
fi
# docs/simulator.md's recipe ("Federated as good as centralized"); keep the two equal
RECIPE="--optimizer sgd --momentum 0.9 --lr 0.05 --lr-schedule cosine --lr-warmup 2"
RUN="--data $DATA --nodes 10 --model mlp:256,128 --partition iid --rounds 40 --local-epochs 1
     --batch 64 $RECIPE"
PEERS="--role peer --topology random:3 --sync bsp --mixing pushsum"
TARGET=0.885
TMP=$(mktemp -d) || exit 1
trap 'rm -rf "$TMP"' EXIT
fail=0

# sim OUT ARGS...: one fedsim run, its lines in OUT; exits 1 on failure
sim() {
    out=$1
    shift
    # shellcheck disable=SC2086
    "$FEDSIM" $RUN "$@" >"$out" 2>&1
    rc=$?
    [ $rc -eq 0 ] && return 0
    echo "FAIL fedsim $*: exit status $rc"
    tail -5 "$out"
    return 1
}
# col OUT FIELD: FIELD's value on the last round line; best OUT: the highest accuracy
col() { awk -v f="$2" '$1 == "round" { for (i = 1; i < NF; i++) if ($i == f) v = $(i + 1) } END { print v }' "$1"; }
best() { awk '$1 == "round" && $7 > b { b = $7; r = $2 } END { printf "%s@%s", b, r }' "$1"; }

# shellcheck disable=SC2086
echo "recipe: fedsim" $RUN
printf '%-5s  %-14s  %-8s  %-8s  %-8s  %-12s\n' seed "fedavg best" "fedavg" "peers" "spread" "peers-fedavg"
for seed in 1 2 3; do
    sim "$TMP/avg$seed" --seed "$seed" || { fail=1; continue; }
    sim "$TMP/peer$seed" --seed "$seed" $PEERS || { fail=1; continue; }
    b=$(best "$TMP/avg$seed") a=$(col "$TMP/avg$seed" accuracy)
    p=$(col "$TMP/peer$seed" accuracy) s=$(col "$TMP/peer$seed" spread)
    d=$(awk -v p="$p" -v a="$a" 'BEGIN { printf "%+.4f", p - a }')
    printf '%-5s  %-14s  %-8s  %-8s  %-8s  %-12s\n' "$seed" "$b" "$a" "$p" "$s" "$d"
    lr1=$(awk '$1 == "round" && $2 == 1 { for (i = 1; i < NF; i++) if ($i == "lr") print $(i + 1) }' "$TMP/avg$seed")
    [ "$lr1" = "0.01667" ] || { echo "FAIL seed $seed: round 1 trained at lr '$lr1', wanted 0.05 / 3 (warm-up)"; fail=1; }
    awk -v a="$a" -v t=$TARGET 'BEGIN { exit !(a >= t) }' ||
        { echo "FAIL seed $seed: FedAvg ended at $a < $TARGET after 40 rounds (best ${b%@*})"; fail=1; }
    awk -v d="$d" 'BEGIN { exit !(d >= -0.01 && d <= 0.01) }' ||
        { echo "FAIL seed $seed: the peers ended at $p, not within 1 point of FedAvg's $a"; fail=1; }
done
[ $fail -eq 0 ] && echo "ok   FedAvg >= $TARGET after 40 rounds for seeds 1-3; peers within 1 point of it"
exit $fail
