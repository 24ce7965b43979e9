# torch_parity.py - the PyTorch side of tests/test_torch_parity.sh: builds
# the model a model file describes as an nn.Module with the file's module
# names, loads the parameters fednode initialized (DIR/ours.safetensors,
# strict), runs the same batch, and compares fednode's logits, loss, every
# gradient and the parameters after one SGD step (lr 0.1) norm-wise:
# ||ours - torch|| <= 1e-5 ||torch|| for each tensor. fp32, one thread.
# The logits in training mode, and in evaluation (net.eval(): batch norm's
# running statistics); after the step every state_dict entry, batch norm's
# running statistics and num_batches_tracked (an int64) included.
# usage: torch_parity.py MODEL.cfg DIR
import sys

import torch
from torch import nn
from torch.nn import functional as F

TOL = 1e-5
LR = 0.1
# A tensor whose true gradient is 0 (a bias before batch norm, which
# subtracts any shift again) holds rounding noise on both sides, which no
# bound of its own norm fits: its difference is bounded by ZERO_TOL of the
# whole gradient's norm instead (and of the whole step's, after the step).
ZERO_TOL = 1e-7


# activation layers of their own, with PyTorch's defaults (LeakyReLU's
# slope 0.01, GELU exact)
ACTIVATIONS = {"leaky_relu": nn.LeakyReLU, "gelu": nn.GELU, "silu": nn.SiLU,
               "sigmoid": nn.Sigmoid, "tanh": nn.Tanh}


def pair(v):
    p = [int(x) for x in v.split(",")]
    return (p[0], p[0]) if len(p) == 1 else (p[0], p[1])


def has_bias(kv):
    """fednode's bias = 0 or false is PyTorch's bias=False."""
    return kv.get("bias", "1") not in ("0", "false")


def sections(path):
    """[(kind, {key: value})] in file order, [input] and [output] included."""
    out = []
    for line in open(path):
        line = line.split("#")[0].split(";")[0].strip()
        if line.startswith("["):
            kind, line = line[1:].split("]", 1)
            out.append((kind, {}))
        toks = line.replace("=", " = ").split()
        for i in range(0, len(toks), 3):
            assert toks[i + 1] == "=", line
            out[-1][1][toks[i]] = toks[i + 2]
    return out


class Net(nn.Module):
    def __init__(self, path, classes):
        super().__init__()
        secs = sections(path)
        assert secs[0][0] == "input"
        inp = secs[0][1]
        self.shape = [int(x) for x in inp["shape"].split(",")] if "shape" in inp else [1, 1, int(inp["features"])]
        x0 = torch.zeros([1] + self.shape)
        self.order = []  # (module name, input ref, add's ref), refs by node name, "-": input
        outs = {}
        layers = [s for s in secs[1:] if s[0] != "output"]
        # the input's categorical columns: those the embeddings read
        cat = {int(kv["column"]) for kind, kv in layers if kind == "embedding"}
        for i, (kind, kv) in enumerate(layers):
            name = kv.get("name", str(i))
            src = kv.get("input", self.order[-1][0] if self.order else "-")
            if kind in ("embedding", "numeric"):
                src = "-"  # they take the model's input row
            x = x0 if src == "-" else outs[src]
            if kind == "embedding":
                m = Embedding(int(kv["num"]), int(kv["dim"]), int(kv["column"]))
            elif kind == "numeric":
                m = Numeric([j for j in range(x0[0].numel()) if j not in cat])
            elif kind == "add":
                m = Add()
            elif kind == "concat":
                m = Concat()
            elif kind == "conv":
                k = pair(kv["kernel"])
                m = nn.Conv2d(x.shape[1], int(kv["out"]), k, stride=pair(kv.get("stride", "1")),
                              padding=pair(kv.get("padding", "0")), dilation=pair(kv.get("dilation", "1")),
                              groups=int(kv.get("groups", "1")), bias=has_bias(kv))
            elif kind == "linear":
                out = classes if kv["out"] == "classes" else int(kv["out"])
                m = nn.Linear(x[0].numel(), out, bias=has_bias(kv))
            elif kind in ("maxpool", "avgpool"):
                k = pair(kv["kernel"])
                s = pair(kv["stride"]) if "stride" in kv else k
                p = pair(kv.get("padding", "0"))
                m = nn.MaxPool2d(k, s, p) if kind == "maxpool" else nn.AvgPool2d(k, s, p)
            elif kind == "global_avgpool":
                m = nn.AdaptiveAvgPool2d(1)
            elif kind == "relu":
                m = nn.ReLU()
            elif kind == "flatten":
                m = nn.Flatten()
            elif kind == "layernorm":  # over all of a sample's values
                m = nn.LayerNorm(list(x.shape[1:]) if x.dim() > 2 else x.shape[1])
            elif kind == "groupnorm":
                m = nn.GroupNorm(int(kv["groups"]), x.shape[1])
            elif kind == "dropout":  # parity with p = 0 (or in evaluation)
                m = nn.Dropout(float(kv.get("p", "0.5")))
            elif kind in ACTIVATIONS:
                m = ACTIVATIONS[kind]()
            elif kind == "batchnorm":  # per feature of a flat input, else per channel
                bn = nn.BatchNorm1d if x.dim() == 2 else nn.BatchNorm2d
                m = bn(x.shape[1], eps=float(kv.get("eps", "1e-5")),
                       momentum=float(kv.get("momentum", "0.1")))
            else:
                raise ValueError(kind)
            self.put(name, m)
            self.order.append((name, src, kv.get("from")))
            m.eval()  # shapes only: no batch statistics of a batch of one
            outs[name] = self.step(m, x, x0 if kv.get("from") == "-" else outs.get(kv.get("from")))
        self.train()

    def put(self, name, m):
        """m as the module of a dotted name ("layer1.0.conv1"), inside
        containers made on the way, as torchvision's ResNet nests them."""
        parent, *path = [self] + name.split(".")
        for part in path[:-1]:
            if not hasattr(parent, part):
                parent.add_module(part, nn.Module())
            parent = getattr(parent, part)
        parent.add_module(path[-1], m)

    def get(self, name):
        m = self
        for part in name.split("."):
            m = getattr(m, part)
        return m

    @staticmethod
    def step(m, x, other):
        if isinstance(m, nn.Linear) and x.dim() > 2:
            x = x.flatten(1)  # fednode's linear takes its input flattened
        return m(x, other) if isinstance(m, (Add, Concat)) else m(x)

    def forward(self, x0):
        outs = {}
        for name, src, frm in self.order:
            x = x0 if src == "-" else outs[src]
            outs[name] = self.step(self.get(name), x, x0 if frm == "-" else outs.get(frm))
        return outs[self.order[-1][0]]


