#!/bin/sh
# test_torch_parity.sh - models built from model files compute what PyTorch
# computes: for examples/models/simplecnn.cfg and resnet8.cfg, a net of
# every window (strided, padded, dilated and non-square convolutions, padded max and
# average pooling), a net of every activation of its own (leaky_relu, gelu,
# silu, sigmoid, tanh) with a global average pool, grouped and depthwise
# convolutions, convolutions and linear layers without a bias (bias = 0),
# layer and group norms with dropout at p = 0 (a tensor initialized to a
# constant, a norm's, jittered by the dump so its terms count), a one-logit
# bce net, residual blocks (add, branches, a concat), the tabular net (examples/models/tabular.cfg: embeddings of two
# categorical columns concatenated with the numeric ones, bce) and a net of
# embeddings alone (ids repeated in the batch: the scatter-add sums them),
# a regression net of three outputs under mse (float targets), batch norm
# per feature and per channel (bn1d, bn2d) and ResNet-8
# (examples/models/resnet8.cfg): fednode's initial parameters (through
# .safetensors, loaded with strict=True into the nn.Module
# tests/torch_parity.py builds from the same file), the same batch of 8:
# logits in training mode and in evaluation, loss, every gradient and the
# parameters after one SGD step (batch norm's running statistics and
# num_batches_tracked included) agree within 1e-5 of each tensor's norm (a
# gradient that is 0 exactly, a bias before batch norm: within 1e-7 of the
# whole gradient's).
# The fednode side is build/tests/test_model_cfg --torch-dump. Skips (77)
# without /usr/bin/python3 with torch (Debian: python3-torch).
set -u
BUILD=${BUILD:-build}
PY=/usr/bin/python3
DUMP="$BUILD/tests/test_model_cfg"
if [ ! -x "$PY" ]; then echo "skipped: no $PY"; exit 77; fi
if ! "$PY" -c 'import torch' 2>/dev/null; then
    echo "skipped: $PY has no torch (Debian: apt-get install python3-torch)"; exit 77
fi
[ -x "$DUMP" ] || { echo "skipped: no $DUMP (make $DUMP)"; exit 77; }
TMP=$(mktemp -d) || exit 1
trap 'rm -rf "$TMP"' EXIT
HERE=$(cd "$(dirname "$0")" && pwd)
if ! "$PY" -c 'import safetensors' 2>/dev/null; then
    PYTHONPATH="$HERE/support/py"; export PYTHONPATH
fi
fail() { echo "FAIL: $1"; exit 1; }

cat >"$TMP/windows.cfg" <<CFG
# every window the layer table has, on 2x13x12 inputs
[input] shape = 2,13,12
[conv] name = stem out = 5 kernel = 3 stride = 2 padding = 1
[relu]
[conv] name = dil out = 4 kernel = 3 padding = 2 dilation = 2
[relu]
[conv] name = rect out = 6 kernel = 2,3 stride = 1,2 padding = 1,0
[maxpool] kernel = 3 stride = 2 padding = 1
[avgpool] kernel = 2 stride = 1 padding = 1
[flatten]
[linear] name = fc out = 16
[relu]
[linear] name = head out = classes
[output] classes = 7
CFG

cat >"$TMP/acts.cfg" <<CFG
# every activation of its own, after convolutions and linear layers
[input] shape = 2,9,8
[conv] name = c1 out = 4 kernel = 3 padding = 1
[gelu]
[conv] name = c2 out = 4 kernel = 3 stride = 2
[silu]
[tanh]
[global_avgpool]
[flatten]
[linear] name = fc1 out = 12
[leaky_relu]
[linear] name = fc2 out = 10
[sigmoid]
[linear] name = head out = classes
[output] classes = 5
CFG

cat >"$TMP/groups.cfg" <<CFG
# grouped and depthwise convolutions
[input] shape = 4,10,9
[conv] name = g2 out = 6 kernel = 3 groups = 2 padding = 1
[relu]
[conv] name = dw out = 6 kernel = 3 stride = 2 groups = 6
[relu]
[conv] name = pw out = 8 kernel = 1
[relu]
[conv] name = g4 out = 8 kernel = 2,3 groups = 4 padding = 0,1
[flatten]
[linear] name = head out = classes
[output] classes = 4
CFG

cat >"$TMP/residual.cfg" <<CFG
# residual blocks (add), a branch that takes an earlier layer's output
# (input =), a strided 1x1 conv shortcut, a concat of two branches
[input] shape = 2,8,8
[conv] name = stem out = 4 kernel = 3 padding = 1
[relu] name = r0
[conv] name = b1 out = 4 kernel = 3 padding = 1
[relu]
[conv] name = b2 out = 4 kernel = 3 padding = 1
[add] name = res from = r0
[relu] name = r1
[conv] name = sc out = 6 kernel = 1 stride = 2
[conv] name = c3 out = 6 kernel = 3 stride = 2 padding = 1 input = r1
[relu]
[conv] name = c4 out = 6 kernel = 3 padding = 1
[add] name = res2 from = sc
[relu] name = r2
[conv] name = side out = 3 kernel = 1 input = r1
[maxpool] name = down kernel = 2
[concat] name = cat from = r2
[global_avgpool]
[flatten]
[linear] name = head out = classes
[output] classes = 5
CFG

