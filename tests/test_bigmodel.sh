#!/bin/sh
# test_bigmodel.sh - the single-process options for models bigger than a
# process: `fednode model FILE --plan` prints SimpleCNN's memory and FLOPs
# per step (its 44426 parameters, forward + backward 256 x 1526000 FLOPs,
# Adam's two floats a parameter, a deep net's activations at --recompute 2
# below those at 1 and the recomputed forwards' FLOPs); `fednode train`
# with --recompute 2 prints the same epoch line as without it, and with
# --accumulate refuses DP-SGD, an unknown --precision refused, each with
# the reason; `fednode model` refuses a bad --plan setting before it prints,
# and a --plan setting without --plan. Skips (77) without Fashion-MNIST
# (proc_lib.sh).
. "$(dirname "$0")/proc_lib.sh"
CFG="$(dirname "$0")/../examples/models/simplecnn.cfg"
export FEDNODE_NO_REEXEC=1

"$FEDNODE" model "$CFG" --classes 10 --plan --batch 256 --optimizer adam >"$TMP/plan.txt" 2>&1 ||
    { cat "$TMP/plan.txt"; fail "fednode model --plan"; }
for row in '^# plan: batch 256, precision fp32, recompute 1, optimizer adam; one process$' \
           '^parameters  *0\.2 MiB  (44426 floats' \
           '^optimizer state  *0\.3 MiB  (adam: 2 floats a parameter)' \
           '^FLOPs per step  *3\.907e+08  (forward + backward 3\.907e+08, recomputed forwards 0)'; do
    grep -q "$row" "$TMP/plan.txt" || { cat "$TMP/plan.txt"; fail "--plan prints /$row/"; }
done
ok "fednode model --plan: SimpleCNN's parameters, optimizer state and FLOPs per step"

# a bad --plan setting is refused before anything is printed; one without
# --plan is refused, not ignored
"$FEDNODE" model "$CFG" --plan --precision fp16 >"$TMP/fp16.txt" 2>"$TMP/fp16.err"
rc=$?
[ "$rc" -eq 2 ] || fail "--plan --precision fp16 exits 2, not $rc"
[ -s "$TMP/fp16.txt" ] && { cat "$TMP/fp16.txt"; fail "--precision fp16: nothing printed before the refusal"; }
grep -qx "fednode: model: --precision: 'fp16' is not fp32 or bf16" "$TMP/fp16.err" ||
    { cat "$TMP/fp16.err"; fail "the refusal names --precision"; }
"$FEDNODE" model "$CFG" --batch 64 >"$TMP/nobatch.txt" 2>"$TMP/nobatch.err"
rc=$?
[ "$rc" -eq 2 ] || fail "--batch without --plan exits 2, not $rc"
[ -s "$TMP/nobatch.txt" ] && { cat "$TMP/nobatch.txt"; fail "--batch without --plan: nothing printed"; }
grep -qx "fednode: model: --batch is a setting of --plan (what a training process holds): add --plan, or drop it" \
    "$TMP/nobatch.err" || { cat "$TMP/nobatch.err"; fail "the refusal names --batch and --plan"; }
ok "fednode model: --precision fp16 refused before the table; --batch without --plan refused"

cat >"$TMP/deep.cfg" <<'CFG'
[input]
shape = 1,16,16
[conv] out = 8 kernel = 3 padding = 1
[relu]
[conv] out = 8 kernel = 3 padding = 1
[relu]
[conv] out = 8 kernel = 3 padding = 1
[relu]
[conv] out = 8 kernel = 3 padding = 1
[relu]
[conv] out = 8 kernel = 3 padding = 1
[relu]
[conv] out = 8 kernel = 3 padding = 1
[relu]
[global_avgpool]
[linear] out = classes
CFG
act() { sed -n 's/^activations  *\([0-9.]*\) MiB.*/\1/p' "$1"; }
"$FEDNODE" model "$TMP/deep.cfg" --classes 10 --plan --batch 256 >"$TMP/k1.txt" 2>&1 ||
    { cat "$TMP/k1.txt"; fail "fednode model deep.cfg --plan"; }
"$FEDNODE" model "$TMP/deep.cfg" --classes 10 --plan --batch 256 --recompute 2 >"$TMP/k2.txt" 2>&1 ||
    { cat "$TMP/k2.txt"; fail "fednode model deep.cfg --plan --recompute 2"; }
a1=$(act "$TMP/k1.txt"); a2=$(act "$TMP/k2.txt")
awk -v a="$a1" -v b="$a2" 'BEGIN { exit !(b > 0 && b <= 0.6 * a) }' ||
    { cat "$TMP/k1.txt" "$TMP/k2.txt"; fail "--recompute 2 activations $a2 MiB, at most 0.6 of $a1"; }
grep -q 'recomputed forwards 0)' "$TMP/k2.txt" && { cat "$TMP/k2.txt"; fail "recompute 2 adds FLOPs"; }
ok "fednode model --plan --recompute 2: activations $a2 MiB against $a1, recomputed forwards counted"

"$FEDNODE" train --accumulate 2 --dp-sgd >"$TMP/acc.txt" 2>&1 && fail "--accumulate with --dp-sgd ran"
grep -q 'train: --accumulate 2: DP-SGD sums its Poisson draw in pieces of its own' "$TMP/acc.txt" ||
    { cat "$TMP/acc.txt"; fail "--accumulate with --dp-sgd: the reason"; }
"$FEDNODE" train --precision fp16 >"$TMP/p.txt" 2>&1 && fail "--precision fp16 ran"
grep -q "train: --precision: 'fp16' is not fp32 or bf16" "$TMP/p.txt" ||
    { cat "$TMP/p.txt"; fail "--precision fp16: the reason"; }
ok "refusals: --accumulate with DP-SGD, an unknown --precision"

for k in 1 2; do
    "$FEDNODE" train --model "$CFG" --epochs 1 --shard 0/60 --batch 32 --recompute $k \
        --optimizer sgd --schedule const >"$TMP/r$k.log" 2>&1 || { cat "$TMP/r$k.log"; fail "train --recompute $k"; }
done
l1=$(grep '^epoch' "$TMP/r1.log" | sed 's/samples\/s.*//'); l2=$(grep '^epoch' "$TMP/r2.log" | sed 's/samples\/s.*//')
[ -n "$l1" ] && [ "$l1" = "$l2" ] || fail "--recompute 2 trained to '$l2', without '$l1'"
ok "fednode train --recompute 2: the same epoch line as without ($l1)"
