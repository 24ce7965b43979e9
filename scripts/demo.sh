#!/bin/sh
# demo.sh - `make demo`'s main job (until the simulator lands): train
# mlp:256,128 on Fashion-MNIST with fednode's defaults, one line per epoch,
# then evaluate the saved model. Run from the source root after `make`.
set -eu
FEDNODE=${FEDNODE:-./fednode}
OUT=${TMPDIR:-/tmp}/fednode-demo-model.bin
echo "== fednode train --data fashion-mnist --model mlp:256,128 --epochs 10 --out $OUT"
"$FEDNODE" train --data fashion-mnist --model mlp:256,128 --epochs 10 --out "$OUT"
echo "== fednode eval --model $OUT --data fashion-mnist"
"$FEDNODE" eval --model "$OUT" --data fashion-mnist
rm -f "$OUT"
