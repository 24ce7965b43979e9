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

# exported P MODE ARGS...: fednode train ARGS into $TMP/P.db, exported as
# $TMP/P.onnx and $TMP/P.safetensors, which onnx_export_check.py checks for
# its net MODE (its log shown); $acc_train: what fednode reported, $acc:
# what PyTorch scores (none for a CSV's net).
exported() {
    p=$1 mode=$2
    shift 2
    FEDNODE_NO_REEXEC=1 "$FEDNODE" train "$@" --threads 1 --db "$TMP/$p.db" \
        >"$TMP/${p}train.log" 2>&1 || fail "fednode train $*"
    acc_train=$(sed -n 's/.*test_acc \([0-9.]*\).*/\1/p' "$TMP/${p}train.log" | tail -n 1)
    "$FEDNODE" export --db "$TMP/$p.db" --format onnx --out "$TMP/$p.onnx" >"$TMP/${p}export.log" 2>&1 &&
        "$FEDNODE" export --db "$TMP/$p.db" --out "$TMP/$p.safetensors" >>"$TMP/${p}export.log" 2>&1 ||
        { cat "$TMP/${p}export.log"; fail "fednode export of $mode as .onnx and .safetensors"; }
    "$PY" "$HERE/onnx_export_check.py" "$TMP/$p.onnx" "$TMP/$p.safetensors" "$DATA" "$mode" \
        >"$TMP/${p}check.log" 2>&1 || { cat "$TMP/${p}check.log"; fail "$mode's .onnx checks out in Python"; }
    sed 's/^/  /' "$TMP/${p}check.log"
    acc=$(sed -n 's/^acc \([0-9.]*\)$/\1/p' "$TMP/${p}check.log")
}
same_acc() {
    awk -v a="$acc" -v b="$acc_train" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 0.002) }' ||
        fail "PyTorch scores $1's .onnx weights $acc, fednode reported $acc_train"
}

# ResNet-8: batch norm written as BatchNormalization (inference), the counter an int64
R8="$(dirname "$0")/../examples/models/resnet8.cfg"
exported r8 resnet8 --model "$R8" --epochs 1 --shard 0/60
same_acc ResNet-8
ok "ResNet-8's .onnx: checker, initializers, BatchNormalization op by op; PyTorch $acc, fednode $acc_train"
"$FEDNODE" model "$TMP/r8.onnx" >"$TMP/r8model.log" 2>&1 && "$FEDNODE" model "$R8" >"$TMP/r8cfg.log" 2>&1 ||
    fail "fednode model of ResNet-8's .onnx and .cfg"
for f in r8model r8cfg; do # the weighted layers (the .cfg names its relus, adds and pool)
    awk '$2 ~ /^(conv|batchnorm|linear|flatten)$/ || $1 == "total" || /^# and /' \
        "$TMP/$f.log" >"$TMP/$f.rows"
done
cmp -s "$TMP/r8model.rows" "$TMP/r8cfg.rows" && grep -q '^ *total  *77754 ' "$TMP/r8model.rows" ||
    { diff "$TMP/r8model.rows" "$TMP/r8cfg.rows"; fail "ResNet-8's .onnx reads back as resnet8.cfg's layers"; }
ok "fednode model r8.onnx: resnet8.cfg's layers, 77754 parameters and 681 statistics"

# group and layer norm: the exporter's patterns at opset 14, op by op in PyTorch
exported nm norms --model "g:c1=C8k3b0,gn=Ug4,R,F,fc=L6,ln=V,fc2=L" --epochs 1 --shard 0/60
same_acc "the norms net"
ok "group and layer norm's .onnx: checker, initializers, op by op; PyTorch $acc, fednode $acc_train"

# the tabular reference net (examples/models/tabular.cfg) trained a few steps
# on 200 rows whose first two columns are words: embeddings and numeric columns
awk 'BEGIN {
    s = 4242; print "a,b,x1,x2,x3,x4,x5,x6,x7,x8,label"
    split("red green blue amber", w, " "); split("oslo lima pune", c, " ")
    for (i = 0; i < 200; i++) {
        s = (s * 16807) % 2147483647; p = s % 4 + 1; s = (s * 16807) % 2147483647; q = s % 3 + 1
        printf "%s,%s", w[p], c[q]
        for (j = 0; j < 8; j++) { s = (s * 16807) % 2147483647; printf ",%.3f", (s % 2000) / 1000 - 1 }
        printf ",%d\n", (p + q) % 2
    }
}' >"$TMP/tab.csv"
exported tab tabular --data "$TMP/tab.csv" --categorical a,b --epochs 2 \
    --model "$(dirname "$0")/../examples/models/tabular.cfg"
ok "tabular.cfg's .onnx: checker, initializers (emb_a.weight 1024x8), Gather/Cast/Slice op by op"
"$FEDNODE" model "$TMP/tab.onnx" >"$TMP/tabmodel.log" 2>&1 && grep -q '^ *total  *13505 ' "$TMP/tabmodel.log" ||
    { cat "$TMP/tabmodel.log"; fail "fednode model reads tabular.cfg's .onnx back: 13505 parameters"; }
ok "fednode model tab.onnx: 13505 parameters"
