#!/usr/bin/python3
# torch_mlp.py - PyTorch's training throughput on the MLP bench_train.c
# measures: 784-256-128-10 with ReLU, batch 64, SGD lr 0.05 momentum 0.9,
# random uint8 images scaled to [0,1] per batch, one thread. Prints
# "samples_per_s=N" (best of 5 runs of 400 steps after a warm-up run).
# Run it pinned: taskset -c 0 /usr/bin/python3 bench/torch_mlp.py
import time

import torch

BATCH, STEPS, REPEATS, SAMPLES = 64, 400, 5, 60000


def main():
    torch.set_num_threads(1)
    torch.manual_seed(1)
    x_all = torch.randint(0, 256, (SAMPLES, 784), dtype=torch.uint8)
    y_all = torch.randint(0, 10, (SAMPLES,), dtype=torch.int64)
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 256), torch.nn.ReLU(),
        torch.nn.Linear(256, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    def run():
        perm = torch.randperm(SAMPLES)
        for s in range(STEPS):
            idx = perm[s * BATCH:(s + 1) * BATCH]
            x = x_all[idx].float().div_(255.0)
            y = y_all[idx]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()

    run()
    best = 0.0
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        run()
        dt = time.perf_counter() - t0
        best = max(best, STEPS * BATCH / dt)
    print("samples_per_s=%.1f" % best)


if __name__ == "__main__":
    main()
