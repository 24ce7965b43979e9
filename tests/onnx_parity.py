# onnx_parity.py - the PyTorch side of tests/test_onnx.sh: builds each
# reference nn.Module, exports it with torch.onnx.export (training mode,
# no constant folding: what a team hands fednode to train), has fednode
# import the file (DUMP NAME.onnx DIR: build/tests/test_model_cfg
# --torch-dump) and compares what fednode computed from the file's weights
# on its batch: logits, loss, every gradient, the parameters after one SGD
# step (lr 0.1), each norm-wise within 1e-5 of PyTorch's on the same
# module (a norm's weight and bias, 1 and 0 as PyTorch starts them, are
# drawn at random first so that their gradients count; batch norm's running
# statistics moved by two batches first, and compared after the step too).
# An eval-mode export (constants folded) is checked on its evaluation
# logits (batch norm's running statistics).
# usage: onnx_parity.py DUMP DIR [NAME...]
import subprocess
import sys
import warnings

import torch
from torch import nn
from torch.nn import functional as F
from safetensors import safe_open

TOL = 1e-5
LR = 0.1
warnings.filterwarnings("ignore")


class SimpleCNN(nn.Module):
    """NIID-Bench's SimpleCNN, written as its code writes it (x.view)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(256, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = x.view(x.size(0), -1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class Branches(nn.Module):
    """Padding folded into pooling, strided and grouped convolutions, a
    residual, a channel concat, GELU, SiLU, LeakyReLU, Tanh, a global
    average pool, a bias-free layer and a softmax last."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.pool = nn.AvgPool2d(3, stride=1, padding=1)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)
        self.side = nn.Conv2d(8, 4, 1)
        self.mp = nn.MaxPool2d(3, stride=2, padding=1)
        self.fc = nn.Linear(12, 16)
        self.head = nn.Linear(16, 5)

    def forward(self, x):
        x = F.gelu(self.stem(x))
        y = self.pool(x)
        y = F.silu(self.dw(y)) + x
        z = torch.tanh(self.side(y))
        y = torch.cat([y, z], 1)
        y = F.adaptive_avg_pool2d(self.mp(F.leaky_relu(y)), 1).flatten(1)
        return torch.softmax(self.head(torch.relu(self.fc(y))), 1)


class Tabular(nn.Module):
    """A flat input through linear layers, one logit (binary)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(30, 16)
        self.fc2 = nn.Linear(16, 1)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class Embeds(nn.Module):
    """The tabular net: two categorical columns through embeddings, their
    vectors and the numeric columns concatenated, two linear layers, one
    logit (binary)."""

    def __init__(self):
        super().__init__()
        self.emb_a = nn.Embedding(16, 3)
        self.emb_b = nn.Embedding(8, 2)
        self.fc1 = nn.Linear(3 + 2 + 3, 6)
        self.out = nn.Linear(6, 1)

    def forward(self, x):
        a = self.emb_a(x[:, 0].long())
        b = self.emb_b(x[:, 1].long())
        return self.out(torch.relu(self.fc1(torch.cat([a, b, x[:, 2:]], 1))))


class Norms(nn.Module):
    """Group norm after a bias-free convolution, layer norm, dropout (at p = 0
    for parity: a mask is no PyTorch's), as the exporter writes them before
    opset 17 (patterns) and at 17 (LayerNormalization)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, bias=False)
        self.gn = nn.GroupNorm(4, 8)
        self.fc = nn.Linear(8 * 4 * 4, 6)
        self.ln = nn.LayerNorm(6)
        self.drop = nn.Dropout(0.0)
        self.out = nn.Linear(6, 3)

    def forward(self, x):
        y = torch.relu(self.gn(self.conv(x))).flatten(1)
        return self.out(self.drop(self.ln(self.fc(y))))


class Norms17(Norms):
    pass


class BatchNorms(nn.Module):
    """Batch norm per channel after convolutions (one without a bias, one
    of eps 1e-3 and momentum 0.2) and per feature after a linear layer, a
    relu after two of them; ONNX's BatchNormalization in training mode
    (five outputs before opset 14, three from 14)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(6)
        self.conv2 = nn.Conv2d(6, 4, 3)
        self.bn2 = nn.BatchNorm2d(4, eps=1e-3, momentum=0.2)
        self.fc = nn.Linear(4 * 4 * 4, 8)
        self.bn3 = nn.BatchNorm1d(8)
        self.out = nn.Linear(8, 5)

    def forward(self, x):
        y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x))))).flatten(1)
        return self.out(torch.relu(self.bn3(self.fc(y))))


class BatchNorms14(BatchNorms):
    pass


class Block(nn.Module):
    """torchvision's BasicBlock."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None if stride == 1 else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNet8(nn.Module):
    """examples/models/resnet8.cfg as torchvision writes a ResNet."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = nn.Sequential(Block(16, 16, 1))
        self.layer2 = nn.Sequential(Block(16, 32, 2))
        self.layer3 = nn.Sequential(Block(32, 64, 2))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        x = self.layer3(self.layer2(self.layer1(self.relu(self.bn1(self.conv1(x))))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


NETS = {
    "simplecnn": (SimpleCNN, (1, 28, 28), 13),
    "branches": (Branches, (3, 12, 12), 11),
    "tabular": (Tabular, (30,), 17),
    "embeds": (Embeds, (5,), 13),
    "norms": (Norms, (3, 6, 6), 13),
    "norms17": (Norms17, (3, 6, 6), 17),
    "batchnorms": (BatchNorms, (3, 6, 6), 13),
    "batchnorms14": (BatchNorms14, (3, 6, 6), 14),
    "resnet8": (ResNet8, (1, 28, 28), 14),
}
NORMS = (nn.GroupNorm, nn.LayerNorm, nn.BatchNorm1d, nn.BatchNorm2d)


def made(cls):
    """The module, seeded, a norm's 1s and 0s drawn so that every term
    counts; batch norm's running statistics moved by two batches."""
    torch.manual_seed(7)
    net = cls()
    with torch.no_grad():
        for mod in net.modules():
            for v in mod.parameters(recurse=False) if isinstance(mod, NORMS) else ():
                v.add_(0.3 * torch.randn_like(v))
        if any(isinstance(mod, NORMS[2:]) for mod in net.modules()):
            shape = NETS[[k for k, v in NETS.items() if v[0] is cls][0]][1]
            for _ in range(2):
                net(torch.randn([4] + list(shape)))
            zero_counters(net)
    return net


