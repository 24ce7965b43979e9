#!/bin/sh
# bench_dp_fedavg.sh - what client-level DP costs: fedsim, 1,000 clients
# (IID Fashion-MNIST, 60 samples each), 10% Poisson-sampled a round, 50
# rounds of DP-FedAvg (clip 1, equal weights over the expected cohort of
# 100) at three noise multipliers, against the same run without DP (plain
# FedAvg sampling 10%) as the reference, in the same run. Prints one line per
# run: epsilon after round 50 (delta 1e-5) and test accuracy after rounds 10
# and 50; with SVG=FILE also the chart of accuracy against round and against
# epsilon (docs/privacy.md shows docs/dp_fedavg.svg). MODEL (default logreg), ROUNDS,
# NOISES ("0.5 1 2") and NODES change the scenario. fedsim draws the noise
# from a seeded stream: the figures repeat, and the runs are not private.
set -u
FEDSIM=${FEDSIM:-./fedsim}
if [ ! -x "$FEDSIM" ]; then echo "bench_dp_fedavg: skipped: no $FEDSIM (run make)"; exit 0; fi
DATA=${FEDNODE_DATA:-/usr/share/datasets/fashion-mnist}
if [ ! -e "$DATA/train-images-idx3-ubyte.gz" ] && [ ! -e "$DATA/train-images-idx3-ubyte" ]; then
    echo "bench_dp_fedavg: skipped: no Fashion-MNIST in $DATA"; exit 0
fi
MODEL=${MODEL:-logreg}
ROUNDS=${ROUNDS:-50}
NODES=${NODES:-1000}
NOISES=${NOISES:-0.5 1 2}
TMP=$(mktemp -d) || exit 1
trap 'rm -rf "$TMP"' EXIT
SIM="--data $DATA --nodes $NODES --fraction 0.1 --model $MODEL --rounds $ROUNDS --batch 16 \
--local-epochs 2 --optimizer sgd --lr 0.05"
# at ROUND: "accuracy epsilon" of CSV's row ROUND
at() { awk -F, -v r="$2" '$1 == r { printf "%.4f %.4f\n", $3, $8 }' "$1"; }
line() {
    a10=$(at "$2" 10 | cut -d' ' -f1)
    set -- "$1" $(at "$2" "$ROUNDS")
    printf '%-30s epsilon %8s  accuracy %s (round 10: %s)\n' "$1" "$3" "$2" "$a10"
}
echo "bench_dp_fedavg: $NODES clients, 10% a round, $MODEL, $ROUNDS rounds, delta 1e-5 ($(nproc) cores)"
# shellcheck disable=SC2086
"$FEDSIM" $SIM --csv "$TMP/nodp.csv" >/dev/null 2>&1 || { echo "fedsim failed"; exit 1; }
line "no DP (reference):" "$TMP/nodp.csv" | sed 's/epsilon  *0.0000/epsilon      inf/'
compare="no DP=$TMP/nodp.csv"
last=$(echo "$NOISES" | awk '{ print $NF }')
for z in $NOISES; do
    set --
    if [ -n "${SVG:-}" ] && [ "$z" = "$last" ]; then # the chart, with the runs before it
        set -- --svg "$SVG" --svg-x epsilon --name "z $z" --compare "$compare"
    fi
    # shellcheck disable=SC2086
    "$FEDSIM" $SIM --dp-client-clip 1 --dp-client-noise "$z" --csv "$TMP/z$z.csv" "$@" \
        >"$TMP/out" 2>&1 || { echo "fedsim z $z failed"; cat "$TMP/out"; exit 1; }
    line "DP-FedAvg z $z, clip 1:" "$TMP/z$z.csv"
    compare="$compare,z $z=$TMP/z$z.csv"
done
[ -n "${SVG:-}" ] && grep "^wrote" "$TMP/out"
exit 0
