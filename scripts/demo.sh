#!/bin/sh
# demo.sh - `make demo`'s main job: fedsim runs 8 nodes on Fashion-MNIST
# (mlp:256,128, 10 rounds of 1 local epoch) twice, as an aggregator with its
# clients (FedAvg) and as peers gossiping over random:2, prints a row per
# round of each, and draws both in demo.svg. Run from the source root after
# `make`; every frame is sealed and opened, in virtual time.
set -eu
FEDSIM=${FEDSIM:-./fedsim}
OUT=${DEMO_OUT:-.}
RECIPE="--nodes 8 --model mlp:256,128 --rounds 10 --local-epochs 1 --lr 0.05 --momentum 0.9"
echo "== fedsim $RECIPE --role aggregator --strategy fedavg"
# shellcheck disable=SC2086
"$FEDSIM" $RECIPE --role aggregator --strategy fedavg --csv "$OUT/demo-fedavg.csv"
echo "== fedsim $RECIPE --role peer --topology random:2"
# shellcheck disable=SC2086
"$FEDSIM" $RECIPE --role peer --topology random:2 --csv "$OUT/demo-gossip.csv" \
    --compare "aggregator with FedAvg=$OUT/demo-fedavg.csv" --name "peers with push-sum gossip (random:2)" \
    --svg "$OUT/demo.svg"
echo "the chart is $OUT/demo.svg (rows in demo-fedavg.csv and demo-gossip.csv)"