def zero_counters(net):
    """Exporters drop num_batches_tracked, so fednode's starts at 0."""
    for mod in net.modules():
        if isinstance(mod, NORMS[2:]):
            mod.num_batches_tracked.zero_()


def export(net, shape, path, opset, train):
    net.train(train)
    torch.onnx.export(
        net, torch.zeros([2] + list(shape)), path, opset_version=opset,
        training=torch.onnx.TrainingMode.TRAINING if train else torch.onnx.TrainingMode.EVAL,
        do_constant_folding=not train, input_names=["input"], output_names=["output"],
        dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})


def run(dump, d, name):
    cls, shape, opset = NETS[name]
    net = made(cls)
    path = "%s/%s.onnx" % (d, name)
    export(net, shape, path, opset, True)
    zero_counters(net)  # the export's trace counted a batch
    out = subprocess.run([dump, "--torch-dump", d, path], capture_output=True, text=True)
    if out.returncode != 0:
        print(out.stdout + out.stderr)
        return ["fednode could not import " + path]
    with safe_open(d + "/ours.safetensors", framework="pt") as f:
        ours = {k: f.get_tensor(k) for k in f.keys()}
    x, y = ours["x"].reshape([-1] + list(shape)), ours["y"].long()
    net.train()
    logits = net(x)
    if name == "branches":  # the softmax last is folded into the loss
        logits = torch.log(logits)
    if logits.shape[1] == 1:
        loss = F.binary_cross_entropy_with_logits(logits[:, 0], y.float())
    else:
        loss = F.cross_entropy(logits, y)
    loss.backward()
    bad = []
    whole = sum(p.grad.norm().item() ** 2 for p in net.parameters()) ** 0.5

    def check(what, mine, theirs):
        rel = (mine - theirs).norm().item() / max(theirs.norm().item(), 1e-30)
        if what.startswith("grad.") and theirs.norm().item() <= 1e-7 * whole:
            # exactly 0 (a bias before batch norm): bounded by the whole gradient
            rel = (mine - theirs).norm().item() / whole
            what += " (zero: of the whole)"
        print("  %-10s %-22s %-12s rel %.2e" % (name, what, "x".join(map(str, theirs.shape)), rel))
        if not rel <= TOL:
            bad.append("%s %s" % (name, what))

    if name == "branches":  # fednode's logits are the softmax's input
        check("softmax(logits)", torch.softmax(ours["logits"], 1), torch.exp(logits).detach())
    else:
        check("logits", ours["logits"], logits.detach())
    check("loss", ours["loss"], loss.detach().reshape(1))
    for k, p in net.named_parameters():
        check("grad." + k, ours["grad." + k], p.grad)
    torch.optim.SGD(net.parameters(), lr=LR).step()
    for k, p in net.named_parameters():
        check("step." + k, ours["step." + k], p.detach())
    for k, b in net.named_buffers():  # batch norm's, after the step's forward
        check("step." + k, ours["step." + k].double(), b.double())
    # the same module exported for inference (constants folded): its logits
    net.zero_grad()
    net = made(cls)
    path = "%s/%s-eval.onnx" % (d, name)  # NAME.onnx stays the training form
    export(net, shape, path, opset, False)
    out = subprocess.run([dump, "--torch-dump", d, path], capture_output=True, text=True)
    if out.returncode != 0:
        print(out.stdout + out.stderr)
        return bad + ["fednode could not import the eval-mode " + path]
    with safe_open(d + "/ours.safetensors", framework="pt") as f:
        ours = {k: f.get_tensor(k) for k in f.keys()}
    net.eval()
    logits = net(ours["x"].reshape([-1] + list(shape))).detach()
    if name == "branches":
        check("eval softmax", torch.softmax(ours["eval_logits"], 1), logits)
    else:  # evaluation: batch norm's running statistics
        check("eval logits", ours["eval_logits"], logits)
    return bad


def main():
    dump, d = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    bad = []
    for name in sys.argv[3:] or list(NETS):
        bad += run(dump, d, name)
    if bad:
        print("FAIL: beyond %g: %s" % (TOL, ", ".join(bad)))
        sys.exit(1)


main()