cat >"$TMP/nobias.cfg" <<CFG
# bias = 0 (PyTorch's bias=False) on convolutions and linear layers, a relu
# folded into a bias-free layer
[input] shape = 3,8,8
[conv] name = c1 out = 4 kernel = 3 padding = 1 bias = 0
[relu]
[conv] name = c2 out = 6 kernel = 3 stride = 2 groups = 2 bias = false
[conv] name = c3 out = 6 kernel = 1
[relu]
[flatten]
[linear] name = fc1 out = 12 bias = 0
[relu]
[linear] name = head out = classes bias = false
[output] classes = 5
CFG

cat >"$TMP/norms.cfg" <<CFG
# group and layer norms over maps and features, a relu folded into each,
# dropout with p = 0 (parity is with dropout off)
[input] shape = 4,7,6
[conv] name = c1 out = 6 kernel = 3 padding = 1 bias = 0
[groupnorm] name = gn1 groups = 3
[relu]
[conv] name = c2 out = 4 kernel = 3 stride = 2
[layernorm] name = ln1
[relu]
[dropout] p = 0
[conv] name = c3 out = 4 kernel = 1
[groupnorm] name = gn2 groups = 1
[flatten]
[linear] name = fc1 out = 16
[layernorm] name = ln2
[relu]
[dropout] name = drop p = 0
[linear] name = fc2 out = 12
[groupnorm] name = gn3 groups = 4
[linear] name = head out = classes
[output] classes = 5
CFG

cat >"$TMP/bce.cfg" <<CFG
# one logit, binary cross-entropy with logits
[input] features = 11
[linear] name = fc1 out = 9
[relu]
[linear] name = out out = 1
[output] loss = bce
CFG

cat >"$TMP/embed.cfg" <<CFG
# embeddings alone: two categorical columns, one of three ids
[input] features = 2 categorical = 1,0
[embedding] name = e0 column = 0 num = 6 dim = 5
[embedding] name = e1 column = 1 num = 3 dim = 2
[concat] name = both input = e0 from = e1
[linear] name = head out = classes
[output] classes = 4
CFG

cat >"$TMP/mse.cfg" <<CFG
# regression: three float targets, mean squared error
[input] features = 7
[linear] name = fc1 out = 12
[tanh]
[linear] name = out out = 3
[output] loss = mse
CFG

cat >"$TMP/bn1d.cfg" <<CFG
# batch norm per feature (BatchNorm1d): of the input flattened, after linear
# layers (a relu folded in; momentum and eps of its own)
[input] features = 11
[flatten]
[batchnorm] name = bn0
[linear] name = fc1 out = 9
[batchnorm] name = bn1 momentum = 0.3
[relu]
[linear] name = fc2 out = 7
[batchnorm] name = bn2 eps = 1e-3
[linear] name = head out = classes
[output] classes = 4
CFG

cat >"$TMP/bn2d.cfg" <<CFG
# batch norm per channel (BatchNorm2d): after convolutions, on a branch and
# before a residual add, then per feature after a global average pool
[input] shape = 3,9,8
[conv] name = c1 out = 6 kernel = 3 padding = 1
[batchnorm] name = bn1
[relu] name = r1
[conv] name = c2 out = 6 kernel = 3 padding = 1
[batchnorm] name = bn2 momentum = 0.05 eps = 1e-4
[add] name = res from = r1
[relu]
[conv] name = c3 out = 8 kernel = 3 stride = 2
[batchnorm] name = bn3
[silu]
[maxpool] kernel = 2
[global_avgpool]
[flatten]
[batchnorm] name = bn4
[linear] name = head out = classes
[output] classes = 5
CFG

for cfg in "$HERE/../examples/models/simplecnn.cfg" "$HERE/../examples/models/resnet8.cfg" \
    "$TMP/windows.cfg" "$TMP/acts.cfg" \
    "$TMP/groups.cfg" "$TMP/bce.cfg" "$TMP/residual.cfg" "$TMP/nobias.cfg" \
    "$TMP/norms.cfg" "$HERE/../examples/models/tabular.cfg" "$TMP/embed.cfg" "$TMP/mse.cfg" \
    "$TMP/bn1d.cfg" "$TMP/bn2d.cfg"; do
    name=$(basename "$cfg" .cfg)
    mkdir -p "$TMP/$name"
    "$DUMP" --torch-dump "$TMP/$name" "$cfg" >"$TMP/$name/dump.log" 2>&1 ||
        { cat "$TMP/$name/dump.log"; fail "$name: test_model_cfg --torch-dump"; }
    echo "== $name: $(cat "$TMP/$name/dump.log")"
    "$PY" "$HERE/torch_parity.py" "$cfg" "$TMP/$name" || fail "$name: PyTorch parity"
    echo "ok: $name: fednode and PyTorch agree within 1e-5 of each tensor's norm"
done
