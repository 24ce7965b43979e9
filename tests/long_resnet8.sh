#!/bin/sh
# long_resnet8.sh - `make test-long`: examples/models/resnet8.cfg (batch
# norm, residual blocks, bias-free convolutions) trained centrally on
# Fashion-MNIST with `fednode train` reaches 0.925 test accuracy or more,
# the model after the last epoch (evaluated with batch norm's running
# statistics). The recipe: SGD lr 0.1, momentum 0.9, weight decay 5e-4,
# batch 128, cosine over 30 epochs, training batches augmented with shifts
# of up to 2 pixels and left-right flips. Parses the last epoch line of
# fednode's own output. Skips (77) without the data set. Long: an epoch is
# 3.4 TFLOP of training (56.6 MFLOP a sample, forward and backward) and the
# test split's evaluation. On the 2-core build host (2026-11-29, shared,
# load 3-5, nice 10) the 30 epochs took 49 minutes (440-860 samples/s) and
# ended at 0.9321; 12 epochs (cosine over 12) had ended at 0.9228, short of
# the bound, which is why the run is 30. RESNET8_EPOCHS=N runs fewer (the
# bound then is not the issue's).
set -u
FEDNODE=${FEDNODE:-./fednode}
DATA=${FEDNODE_DATA:-/usr/share/datasets/fashion-mnist}
CFG="$(dirname "$0")/../examples/models/resnet8.cfg"
EPOCHS=${RESNET8_EPOCHS:-30}
if [ ! -r "$DATA/train-images-idx3-ubyte.gz" ] && [ ! -r "$DATA/train-images-idx3-ubyte" ]; then
    echo "long_resnet8: no Fashion-MNIST at $DATA: skipped"
    exit 77
fi
if [ ! -x "$FEDNODE" ]; then
    echo "long_resnet8: $FEDNODE not built"
    exit 1
fi
out=$("$FEDNODE" train --data "$DATA" --model "$CFG" --epochs "$EPOCHS" --batch 128 \
    --optimizer sgd --lr 0.1 --momentum 0.9 --weight-decay 5e-4 --schedule cosine \
    --augment crop:2,flip --device cpu 2>&1)
rc=$?
echo "$out" | grep -E '^(#|epoch)' | sed 's/^/    /'
acc=$(echo "$out" | awk '$1 == "epoch" { for (i = 1; i < NF; i++) if ($i == "test_acc") a = $(i + 1) }
                         END { print a }')
if [ $rc -ne 0 ] || [ -z "$acc" ]; then
    echo "FAIL resnet8.cfg $EPOCHS epochs: fednode exited $rc"
    echo "$out" | tail -5
    exit 1
fi
if awk -v a="$acc" 'BEGIN { exit !(a >= 0.925) }'; then
    echo "ok   resnet8.cfg $EPOCHS epochs: test accuracy $acc >= 0.925"
    exit 0
fi
echo "FAIL resnet8.cfg $EPOCHS epochs: test accuracy $acc < 0.925"
exit 1
