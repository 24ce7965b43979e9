# onnx_export_check.py - the Python side of tests/test_onnx_export.sh: a
# file `fednode export --format onnx` wrote passes onnx.checker (full
# check) at opset 14 and carries the input scaling as metadata; its
# initializers are the safetensors export's tensors bit for bit and load into
# the nn.Module the graph describes (strict); the graph itself, evaluated op
# by op in PyTorch (python3-onnx 1.12 has no onnx.reference and onnxruntime
# is not in Debian), gives that module's logits; the module's accuracy on
# Fashion-MNIST's test split is printed for the shell to compare with what
# fednode reported. With NET resnet8 the module is tests/onnx_parity.py's
# torchvision-style ResNet-8 (batch norm: BatchNormalization over the
# running statistics, num_batches_tracked an int64 initializer); with
# norms, a net of group and layer norm (the exporter's patterns at opset
# 14); with tabular, examples/models/tabular.cfg (embeddings: Gather of a
# column, Cast, Gather of the weight's rows; the numeric columns a Slice),
# evaluated on seeded rows of ids and numbers, no accuracy printed.
# usage: onnx_export_check.py MODEL.onnx MODEL.safetensors DATA [resnet8|norms|tabular]
import gzip
import os
import sys

import numpy as np
import onnx
import torch
from onnx import numpy_helper
from safetensors import safe_open
from torch import nn
from torch.nn import functional as F


class Net(nn.Module):
    """The test's graph, "g:conv1=C6k5,R,Mk2,conv2=C16k5p2,Y,Ak2p1,F,fc1=L120,G,
    Dr100000,fc2=L84,S,fc3=L", as PyTorch writes it."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5)
        self.conv2 = nn.Conv2d(6, 16, 5, padding=2)
        self.fc1 = nn.Linear(784, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.avg_pool2d(F.leaky_relu(self.conv2(x), 0.01), 2, padding=1)
        x = self.drop(F.gelu(self.fc1(x.flatten(1))))
        return self.fc3(F.silu(self.fc2(x)))


class Tabular(nn.Module):
    """examples/models/tabular.cfg: embeddings of columns 0 and 1, their
    vectors (emb_a's, then emb_b's) and the numeric columns 2 to 9
    concatenated, two linear layers with ReLU, one logit."""

    def __init__(self):
        super().__init__()
        self.emb_a = nn.Embedding(1024, 8)
        self.emb_b = nn.Embedding(1024, 4)
        self.fc1 = nn.Linear(8 + 4 + 8, 32)
        self.fc2 = nn.Linear(32, 16)
        self.out = nn.Linear(16, 1)

    def forward(self, x):
        a = self.emb_a(x[:, 0].long())
        b = self.emb_b(x[:, 1].long())
        x = torch.cat([torch.cat([a, b], 1), x[:, 2:]], 1)
        return self.out(F.relu(self.fc2(F.relu(self.fc1(x)))))


class Norms(nn.Module):
    """"g:c1=C8k3b0,gn=Ug4,R,F,fc=L6,ln=V,fc2=L": group norm after a
    bias-free convolution, layer norm after a linear layer."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 8, 3, bias=False)
        self.gn = nn.GroupNorm(4, 8)
        self.fc = nn.Linear(8 * 26 * 26, 6)
        self.ln = nn.LayerNorm(6)
        self.fc2 = nn.Linear(6, 10)

    def forward(self, x):
        x = F.relu(self.gn(self.c1(x))).flatten(1)
        return self.fc2(self.ln(self.fc(x)))


def attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def run_graph(model, x):
    """The graph evaluated op by op (the ops the export writes)."""
    g = model.graph
    v = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy()) for t in g.initializer}
    v[g.input[0].name] = x
    for n in g.node:
        a, i = attrs(n), [v[name] for name in n.input]
        op = n.op_type
        if op == "Conv":
            p = a.get("pads", [0, 0, 0, 0])
            assert p[:2] == p[2:], "pads equal at both ends"
            y = F.conv2d(i[0], i[1], i[2] if len(i) > 2 else None, a.get("strides", 1), p[:2],
                         a.get("dilations", 1), a.get("group", 1))
        elif op in ("MaxPool", "AveragePool"):
            p = a.get("pads", [0, 0, 0, 0])
            k = a["kernel_shape"]
            if op == "MaxPool":
                y = F.max_pool2d(i[0], k, a.get("strides", k), p[:2])
            else:
                y = F.avg_pool2d(i[0], k, a.get("strides", k), p[:2],
                                 count_include_pad=bool(a.get("count_include_pad", 0)))
        elif op == "Gemm":
            w = i[1].t() if a.get("transB", 0) else i[1]
            y = i[0] @ w + (i[2] if len(i) > 2 else 0)
        elif op == "Flatten":
            y = i[0].flatten(a.get("axis", 1))
        elif op == "Constant":
            y = torch.from_numpy(numpy_helper.to_array(a["value"]).copy())
        elif op == "GlobalAveragePool":
            y = i[0].mean((2, 3), keepdim=True)
        elif op == "LeakyRelu":
            y = F.leaky_relu(i[0], a.get("alpha", 0.01))
        elif op == "Concat":
            y = torch.cat(i, a["axis"])
        elif op == "Gather":
            y = torch.index_select(i[0], a.get("axis", 0), i[1].reshape(-1).long())
            y = y.reshape(i[0].shape[:a.get("axis", 0)] + i[1].shape +
                          i[0].shape[a.get("axis", 0) + 1:])
        elif op == "Cast":
            assert a["to"] == onnx.TensorProto.INT64, a
            y = i[0].long()
        elif op == "Slice":
            assert list(i[3]) == [1] and list(i[4]) == [1], "x[:, k:]"
            y = i[0][:, int(i[1][0]):min(int(i[2][0]), i[0].shape[1])]
        elif op == "ReduceMean":
            y = i[0].mean(tuple(a["axes"]), keepdim=bool(a.get("keepdims", 1)))
        elif op == "Shape":
            y = torch.tensor(i[0].shape, dtype=torch.int64)
        elif op == "Reshape":
            assert not a.get("allowzero", 0)
            y = i[0].reshape([i[0].shape[k] if int(d) == 0 else int(d)
                              for k, d in enumerate(i[1])])
        elif op == "Unsqueeze":
            y = i[0]
            for d in sorted(int(d) for d in i[1]):
                y = y.unsqueeze(d)
        elif op == "InstanceNormalization":
            y = F.instance_norm(i[0], None, None, i[1], i[2], True, 0.0, a.get("epsilon", 1e-5))
        elif op == "BatchNormalization":
            assert not a.get("training_mode", 0) and len(n.output) == 1
            y = F.batch_norm(i[0], i[3], i[4], i[1], i[2], False, 0.0, a.get("epsilon", 1e-5))
        else:
            y = {"Relu": lambda: F.relu(i[0]), "Sigmoid": lambda: torch.sigmoid(i[0]),
                 "Tanh": lambda: torch.tanh(i[0]), "Erf": lambda: torch.erf(i[0]),
                 "Div": lambda: i[0] / i[1], "Add": lambda: i[0] + i[1],
                 "Sub": lambda: i[0] - i[1], "Pow": lambda: i[0] ** i[1],
                 "Sqrt": lambda: torch.sqrt(i[0]),
                 "Mul": lambda: i[0] * i[1]}[op]()
        v[n.output[0]] = y
    return v[g.output[0].name]


def idx(data, name):
    p = os.path.join(data, name)
    raw = open(p, "rb").read() if os.path.exists(p) else gzip.open(p + ".gz").read()
    shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(raw[3])]
    return torch.frombuffer(bytearray(raw[4 + 4 * raw[3]:]), dtype=torch.uint8).reshape(shape)


def main():
    path, st_path, data = sys.argv[1:4]
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    ops = {o.domain: o.version for o in model.opset_import}
    assert ops == {"": 14}, ops
    meta = {p.key: p.value for p in model.metadata_props}
    ops = " ".join(n.op_type for n in model.graph.node)
    if sys.argv[4:] == ["tabular"]:  # a CSV's rows: their standardization
        assert "fednode.input_transform" in meta, sorted(meta)
        print("checker ok, opset 14, %d nodes: %s" % (len(model.graph.node), ops))
    else:
        scale, shift = float(meta["fednode.input_scale"]), float(meta["fednode.input_shift"])
        print("checker ok, opset 14, scale %.17g shift %g, %d nodes: %s" % (
            scale, shift, len(model.graph.node), ops))
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    with safe_open(st_path, framework="pt") as f:
        assert sorted(f.keys()) == sorted(weights), (sorted(f.keys()), sorted(weights))
        for k in f.keys():
            a, b = weights[k], f.get_tensor(k).numpy()
            assert a.shape == b.shape and a.tobytes() == b.tobytes(), k
    print("initializers: the safetensors export's %d tensors, bit for bit" % len(weights))
    tabular = sys.argv[4:] == ["tabular"]
    if sys.argv[4:] == ["resnet8"]:  # the module onnx_parity.py exports
        here = os.path.dirname(os.path.abspath(__file__))
        scope = {"__name__": "onnx_parity"}
        exec(open(os.path.join(here, "onnx_parity.py")).read().split("\ndef main():")[0], scope)
        net = scope["ResNet8"]()
    else:
        net = Tabular() if tabular else Norms() if sys.argv[4:] == ["norms"] else Net()
    net.load_state_dict({k: torch.from_numpy(w.copy()) for k, w in weights.items()}, strict=True)
    net.eval()
    if tabular:  # seeded rows of ids and numbers; no accuracy
        g = torch.Generator().manual_seed(5)
        x = torch.randn(64, 10, generator=g)
        x[:, :2] = torch.randint(0, 1024, (64, 2), generator=g).float()
    else:
        x = idx(data, "t10k-images-idx3-ubyte").float().unsqueeze(1) * scale + shift
        y = idx(data, "t10k-labels-idx1-ubyte").long()
    with torch.no_grad():
        ref = net(x)
        got = run_graph(model, x)
    rel = float((got - ref).norm() / ref.norm())
    assert rel <= 1e-5, rel
    print("graph op by op against the module: rel %.2e" % rel)
    if not tabular:
        print("acc %.4f" % float((ref.argmax(1) == y).float().mean()))

if __name__ == "__main__":
    main()
