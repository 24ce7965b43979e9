#!/bin/sh
# test_onnx.sh - ONNX in: nn.Modules exported with torch.onnx.export
# (SimpleCNN as NIID-Bench writes it, a net of branches and patterns, a
# one-logit tabular net) compute in fednode what they compute in PyTorch:
# logits, loss, every gradient and one SGD step within 1e-5 norm-wise from
# the file's own weights (tests/onnx_parity.py), and an eval-mode export's
# logits; `fednode model FILE.onnx` prints SimpleCNN's 44,426 parameters;
# an aggregator given the file starts from its weights and three client
# processes train it federated; the exported result loads into the same
# nn.Module (strict) and scores there what the aggregator reported. Skips
# (77) without /usr/bin/python3 with torch or without Fashion-MNIST.
. "$(dirname "$0")/proc_lib.sh"

PY=/usr/bin/python3
if [ ! -x "$PY" ]; then echo "skipped: no $PY"; exit 77; fi
if ! "$PY" -c 'import torch' 2>/dev/null; then
    echo "skipped: $PY has no torch (Debian: apt-get install python3-torch)"; exit 77
fi
DUMP="${BUILD:-build}/tests/test_model_cfg"
[ -x "$DUMP" ] || { echo "skipped: no $DUMP (make $DUMP)"; exit 77; }
HERE=$(cd "$(dirname "$0")" && pwd)
if ! "$PY" -c 'import safetensors' 2>/dev/null; then
    PYTHONPATH="$HERE/support/py"; export PYTHONPATH
fi

"$PY" "$HERE/onnx_parity.py" "$DUMP" "$TMP" >"$TMP/parity.log" 2>&1 ||
    { cat "$TMP/parity.log"; fail "fednode computes what PyTorch computes from the exported files"; }
ok "PyTorch parity of the exported nets (SimpleCNN, branches, tabular, embeddings, norms at opsets 13 and 17, batch norms at 13 and 14, ResNet-8): $(grep -c "rel " "$TMP/parity.log") tensors within 1e-5"

# BatchNorm2d after a bias-free Conv (PyTorch's defaults, and eps 1e-3,
# momentum 0.2): the same graph id as the model file that says it
cat >"$TMP/convbn.cfg" <<CFG
[input] shape = 1,28,28
[conv] name = conv out = 4 kernel = 3 padding = 1 bias = 0
[batchnorm] name = bn
[relu]
[conv] name = conv2 out = 4 kernel = 3 bias = 0
[batchnorm] name = bn2 eps = 1e-3 momentum = 0.2
[flatten]
[linear] name = fc out = classes
CFG
"$PY" - "$TMP/convbn.onnx" <<'PYEOF' || fail "export the conv + batch norm net"
import sys, warnings, torch
from torch import nn
warnings.filterwarnings("ignore")
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 4, 3, bias=False)
        self.bn2 = nn.BatchNorm2d(4, eps=1e-3, momentum=0.2)
        self.fc = nn.Linear(4 * 26 * 26, 10)
    def forward(self, x):
        return self.fc(self.bn2(self.conv2(torch.relu(self.bn(self.conv(x))))).flatten(1))
