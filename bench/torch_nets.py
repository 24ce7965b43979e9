#!/usr/bin/python3
# torch_nets.py - PyTorch's side of bench/bench_train.c: training samples
# per CPU-second of one net at batch 64, SGD lr 0.05 momentum 0.9, one
# thread, on random data of the net's input: uint8 images mapped as
# fednode's default (b / 127.5 - 1) batch by batch, or a CSV row (the ids
# an embedding reads in its column, N(0, 1) elsewhere). Trains a warm-up of
# 50 steps, then chunks of 50 until 0.6 CPU-seconds have passed (fednode's
# worker does the same). Prints "samples_per_s=N".
# NET: mlp:256,128, cnn (fednode's presets, written out here) or a model
# file, whose nn.Module tests/torch_parity.py builds (module names and all).
# usage: taskset -c 0 /usr/bin/python3 bench/torch_nets.py NET C,H,W CLASSES
import os
import sys
import time

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import torch_parity  # noqa: E402  (its Net: a model file as an nn.Module)

BATCH, CHUNK, MIN_CPU, SAMPLES = 64, 50, 0.6, 60000


def preset(net, c, h, w, classes):
    """fednode's presets (model/model.c's preset_graph)."""
    if net == "mlp:256,128":
        return nn.Sequential(nn.Flatten(), nn.Linear(c * h * w, 256), nn.ReLU(),
                             nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, classes))
    if net == "cnn":
        hh, ww = ((h - 4) // 2 - 4) // 2, ((w - 4) // 2 - 4) // 2
        return nn.Sequential(nn.Conv2d(c, 32, 5), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(64 * hh * ww, 512), nn.ReLU(), nn.Linear(512, classes))
    raise SystemExit("torch_nets.py: unknown net %s (mlp:256,128, cnn or a .cfg file)" % net)


def main():
    net, shape, classes = sys.argv[1], [int(v) for v in sys.argv[2].split(",")], int(sys.argv[3])
    c, h, w = shape
    torch.set_num_threads(1)
    torch.manual_seed(1)
    loss = "cross_entropy"
    if net.endswith(".cfg"):
        model = torch_parity.Net(net, classes)
        out = [kv for kind, kv in torch_parity.sections(net) if kind == "output"]
        loss = out[0].get("loss", loss) if out else loss
    else:
        model = preset(net, c, h, w, classes)
    embeds = [m for m in model.modules() if isinstance(m, torch_parity.Embedding)]
    if embeds:  # a CSV's row: ids where an embedding reads, numbers elsewhere
        x_all = torch.randn(SAMPLES, c * h * w)
        for m in embeds:
            x_all[:, m.column] = torch.randint(0, m.num_embeddings, (SAMPLES,)).float()
        to_x = lambda x: x  # noqa: E731
    else:
        x_all = torch.randint(0, 256, (SAMPLES, c, h, w), dtype=torch.uint8)
        to_x = lambda x: x.float().div_(127.5).sub_(1.0)  # noqa: E731
    y_all = torch.randint(0, classes, (SAMPLES,), dtype=torch.int64)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def loss_of(logits, y):
        if loss == "bce":  # one logit
            return F.binary_cross_entropy_with_logits(logits[:, 0], y.float())
        return F.cross_entropy(logits, y)

    perm, at = torch.randperm(SAMPLES), [0]

    def run(steps):
        for _ in range(steps):
            if at[0] + BATCH > SAMPLES:
                at[0] = 0
            idx = perm[at[0]:at[0] + BATCH]
            at[0] += BATCH
            opt.zero_grad(set_to_none=True)
            loss_of(model(to_x(x_all[idx])), y_all[idx]).backward()
            opt.step()

    run(CHUNK)  # warm-up
    steps, t0 = 0, time.process_time()
    while True:
        run(CHUNK)
        steps += CHUNK
        dt = time.process_time() - t0
        if dt >= MIN_CPU:
            break
    print("samples_per_s=%.1f" % (steps * BATCH / dt))


if __name__ == "__main__":
    main()
