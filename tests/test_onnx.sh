#!/bin/sh
# test_onnx.sh - ONNX in: nn.Modules exported with torch.onnx.export
# (SimpleCNN as NIID-Bench writes it, a net of branches and patterns, a
# one-logit tabular net) compute in fednode what they compute in PyTorch:
# logits, loss, every gradient and one SGD step within 1e-5 norm-wise from
# the file's own weights (tests/onnx_parity.py), and an eval-mode export's
# logits; `fednode model FILE.onnx` prints SimpleCNN's 44,426 parameters;
# an aggregator given the file starts from its weights and three client
# processes train it federated; the exported result loads into the same
# nn.Module (strict) and scores there what the aggregator reported; the
# same for the ResNet-8 with batch norm, 3 rounds. Skips
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

# federated: an aggregator of the file's graph and weights, three client
# processes; the export loads into the nn.Module (strict) and scores there
# what the aggregator reported. federate NAME CLASS ROUNDS SHARDS [client flags]
K=$TMP/keys
allow_keys "$K" agg c0 c1 c2
COMMON="--threads 1"
federate() {
    f_name=$1 f_cls=$2 f_rounds=$3 f_shards=$4 f_data=$5
    shift 5
    f_dir=$TMP/fed-$f_name
    f_data_dir=$f_data
    [ "$f_data" = fashion-mnist ] && f_data_dir=$DATA
    mkdir -p "$f_dir"
    # shellcheck disable=SC2086
    start "agg-$f_name" --role aggregator --keys "$K/agg" --allow "$K/allow.txt" --db "$f_dir/agg.db" \
        --listen tcp://127.0.0.1:0 --port-file "$f_dir/port" $COMMON --data "$f_data" \
        --model "$TMP/$f_name.onnx" \
        --rounds "$f_rounds" --min-clients 3 --deadline-ms 120000 --batch 64 --lr 0.05
    wait_for "the aggregator wrote its port" 20 test -s "$f_dir/port"
    f_port=$(cat "$f_dir/port")
    for i in 0 1 2; do
        # shellcheck disable=SC2086
        start "c$i-$f_name" --role client --keys "$K/c$i" --allow "$K/allow.txt" --db "$f_dir/c$i.db" \
            --aggregator "tcp://127.0.0.1:$f_port" --aggregator-key agg --partition iid \
            --shard "$i/$f_shards" --data fashion-mnist $COMMON "$@" $([ $i = 2 ] && echo --model "$TMP/$f_name.onnx")
    done
    wait_for "round $f_rounds merged" 600 logged "agg-$f_name" "round $f_rounds merged"
    exits0 "agg-$f_name" 120
    for i in 0 1 2; do exits0 "c$i-$f_name" 30; done
    logged "agg-$f_name" "the model starts from the ONNX file's weights" ||
        fail "$f_name: the aggregator took the file's weights"
    f_log=$TMP/agg-$f_name.log
    acc=$(sed -n "s/.*round $f_rounds merged.* acc(uracy)\{0,1\} \([0-9.]*\).*/\1/p" "$f_log" | tail -n 1)
    [ -n "$acc" ] || acc=$(sed -n "s/.*round $f_rounds .*accuracy \([0-9.]*\).*/\1/p" "$f_log" | tail -n 1)
    [ -n "$acc" ] || { cat "$f_log"; fail "$f_name: the aggregator reported round $f_rounds's accuracy"; }
    ok "3 clients trained $f_name.onnx for $f_rounds rounds from its weights: accuracy $acc"

    "$FEDNODE" export --db "$f_dir/agg.db" --out "$f_dir/fed.safetensors" >"$f_dir/export.log" 2>&1 ||
        { cat "$f_dir/export.log"; fail "$f_name: fednode export"; }
    cat >"$f_dir/score.py" <<PYEOF
import gzip, os, sys, torch
sys.path.insert(0, "$HERE")
sys.argv = ["onnx_parity.py"]
from safetensors import safe_open
exec(open("$HERE/onnx_parity.py").read().split("def main():")[0])

def idx(name):
    p = os.path.join("$f_data_dir", name)
    raw = open(p, "rb").read() if os.path.exists(p) else gzip.open(p + ".gz").read()
    shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(raw[3])]
    return torch.frombuffer(bytearray(raw[4 + 4 * raw[3]:]), dtype=torch.uint8).reshape(shape)

net = $f_cls()
with safe_open("$f_dir/fed.safetensors", framework="pt") as f:
    net.load_state_dict({k: f.get_tensor(k) for k in f.keys()}, strict=True)
net.eval()
x = idx("t10k-images-idx3-ubyte").float().unsqueeze(1) * (2 / 255) - 1
y = idx("t10k-labels-idx1-ubyte").long()
with torch.no_grad():
    print("acc %.4f" % (net(x).argmax(1) == y).float().mean())
PYEOF
    "$PY" "$f_dir/score.py" >"$f_dir/score.log" 2>&1 ||
        { cat "$f_dir/score.log"; fail "$f_name: the export loads into $f_cls, strict"; }
    tacc=$(sed -n 's/^acc \([0-9.]*\)$/\1/p' "$f_dir/score.log")
    awk -v a="$acc" -v b="$tacc" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.002) }' ||
        fail "$f_name: PyTorch scores the federated model $tacc, the aggregator reported $acc"
    ok "the federated export in PyTorch's $f_cls (strict): $tacc, as the aggregator said ($acc)"
}

federate simplecnn SimpleCNN 2 20 fashion-mnist
# ResNet-8 with batch norm, a few steps a round (about 400 samples a second
# here): its running statistics merged by sample weight, evaluated with
# them on the first 2,000 test images (its evaluation of all 10,000 takes a
# loaded 2-core host a minute a round)
mkdir -p "$TMP/fm2k"
"$PY" - "$DATA" "$TMP/fm2k" <<'PYEOF' || fail "write a 2,000-image test split"
import gzip, os, sys
src, dst = sys.argv[1], sys.argv[2]
for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"):
    for ext in ("", ".gz"):
        if os.path.exists(os.path.join(src, name + ext)):
            os.symlink(os.path.join(src, name + ext), os.path.join(dst, name + ext))
for name in ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
    p = os.path.join(src, name)
    raw = open(p, "rb").read() if os.path.exists(p) else gzip.open(p + ".gz").read()
    nd = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(nd)]
    per = 1
    for v in dims[1:]:
        per *= v
    head = raw[:4] + (2000).to_bytes(4, "big") + raw[8:4 + 4 * nd]
    open(os.path.join(dst, name), "wb").write(head + raw[4 + 4 * nd:4 + 4 * nd + 2000 * per])
PYEOF
federate resnet8 ResNet8 3 60 "$TMP/fm2k" --max-steps 3