class Embedding(nn.Embedding):
    """fednode's [embedding]: the weight row of the id in one column of the row."""

    def __init__(self, num, dim, column):
        super().__init__(num, dim)
        self.column = column

    def forward(self, x):
        return super().forward(x.flatten(1)[:, self.column].long())


class Numeric(nn.Module):
    """fednode's [numeric]: the row's columns no embedding reads, in order."""

    def __init__(self, cols):
        super().__init__()
        self.cols = cols

    def forward(self, x):
        return x.flatten(1)[:, self.cols]


class Add(nn.Module):
    """fednode's [add]: its input plus the output of the layer named by from."""

    def forward(self, x, other):
        return x + other


class Concat(nn.Module):
    """fednode's [concat]: its input's channels, then those of the layer from names."""

    def forward(self, x, other):
        return torch.cat([x, other], 1)


def main():
    from safetensors import safe_open  # only here: bench/torch_nets.py imports Net

    cfg, d = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    with safe_open(d + "/ours.safetensors", framework="pt") as f:
        ours = {k: f.get_tensor(k) for k in f.keys()}
    x, y = ours["x"], ours["y"]
    net = Net(cfg, ours["logits"].shape[1])
    sd = {k: v for k, v in ours.items() if k in net.state_dict()}
    net.load_state_dict(sd, strict=True)
    net.eval()
    with torch.no_grad():
        eval_logits = net(x)
    net.train()
    logits = net(x)
    output = [kv for kind, kv in sections(cfg) if kind == "output"]
    if output and output[0].get("loss") == "bce":  # one logit, BCEWithLogitsLoss
        loss = F.binary_cross_entropy_with_logits(logits[:, 0], y)
    elif output and output[0].get("loss") == "mse":  # float targets, MSELoss's mean
        loss = F.mse_loss(logits, y)
    else:
        loss = F.cross_entropy(logits, y.long())
    loss.backward()
    worst = 0.0
    bad = []

    def check(what, mine, theirs, floor=0.0):
        nonlocal worst
        diff, norm = (mine - theirs).norm().item(), theirs.norm().item()
        rel = diff / max(norm, 1e-30)
        zero = diff > TOL * norm and diff <= TOL * norm + ZERO_TOL * floor
        if not zero:
            worst = max(worst, rel)
        print("  %-24s %s  rel %.2e%s" % (what, "x".join(map(str, theirs.shape)), rel,
                                         "  (zero: %.1e of the whole)" % (diff / floor) if zero else ""))
        if not diff <= TOL * norm + ZERO_TOL * floor:
            bad.append(what)

    check("logits", ours["logits"], logits.detach())
    check("eval_logits", ours["eval_logits"], eval_logits)
    check("loss", ours["loss"], loss.detach().reshape(1))
    whole = sum(p.grad.norm().item() ** 2 for p in net.parameters()) ** 0.5
    for k, p in net.named_parameters():
        check("grad." + k, ours["grad." + k], p.grad, whole)
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    opt.step()
    for k, v in net.state_dict().items():  # parameters and buffers
        check("step." + k, ours["step." + k].double(), v.double(), LR * whole)
    print("parameters %d, worst relative difference %.2e" % (sum(p.numel() for p in net.parameters()), worst))
    if bad:
        print("FAIL: beyond %g: %s" % (TOL, ", ".join(bad)))
        sys.exit(1)


if __name__ == "__main__":
    main()
