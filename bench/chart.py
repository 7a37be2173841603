"""chart.py — the PNG chart of bench/run.sh: Kiln's speed over each peer, per workload.

Usage: chart.py OUT.png TITLE FILE... (the RESULT files of run.sh). Needs matplotlib
(Debian's python3-matplotlib, so run it with /usr/bin/python3). Bars above 1 mean Kiln is
faster; the axis is logarithmic, the dashed line is parity.
"""
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ORDER = ["gelu_chain", "softmax", "layer_norm", "sgemm", "mlp_fwd", "mlp_adam", "block_fwd",
         "block_train", "block_train_bf16", "cnn_fwd", "lstm_fwd"]
PEERS = [("torch", "PyTorch 1.13 eager"), ("torch2", "torch 2.x eager"),
         ("torch2c", "torch.compile"), ("ort", "ONNX Runtime")]


def main():
    out, title, files = sys.argv[1], sys.argv[2], sys.argv[3:]
    res = {}
    for f in files:
        for line in open(f):
            p = line.split()
            if len(p) == 6 and p[0] == "RESULT":
                res[(p[1], p[2])] = float(p[3])
    work = [w for w in ORDER if (w, "kiln") in res]
    peers = [(k, t) for k, t in PEERS if any((w, k) in res for w in work)]
    fig, ax = plt.subplots(figsize=(11, 4.8))
    width = 0.8 / max(1, len(peers))
    for j, (k, t) in enumerate(peers):
        xs = [i + (j - (len(peers) - 1) / 2) * width for i, w in enumerate(work) if (w, k) in res]
        ys = [res[(w, k)] / res[(w, "kiln")] for w in work if (w, k) in res]
        ax.bar(xs, ys, width, label=f"Kiln / {t}")
    ax.axhline(1.0, color="black", linestyle="--", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(work)))
    ax.set_xticklabels(work, rotation=30, ha="right")
    ax.set_ylabel("Kiln's speed over the peer (peer time / Kiln time)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main()
