#!/bin/sh
# test_eval_input_scale.sh - a model trained with --input-scale unit keeps
# its scale: `fednode eval` of the saved model file, of its export
# (.safetensors, whose fednode.input_scale says it) and of that export
# imported back into a model file each give the test accuracy training
# printed. Skips (77) without Fashion-MNIST.
. "$(dirname "$0")/proc_lib.sh"
export FEDNODE_NO_REEXEC=1

"$FEDNODE" train --model logreg --epochs 1 --shard 0/20 --input-scale unit --out "$TMP/u.bin" \
    --db "$TMP/u.db" >"$TMP/train.log" 2>&1 || fail "train --input-scale unit"
acc=$(sed -n 's/.*test_acc \([0-9.]*\).*/\1/p' "$TMP/train.log")
[ -n "$acc" ] || fail "train printed a test accuracy"

# eval_gives WHAT FILE: eval of FILE prints training's accuracy
eval_gives() {
    "$FEDNODE" eval --model "$2" >"$TMP/eval.log" 2>&1 || fail "eval of $1"
    grep -q "accuracy $acc\$" "$TMP/eval.log" || { cat "$TMP/eval.log"; fail "eval of $1 gives train's $acc"; }
    ok "eval of $1: accuracy $acc, as training's (its input scale unit)"
}

eval_gives "the model file" "$TMP/u.bin"
"$FEDNODE" export --db "$TMP/u.db" --out "$TMP/u.safetensors" >"$TMP/export.log" 2>&1 ||
    fail "export of the unit model"
eval_gives "the export" "$TMP/u.safetensors"
"$FEDNODE" import --in "$TMP/u.safetensors" --out "$TMP/ui.bin" >"$TMP/import.log" 2>&1 ||
    fail "import of the export"
eval_gives "the export imported back" "$TMP/ui.bin"
