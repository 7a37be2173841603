#!/usr/bin/python3
"""memory_torch.py — the PyTorch 1.13 (eager) side of bench/memory.sh.

    /usr/bin/python3 bench/memory_torch.py [D HEADS T B [THREADS]]   (default 256 8 256 8 2)

The transformer block of bench/train_torch.py (pre-norm, ff 4*D, gelu_tanh, q/k/v
without bias) with heads=HEADS, MSELoss against a random target, Adam, x f32[B, T, D].
A step is zero_grad, forward, loss, backward, optimizer.step().

torch.cuda is absent here and PyTorch's CPU allocator keeps no peak counter, so this
measures the resident set: its high-water mark over 3 steps (VmHWM, reset through
/proc/self/clear_refs after `import torch`) minus the resident set before the model
was built. That covers parameters, data, gradients, Adam state, activations and the
temporaries of backward, the same things Kiln's planned peak counts. Prints
    RESULT torch <rss bytes>
"""
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from train_torch import Block  # noqa: E402


def status_bytes(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def main(argv):
    d, heads, t, b = (int(a) for a in (argv[1:5] if len(argv) > 4 else (256, 8, 256, 8)))
    threads = int(argv[5]) if len(argv) > 5 else 2
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    rss0 = status_bytes("VmRSS")
    model = Block(d, heads, 4 * d)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.rand(b, t, d) * 2 - 1
    y = torch.rand(b, t, d) * 2 - 1
    loss = None
    for _ in range(3):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    hwm = status_bytes("VmHWM")
    print(f"torch {torch.__version__}: RSS peak over the steps {(hwm - rss0) / 1048576:.1f} MiB, "
          f"loss {loss.item():.4f}")
    print(f"RESULT torch {hwm - rss0}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
