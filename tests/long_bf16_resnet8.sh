#!/bin/sh
# long_bf16_resnet8.sh - `make test-long`: examples/models/resnet8.cfg
# trained centrally on Fashion-MNIST twice with the same seed and recipe,
# `--precision fp32` then `--precision bf16` (every conv and linear GEMM on
# bfloat16 operands summed in fp32; batch norm, the loss and the optimizer
# stay fp32): bf16's last test accuracy within 0.5 point (0.005) of fp32's.
# The recipe is long_resnet8.sh's (SGD lr 0.1, momentum 0.9, weight decay
# 5e-4, batch 128, cosine over the run, shifts and flips) for
# BF16_RESNET8_EPOCHS epochs, 2 by default: enough, since the cosine
# schedule ends at rate 0, so both runs settle (after the first of the two
# epochs, at half the rate, they stood 5 points apart: fp32 0.8015, bf16 0.7507).
# Measured on the shared 2-core build host (2026-11-29, nice 19, load 6-10):
# fp32 0.8743, bf16 0.8758 (0.15 point), the runs 22 and 16 minutes wall;
# one seed, one run. Parses the last epoch line of
# fednode's own output. Skips (77) without the data set, or on a CPU
# without AVX512-BF16 (/proc/cpuinfo's avx512_bf16), where fednode refuses
# bf16.
set -u
FEDNODE=${FEDNODE:-./fednode}
DATA=${FEDNODE_DATA:-/usr/share/datasets/fashion-mnist}
CFG="$(dirname "$0")/../examples/models/resnet8.cfg"
EPOCHS=${BF16_RESNET8_EPOCHS:-2}
if [ ! -r "$DATA/train-images-idx3-ubyte.gz" ] && [ ! -r "$DATA/train-images-idx3-ubyte" ]; then
    echo "long_bf16_resnet8: no Fashion-MNIST at $DATA: skipped"
    exit 77
fi
if ! grep -qw avx512_bf16 /proc/cpuinfo 2>/dev/null; then
    echo "long_bf16_resnet8: the CPU lacks AVX512-BF16 (no avx512_bf16 in /proc/cpuinfo)," \
         "so fednode refuses --precision bf16: skipped"
    exit 77
fi
if [ ! -x "$FEDNODE" ]; then
    echo "long_bf16_resnet8: $FEDNODE not built"
    exit 1
fi

# train PRECISION: the last epoch's test accuracy on stdout, or exit 1
train() {
    out=$("$FEDNODE" train --data "$DATA" --model "$CFG" --epochs "$EPOCHS" --batch 128 \
        --optimizer sgd --lr 0.1 --momentum 0.9 --weight-decay 5e-4 --schedule cosine \
        --augment crop:2,flip --seed 7 --precision "$1" --device cpu 2>&1)
    rc=$?
    echo "$out" | grep -E '^(#|epoch)' | sed "s/^/    $1: /" >&2
    a=$(echo "$out" | awk '$1 == "epoch" { for (i = 1; i < NF; i++) if ($i == "test_acc") a = $(i + 1) }
                           END { print a }')
    if [ $rc -ne 0 ] || [ -z "$a" ]; then
        echo "FAIL resnet8.cfg $1, $EPOCHS epochs: fednode exited $rc" >&2
        echo "$out" | tail -5 >&2
        return 1
    fi
    echo "$a"
}

fp32=$(train fp32) || exit 1
bf16=$(train bf16) || exit 1
if awk -v a="$fp32" -v b="$bf16" 'BEGIN { d = b - a; if (d < 0) d = -d; exit !(d <= 0.005) }'; then
    echo "ok   resnet8.cfg $EPOCHS epochs: bf16 test accuracy $bf16, fp32 $fp32 (within 0.005)"
    exit 0
fi
echo "FAIL resnet8.cfg $EPOCHS epochs: bf16 test accuracy $bf16, fp32 $fp32 (more than 0.005 apart)"
exit 1
