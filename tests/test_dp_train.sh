#!/bin/sh
# test_dp_train.sh - `fednode train --dp-sgd` end to end on a shard of
# Fashion-MNIST: it trains (logreg, 2 epochs), prints its DP-SGD settings and
# after each epoch the epsilon that `fednode privacy` gives for the same
# sampling rate, noise multiplier, steps and delta; with --db, the epsilon
# spent kept in the database across a --resume (the resumed run goes on from
# it, status shows it); the refusals (a --dp-delta outside (0, 1), a bad
# --dp-sgd-clip). Needs
# ./fednode (make) and Fashion-MNIST; exits 77 (skipped) without them.
set -u
FEDNODE=${FEDNODE:-./fednode}
DATA=${FEDNODE_DATA:-/usr/share/datasets/fashion-mnist}
if [ ! -x "$FEDNODE" ]; then echo "skipped: no $FEDNODE (run make)"; exit 77; fi
if [ ! -e "$DATA/train-images-idx3-ubyte.gz" ] && [ ! -e "$DATA/train-images-idx3-ubyte" ]; then
    echo "skipped: no Fashion-MNIST in $DATA"; exit 77
fi
TMP=$(mktemp -d) || exit 1
trap 'rm -rf "$TMP"' EXIT
RUN="--data $DATA --model logreg --shard 0/20 --threads 2 --device cpu --batch 50 --no-eval"
DP="--dp-sgd --dp-sgd-clip 0.5 --dp-sgd-noise 1.1 --dp-delta 1e-5"

fail() { echo "FAIL: $1"; sed 's/^/  | /' "$TMP/out"; exit 1; }
refused() {
    d=$1 want=$2 text=$3; shift 3
    "$@" >"$TMP/out" 2>&1; rc=$?
    [ $rc -eq "$want" ] || fail "$d (exit $rc, wanted $want)"
    grep -q -- "$text" "$TMP/out" || fail "$d (no '$text' in the output)"
    echo "ok: $d"
}

# shellcheck disable=SC2086
"$FEDNODE" train $RUN $DP --epochs 2 --optimizer sgd --lr 0.1 >"$TMP/out" 2>&1 ||
    fail "train --dp-sgd (exit $?)"
grep -q "^# DP-SGD: clip 0.5, noise multiplier 1.1, Poisson sampling at q = 0.0166667, 60 steps per epoch" \
    "$TMP/out" || fail "the DP-SGD header"
[ "$(grep -c '^epoch .* epsilon ' "$TMP/out")" -eq 2 ] || fail "epsilon on both epoch lines"
echo "ok: train --dp-sgd: 2 epochs, each with its epsilon"
for e in 1 2; do
    got=$(awk -v e="$e/2" '$1 == "epoch" && $2 == e { for (i = 1; i < NF; i++) if ($i == "epsilon") print $(i + 1) }' "$TMP/out")
    want=$("$FEDNODE" privacy --q 0.0166667 --sigma 1.1 --steps $((60 * e)) --delta 1e-5 |
        awk '$1 == "epsilon" { printf "%.4g\n", $2 }')
    # the printed q is rounded: compare to 3 figures
    awk -v g="$got" -v w="$want" 'BEGIN { exit !(g > 0 && (g - w) * (g - w) < (1e-3 * w) ^ 2) }' ||
        fail "epoch $e: epsilon $got, fednode privacy gives $want"
    echo "ok: epoch $e's epsilon $got = fednode privacy's for $((60 * e)) steps"
done
grep -q "test_acc" "$TMP/out" && fail "--no-eval evaluated"
# --db: epoch 1, then --resume for epoch 2; the second run starts from the
# epsilon the first one spent, and its epoch 2 is epoch 1's steps plus its own
# shellcheck disable=SC2086
"$FEDNODE" train $RUN $DP --epochs 1 --optimizer sgd --lr 0.1 --db "$TMP/n.db" >"$TMP/out" 2>&1 ||
    fail "train --dp-sgd --db (exit $?)"
e1=$(awk '$1 == "epoch" { for (i = 1; i < NF; i++) if ($i == "epsilon") print $(i + 1) }' "$TMP/out")
# shellcheck disable=SC2086
"$FEDNODE" train $RUN $DP --epochs 2 --optimizer sgd --lr 0.1 --db "$TMP/n.db" --resume \
    >"$TMP/out" 2>&1 || fail "train --dp-sgd --db --resume (exit $?)"
grep -q "^# $TMP/n.db: epsilon $e1 spent already (delta 1e-05, 1 releases)" "$TMP/out" ||
    fail "the resumed run starts from epoch 1's epsilon $e1"
e2=$(awk '$1 == "epoch" && $2 == "2/2" { for (i = 1; i < NF; i++) if ($i == "epsilon") print $(i + 1) }' "$TMP/out")
want=$("$FEDNODE" privacy --q 0.0166667 --sigma 1.1 --steps 120 --delta 1e-5 |
    awk '$1 == "epsilon" { printf "%.4g\n", $2 }')
awk -v g="$e2" -v w="$want" 'BEGIN { exit !(g > 0 && (g - w) * (g - w) < (1e-3 * w) ^ 2) }' ||
    fail "resumed epoch 2: epsilon $e2, fednode privacy gives $want for 120 steps"
want4=$("$FEDNODE" privacy --q 0.016666666666666666 --sigma 1.1 --steps 120 --delta 1e-5 |
    awk '$1 == "epsilon" { printf "%.4f\n", $2 }')
"$FEDNODE" status --db "$TMP/n.db" >"$TMP/out" 2>&1 || fail "status"
grep -q "epsilon $want4 at delta 1e-05 spent in 2 releases" "$TMP/out" ||
    fail "status shows epsilon $want4 spent in 2 releases"
echo "ok: --db keeps the epsilon across --resume: $e1 after epoch 1, $e2 after epoch 2 (= fednode privacy's for 120 steps)"
# shellcheck disable=SC2086
refused "--dp-delta 1 is refused" 2 "delta must lie strictly between 0 and 1" \
    "$FEDNODE" train $RUN --dp-sgd --dp-delta 1 --epochs 1
# shellcheck disable=SC2086
refused "--dp-sgd-clip 0 is refused" 2 "dp-sgd-clip" \
    "$FEDNODE" train $RUN --dp-sgd --dp-sgd-clip 0 --epochs 1

# clipping alone (noise 0) spends an infinite epsilon: federated clients still
# report it (as the largest double; the wire takes finite reports only) and
# their deltas go out (they failed "building a DELTA frame" before)
FEDSIM=${FEDSIM:-./fedsim}
if [ -x "$FEDSIM" ]; then
    "$FEDSIM" --data "$DATA" --nodes 4 --model logreg --rounds 2 --dp-sgd --dp-sgd-clip 1 \
        --dp-sgd-noise 0 >"$TMP/out" 2>&1 || fail "fedsim with --dp-sgd-noise 0 ran"
    grep -q "^round    2 .* merged 4 " "$TMP/out" || fail "fedsim with --dp-sgd-noise 0: round 2 merged 4"
    ! grep -q "building a DELTA frame failed" "$TMP/out" || fail "no DELTA frame failed to build"
    echo "ok: --dp-sgd-noise 0 (an infinite epsilon): every client's delta merged"
fi
echo "all checks passed"
