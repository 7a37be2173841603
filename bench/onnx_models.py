"""onnx_models.py — PyTorch's side of bench/onnx_models.sh (Debian's python3-torch 1.13: /usr/bin/python3).

  onnx_models.py export DIR [MODEL ...]   exports each model to DIR/<model>.onnx with a random input
                                          DIR/<model>.in<k>.npy and PyTorch's outputs DIR/<model>.out<k>.npy
  onnx_models.py time DIR [MODEL ...]     prints "RESULT <model> torch <median ms>" per model

The models: torchvision's resnet18 and mobilenet_v2 (random weights and batch-norm statistics, eval
mode, 1x3x224x224), a
2-layer nn.TransformerEncoder (d_model 64, 4 heads, feed-forward 128, batch_first, 1x16x64) and a
2-layer nn.LSTM (input 32, hidden 64, batch_first, 1x16x32). Seeds are fixed, so a run is
reproducible. Timing: torch.set_num_threads(KILN_NUM_THREADS, default 1), no_grad, median of
BENCH_REPS (default 20) runs after 3 warm-ups.
"""
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn as nn

OPSET = 17


class LSTMModel(nn.Module):
    """nn.LSTM returning its output sequence and final states (y, h, c)."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(32, 64, num_layers=2, batch_first=True)

    def forward(self, x):
        y, (h, c) = self.lstm(x)
        return y, h, c


def randomize_bn(m):
    """Batch-norm statistics and affine parameters away from their identity init: with the fresh
    init, mobilenet_v2's logits are ~1e-9, and the comparison would say little."""
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.2, 0.2)
            mod.running_var.uniform_(0.5, 1.5)
            mod.weight.data.uniform_(0.8, 1.6)
            mod.bias.data.uniform_(-0.2, 0.4)


def make(name):
    """(module, example inputs) of a model, seeded."""
    torch.manual_seed(0)
    if name in ("resnet18", "mobilenet_v2"):
        import torchvision

        m = getattr(torchvision.models, name)(weights=None)
        randomize_bn(m)
        x = (torch.randn(1, 3, 224, 224),)
    elif name == "transformer":
        layer = nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, dropout=0.0,
                                           batch_first=True)
        m = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        x = (torch.randn(1, 16, 64),)
    elif name == "lstm":
        m = LSTMModel()
        x = (torch.randn(1, 16, 32),)
    else:
        raise SystemExit("unknown model " + name)
    return m.eval(), x


MODELS = ["resnet18", "mobilenet_v2", "transformer", "lstm"]


def export(d, names):
    os.makedirs(d, exist_ok=True)
    for name in names:
        m, x = make(name)
        with torch.no_grad():
            y = m(*x)
        y = y if isinstance(y, tuple) else (y,)
        path = os.path.join(d, name + ".onnx")
        torch.onnx.export(m, x, path, opset_version=OPSET,
                          input_names=["x%d" % i for i in range(len(x))],
                          output_names=["y%d" % i for i in range(len(y))])
        for i, t in enumerate(x):
            np.save(os.path.join(d, "%s.in%d.npy" % (name, i)), t.numpy())
        for i, t in enumerate(y):
            np.save(os.path.join(d, "%s.out%d.npy" % (name, i)), t.numpy())
        print("exported %s (%d bytes, opset %d)" % (path, os.path.getsize(path), OPSET))


def timing(d, names):
    torch.set_num_threads(int(os.environ.get("KILN_NUM_THREADS", "1")))
    reps = int(os.environ.get("BENCH_REPS", "20"))
    for name in names:
        m, _ = make(name)
        x = []
        i = 0
        while os.path.exists(os.path.join(d, "%s.in%d.npy" % (name, i))):
            x.append(torch.from_numpy(np.load(os.path.join(d, "%s.in%d.npy" % (name, i)))))
            i += 1
        ts = []
        with torch.no_grad():
            for k in range(reps + 3):
                t0 = time.perf_counter()
                m(*x)
                if k >= 3:
                    ts.append((time.perf_counter() - t0) * 1e3)
        print("RESULT %s torch %.3f" % (name, statistics.median(ts)))


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("export", "time"):
        raise SystemExit(__doc__)
    names = sys.argv[3:] or MODELS
    (export if sys.argv[1] == "export" else timing)(sys.argv[2], names)


if __name__ == "__main__":
    main()