torch.onnx.export(Net(), torch.zeros(2, 1, 28, 28), sys.argv[1], opset_version=14,
                  training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                  input_names=["input"], output_names=["logits"],
                  dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
PYEOF
# train logs the --model's id first (the data that follows is absent)
for m in convbn.onnx convbn.cfg; do
    FEDNODE_LOG=info "$FEDNODE" train --model "$TMP/$m" --epochs 1 --data "$TMP/none" 2>&1 |
        sed -n 's/.*train: --model .* is \(g[:#].*\)$/\1/p' | head -n 1 >"$TMP/$m.id"
done
[ -s "$TMP/convbn.cfg.id" ] && cmp -s "$TMP/convbn.onnx.id" "$TMP/convbn.cfg.id" ||
    fail "the ONNX conv + batch norm net is the model file's: $(cat "$TMP/convbn.onnx.id") against $(cat "$TMP/convbn.cfg.id")"
ok "BatchNorm2d after Conv from ONNX: the model file's graph, $(cat "$TMP/convbn.cfg.id")"

"$FEDNODE" model "$TMP/simplecnn.onnx" >"$TMP/model.txt" 2>&1 || { cat "$TMP/model.txt"; fail "fednode model FILE.onnx"; }
grep -q '^ *total  *44426 ' "$TMP/model.txt" && grep -q '^# weights: from the file' "$TMP/model.txt" ||
    { cat "$TMP/model.txt"; fail "SimpleCNN.onnx: 44426 parameters, weights from the file"; }
ok "fednode model simplecnn.onnx: 44426 parameters, its weights"

# federated: an aggregator of the file's graph and weights, three clients
K=$TMP/keys
allow_keys "$K" agg c0 c1 c2
COMMON="--data fashion-mnist --threads 1"
mkdir -p "$TMP/a"
# shellcheck disable=SC2086
start agg --role aggregator --keys "$K/agg" --allow "$K/allow.txt" --db "$TMP/a/agg.db" \
    --listen tcp://127.0.0.1:0 --port-file "$TMP/a/port" $COMMON --model "$TMP/simplecnn.onnx" \
    --rounds 2 --min-clients 3 --deadline-ms 60000 --batch 64 --lr 0.05
wait_for "the aggregator wrote its port" 20 test -s "$TMP/a/port"
PORT=$(cat "$TMP/a/port")
for i in 0 1 2; do
    # shellcheck disable=SC2086
    start "c$i" --role client --keys "$K/c$i" --allow "$K/allow.txt" --db "$TMP/a/c$i.db" \
        --aggregator "tcp://127.0.0.1:$PORT" --aggregator-key agg --partition iid \
        --shard "$i/20" $COMMON $([ $i = 2 ] && echo --model "$TMP/simplecnn.onnx")
done
wait_for "round 2 merged" 300 logged agg "round 2 merged"
exits0 agg 30
for i in 0 1 2; do exits0 "c$i" 30; done
logged agg "the model starts from the ONNX file's weights" || fail "the aggregator took the file's weights"
acc=$(sed -n 's/.*round 2 merged.* acc(uracy)\{0,1\} \([0-9.]*\).*/\1/p' "$TMP/agg.log" | tail -n 1)
[ -n "$acc" ] || acc=$(sed -n 's/.*round 2 .*accuracy \([0-9.]*\).*/\1/p' "$TMP/agg.log" | tail -n 1)
[ -n "$acc" ] || { cat "$TMP/agg.log"; fail "the aggregator reported round 2's accuracy"; }
ok "3 clients trained simplecnn.onnx for 2 rounds from its weights: accuracy $acc"

"$FEDNODE" export --db "$TMP/a/agg.db" --out "$TMP/fed.safetensors" >"$TMP/export.log" 2>&1 ||
    { cat "$TMP/export.log"; fail "fednode export"; }
cat >"$TMP/score.py" <<PYEOF
import gzip, os, sys, torch
sys.path.insert(0, "$HERE")
sys.argv = ["onnx_parity.py"]
from safetensors import safe_open
exec(open("$HERE/onnx_parity.py").read().split("def main():")[0])

def idx(name):
    p = os.path.join("$DATA", name)
    raw = open(p, "rb").read() if os.path.exists(p) else gzip.open(p + ".gz").read()
    shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(raw[3])]
    return torch.frombuffer(bytearray(raw[4 + 4 * raw[3]:]), dtype=torch.uint8).reshape(shape)

net = SimpleCNN()
with safe_open("$TMP/fed.safetensors", framework="pt") as f:
    net.load_state_dict({k: f.get_tensor(k) for k in f.keys()}, strict=True)
x = idx("t10k-images-idx3-ubyte").float().unsqueeze(1) * (2 / 255) - 1
y = idx("t10k-labels-idx1-ubyte").long()
with torch.no_grad():
    print("acc %.4f" % (net(x).argmax(1) == y).float().mean())
PYEOF
"$PY" "$TMP/score.py" >"$TMP/score.log" 2>&1 || { cat "$TMP/score.log"; fail "the export loads into SimpleCNN, strict"; }
tacc=$(sed -n 's/^acc \([0-9.]*\)$/\1/p' "$TMP/score.log")
awk -v a="$acc" -v b="$tacc" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.002) }' ||
    fail "PyTorch scores the federated model $tacc, the aggregator reported $acc"
ok "the federated export in PyTorch's SimpleCNN (strict): $tacc, as the aggregator said ($acc)"
