#!/bin/sh
# long_accuracy.sh - `make test-long`: fednode train on Fashion-MNIST with its
# defaults reaches the issue's accuracy targets: mlp:256,128 in 10 epochs
# >= 0.88, cnn in 5 epochs >= 0.90, logreg in 5 epochs >= 0.83 (test split);
# and with DP-SGD at epsilon <= 3 (delta 1e-5), mlp:256,128 >= 0.80 (the
# settings docs/privacy.md gives). Parses the last epoch line of fednode's own output. Skips (77) without
# the data set. Takes a few minutes on 2 cores (the cnn most of it).
set -u
FEDNODE=${FEDNODE:-./fednode}
DATA=${FEDNODE_DATA:-/usr/share/datasets/fashion-mnist}
if [ ! -r "$DATA/train-images-idx3-ubyte.gz" ] && [ ! -r "$DATA/train-images-idx3-ubyte" ]; then
    echo "long_accuracy: no Fashion-MNIST at $DATA: skipped"
    exit 77
fi
if [ ! -x "$FEDNODE" ]; then
    echo "long_accuracy: $FEDNODE not built"
    exit 1
fi
fail=0

# check SPEC EPOCHS MIN: train with the defaults, compare the final test_acc
check() {
    out=$("$FEDNODE" train --data "$DATA" --model "$1" --epochs "$2" 2>&1)
    rc=$?
    echo "$out" | grep -E '^(#|epoch)' | sed 's/^/    /'
    acc=$(echo "$out" | awk '$1 == "epoch" { for (i = 1; i < NF; i++) if ($i == "test_acc") a = $(i + 1) }
                             END { print a }')
    if [ $rc -ne 0 ] || [ -z "$acc" ]; then
        echo "FAIL $1 $2 epochs: fednode exited $rc"
        echo "$out" | tail -5
        fail=1
    elif awk -v a="$acc" -v m="$3" 'BEGIN { exit !(a >= m) }'; then
        echo "ok   $1 $2 epochs: test accuracy $acc >= $3"
    else
        echo "FAIL $1 $2 epochs: test accuracy $acc < $3"
        fail=1
    fi
}

check mlp:256,128 10 0.88
check logreg 5 0.83
check cnn 5 0.90

# DP-SGD: batch 256 of 60,000 (q = 0.00427), 20 epochs (4,700 steps), noise
# multiplier 0.803 (fednode privacy --target-epsilon 3 gives 0.80287), clip 1,
# SGD lr 0.05 momentum 0.9 cosine: epsilon <= 3 and test accuracy >= 0.80
out=$("$FEDNODE" train --data "$DATA" --model mlp:256,128 --epochs 20 --batch 256 --device cpu \
    --optimizer sgd --lr 0.05 --momentum 0.9 --schedule cosine \
    --dp-sgd --dp-sgd-clip 1 --dp-sgd-noise 0.803 --dp-delta 1e-5 2>&1)
rc=$?
echo "$out" | grep -E '^(#|epoch)' | sed 's/^/    /'
last=$(echo "$out" | awk '$1 == "epoch" { l = $0 } END { print l }')
acc=$(echo "$last" | awk '{ for (i = 1; i < NF; i++) if ($i == "test_acc") print $(i + 1) }')
eps=$(echo "$last" | awk '{ for (i = 1; i < NF; i++) if ($i == "epsilon") print $(i + 1) }')
if [ $rc -ne 0 ] || [ -z "$acc" ] || [ -z "$eps" ]; then
    echo "FAIL DP-SGD mlp:256,128: fednode exited $rc"
    echo "$out" | tail -5
    fail=1
elif awk -v a="$acc" -v e="$eps" 'BEGIN { exit !(a >= 0.80 && e <= 3) }'; then
    echo "ok   DP-SGD mlp:256,128 20 epochs: test accuracy $acc >= 0.80 at epsilon $eps <= 3"
else
    echo "FAIL DP-SGD mlp:256,128 20 epochs: test accuracy $acc at epsilon $eps (want >= 0.80, <= 3)"
    fail=1
fi
exit $fail
