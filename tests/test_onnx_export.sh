#!/bin/sh
# test_onnx_export.sh - `fednode export --format onnx`: a net of convolutions,
# both pools, LeakyReLU, GELU, dropout and SiLU trained one epoch on a shard
# of Fashion-MNIST, exported as .onnx and as .safetensors; the .onnx passes
# onnx.checker (full check, opset 14), says the input scaling in its
# metadata, holds the safetensors tensors bit for bit under PyTorch's names
# (loaded strict into the same nn.Module), its graph evaluated op by op in
# PyTorch gives the module's logits (tests/onnx_export_check.py), and the
# module scores what fednode reported for the checkpoint. `fednode model`
# reads the file back with its weights, and --format takes only the two
# formats. ResNet-8 (examples/models/resnet8.cfg, batch norm) likewise: its
# .onnx checks out against tests/onnx_parity.py's torchvision-style module
# (BatchNormalization over the running statistics), and `fednode model`
# reads it back as the same layers and parameters as the model file. Skips (77) without /usr/bin/python3 with onnx (Debian:
# python3-onnx) and torch, or without Fashion-MNIST.
. "$(dirname "$0")/proc_lib.sh"

need_py onnx python3-onnx
need_py torch python3-torch
HERE=$(cd "$(dirname "$0")" && pwd)
if ! "$PY" -c 'import safetensors' 2>/dev/null; then
    PYTHONPATH="$HERE/support/py"; export PYTHONPATH
fi

NET="g:conv1=C6k5,R,Mk2,conv2=C16k5p2,Y,Ak2p1,F,fc1=L120,G,Dr100000,fc2=L84,S,fc3=L"
FEDNODE_NO_REEXEC=1 "$FEDNODE" train --model "$NET" --epochs 1 --shard 0/12 --threads 1 \
    --db "$TMP/n.db" >"$TMP/train.log" 2>&1 || fail "fednode train"
acc_fednode=$(sed -n 's/.*test_acc \([0-9.]*\).*/\1/p' "$TMP/train.log" | tail -n 1)
[ -n "$acc_fednode" ] || fail "fednode train printed its test accuracy"
"$FEDNODE" export --db "$TMP/n.db" --format onnx --out "$TMP/m.onnx" >"$TMP/export.log" 2>&1 ||
    fail "fednode export --format onnx"
"$FEDNODE" export --db "$TMP/n.db" --out "$TMP/m.safetensors" >>"$TMP/export.log" 2>&1 ||
    fail "fednode export"
ok "exported as .onnx and .safetensors"

"$PY" "$HERE/onnx_export_check.py" "$TMP/m.onnx" "$TMP/m.safetensors" "$DATA" \
    >"$TMP/check.log" 2>&1 || { cat "$TMP/check.log"; fail "the .onnx checks out in Python"; }
sed 's/^/  /' "$TMP/check.log"
ok "onnx.checker, metadata, initializers and the graph in PyTorch"
acc=$(sed -n 's/^acc \([0-9.]*\)$/\1/p' "$TMP/check.log")
awk -v a="$acc" -v b="$acc_fednode" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 0.002) }' ||
    fail "PyTorch scores the .onnx's weights $acc, fednode reported $acc_fednode"
ok "the module with the .onnx's weights scores $acc in PyTorch; fednode reported $acc_fednode"

"$FEDNODE" model "$TMP/m.onnx" >"$TMP/model.log" 2>&1 || fail "fednode model m.onnx"
grep -q '^ *total  *107786 ' "$TMP/model.log" && grep -q '^# weights: from the file' "$TMP/model.log" ||
    { cat "$TMP/model.log"; fail "fednode model reads the export back: 107786 parameters, weights"; }
ok "fednode model m.onnx: 107786 parameters, the file's weights"

"$FEDNODE" export --db "$TMP/n.db" --format tflite --out "$TMP/m.x" >"$TMP/bad.log" 2>&1
[ $? -eq 2 ] && grep -q "format 'tflite' is neither safetensors nor onnx" "$TMP/bad.log" ||
    { cat "$TMP/bad.log"; fail "--format tflite refused with exit 2"; }
[ ! -e "$TMP/m.x" ] || fail "a refused export writes nothing"
ok "--format tflite refused, nothing written"

# ResNet-8: batch norm written as BatchNormalization (inference), the counter an int64
R8="$(dirname "$0")/../examples/models/resnet8.cfg"
FEDNODE_NO_REEXEC=1 "$FEDNODE" train --model "$R8" --epochs 1 --shard 0/60 --threads 1 \
    --db "$TMP/r8.db" >"$TMP/r8train.log" 2>&1 || fail "fednode train resnet8.cfg"
acc_r8=$(sed -n 's/.*test_acc \([0-9.]*\).*/\1/p' "$TMP/r8train.log" | tail -n 1)
"$FEDNODE" export --db "$TMP/r8.db" --format onnx --out "$TMP/r8.onnx" >"$TMP/r8export.log" 2>&1 &&
    "$FEDNODE" export --db "$TMP/r8.db" --out "$TMP/r8.safetensors" >>"$TMP/r8export.log" 2>&1 ||
    { cat "$TMP/r8export.log"; fail "fednode export of ResNet-8 as .onnx and .safetensors"; }
"$PY" "$HERE/onnx_export_check.py" "$TMP/r8.onnx" "$TMP/r8.safetensors" "$DATA" resnet8 \
    >"$TMP/r8check.log" 2>&1 || { cat "$TMP/r8check.log"; fail "ResNet-8's .onnx checks out in Python"; }
sed 's/^/  /' "$TMP/r8check.log"
acc=$(sed -n 's/^acc \([0-9.]*\)$/\1/p' "$TMP/r8check.log")
awk -v a="$acc" -v b="$acc_r8" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 0.002) }' ||
    fail "PyTorch scores ResNet-8's .onnx weights $acc, fednode reported $acc_r8"
ok "ResNet-8's .onnx: checker, initializers, BatchNormalization op by op; PyTorch $acc, fednode $acc_r8"
"$FEDNODE" model "$TMP/r8.onnx" >"$TMP/r8model.log" 2>&1 && "$FEDNODE" model "$R8" >"$TMP/r8cfg.log" 2>&1 ||
    fail "fednode model of ResNet-8's .onnx and .cfg"
for f in r8model r8cfg; do # the weighted layers (the .cfg names its relus, adds and pool)
    awk '$2 ~ /^(conv|batchnorm|linear|flatten)$/ || $1 == "total" || /^# and /' \
        "$TMP/$f.log" >"$TMP/$f.rows"
done
cmp -s "$TMP/r8model.rows" "$TMP/r8cfg.rows" && grep -q '^ *total  *77754 ' "$TMP/r8model.rows" ||
    { diff "$TMP/r8model.rows" "$TMP/r8cfg.rows"; fail "ResNet-8's .onnx reads back as resnet8.cfg's layers"; }
ok "fednode model r8.onnx: resnet8.cfg's layers, 77754 parameters and 681 statistics"
