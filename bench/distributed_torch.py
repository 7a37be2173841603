"""distributed_torch.py MODEL RANKS BATCH SAMPLES EPOCHS — PyTorch DDP (gloo, loopback) on the
models of bench/distributed.sh, one thread a rank: prints "samples/s N" (global samples a second,
timed after the first step) from rank 0. The global batch is BATCH, each rank takes BATCH/RANKS
contiguous rows of it, as Kiln's ranks do."""
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn


class Transformer(nn.Module):
    def __init__(self, vocab=1000, classes=5, d=128, heads=4, layers=2, context=64):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(context, d))
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True,
                                           norm_first=True, activation="gelu")
        self.enc = nn.TransformerEncoder(layer, layers)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, t):
        h = self.enc(self.emb(t) + self.pos[: t.shape[1]])
        return self.head(self.norm(h).mean(1))


def model_of(name):
    if name == "mlp":
        return nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                             nn.Linear(1024, 10))
    return Transformer()


def run(rank, name, ranks, batch, samples, epochs, port):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=ranks)
    torch.manual_seed(1)
    r = np.random.default_rng(1)
    if name == "mlp":
        x = torch.from_numpy(r.standard_normal((samples, 784)).astype(np.float32))
        y = torch.from_numpy(r.integers(0, 10, samples))
    else:
        x = torch.from_numpy(r.integers(0, 1000, (samples, 64)))
        y = torch.from_numpy(r.integers(0, 5, samples))
    m = nn.parallel.DistributedDataParallel(model_of(name))
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    steps, t0 = 0, None
    for e in range(epochs):
        order = torch.from_numpy(np.random.default_rng(e).permutation(samples))
        for lo in range(0, samples, batch):
            idx = order[lo:lo + batch]
            n = len(idx)
            part = idx[n * rank // ranks:n * (rank + 1) // ranks]
            opt.zero_grad()
            loss_fn(m(x[part]), y[part]).backward()
            opt.step()
            steps += 1
            if t0 is None:
                t0, done = time.perf_counter(), 0
            else:
                done += n
    dt = time.perf_counter() - t0
    if rank == 0:
        print("samples/s %.1f" % (done / dt))
    dist.destroy_process_group()


if __name__ == "__main__":
    name, ranks, batch, samples, epochs = sys.argv[1], *map(int, sys.argv[2:6])
    port = 29500 + os.getpid() % 1000
    mp.spawn(run, args=(name, ranks, batch, samples, epochs, port), nprocs=ranks)
