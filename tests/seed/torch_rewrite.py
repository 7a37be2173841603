#!/usr/bin/python3
"""The float64 PyTorch rewrite of the seed programs in this folder.

Writes params_np.npz (an archive numpy.savez made, for params_io.kiln) and the .expected files (the stdout `kiln run PROGRAM.kiln` must print; check.sh compares
numbers with a relative tolerance of 1e-7) of grad_fd, hessian, minimize, 001_s2_gated_blocks,
001_s2_ops, 002_s1_contract, 002_s7_fit and 002_s9_own_layer, computed by PyTorch in float64 from
the same numbers: the data files here and Kiln's documented initialisers, re-implemented below
(Philox-4x32-10 as in ir/ref_source.c, the normal draw of kl_init_fill in layers/core.c, He
initialisation of linear/dense, the program's seed counter of docs/kiln-syntax.md), and kiln_fit's
loop (train/fit.c: the per-epoch Philox shuffle, batches, schedules, history and val_history) around
torch.optim's optimizers. Run it with Debian's /usr/bin/python3 (numpy, torch 1.13);
the tests read only the .expected files, so they need no torch.
"""
import math
import os

import numpy as np
import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)
HERE = os.path.dirname(os.path.abspath(__file__))
M32 = 0xFFFFFFFF


def philox4x32(ctr, key):
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    for r in range(10):
        if r:
            k0 = (k0 + 0x9E3779B9) & M32
            k1 = (k1 + 0xBB67AE85) & M32
        p0 = 0xD2511F53 * c0
        p1 = 0xCD9E8D57 * c2
        hi0, lo0, hi1, lo1 = p0 >> 32, p0 & M32, p1 >> 32, p1 & M32
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return c0, c1, c2, c3


def fnv1a32(s):
    h = 2166136261
    for ch in s.encode():
        h = ((h ^ ch) * 16777619) & M32
    return h


def unit53(hi, lo):
    return math.ldexp(float(((hi >> 5) << 26) | (lo >> 6)), -53)


def normal(shape, seed, path, a=1.0):
    """kl_init_fill with KL_INIT_NORMAL: element i from counter (i, 0, fnv1a32(path), 0)."""
    n = int(np.prod(shape)) if shape else 1
    key, h = (seed & M32, seed >> 32), fnv1a32(path)
    out = []
    for i in range(n):
        w = philox4x32((i & M32, i >> 32, h, 0), key)
        u1, u2 = unit53(w[0], w[1]), unit53(w[2], w[3])
        out.append(a * math.sqrt(-2.0 * math.log(1.0 - u1)) * math.cos(2 * math.pi * u2))
    return torch.tensor(out).reshape(shape)


def dense(n_in, n_out, seed, prefix=""):
    """linear/dense parameters: W ~ He N(0, 2/n_in), b = 0 (layers/l_dense.c)."""
    W = normal((n_in, n_out), seed, prefix + "W", math.sqrt(2.0 / n_in)).requires_grad_()
    b = torch.zeros(n_out, requires_grad=True)
    return W, b


g10 = lambda x: "%.10g" % float(x)
vec = lambda t: "[" + ", ".join(g10(v) for v in t) + "]"
mat = lambda t: "[" + ", ".join(vec(row) for row in t) + "]"
gelu = lambda x: F.gelu(x, approximate="tanh")  # gelu(x) and activation("gelu") are gelu_tanh


def write(name, lines):
    with open(os.path.join(HERE, name + ".expected"), "w") as out:
        out.write("\n".join(lines) + "\n")


def grad_fd():
    X = torch.tensor([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]])
    W = torch.tensor([[0.3, -0.6], [0.9, 0.2], [-0.4, 0.7]], requires_grad=True)
    b = torch.tensor([0.1, -0.2], requires_grad=True)
    head = torch.tensor([[2.0], [-1.0]], requires_grad=True)
    loss = (((torch.tanh(X @ W + b)) @ head) ** 2).sum()
    loss.backward()
    gw = W.grad[1, 1]
    write("grad_fd", [f"{g10(loss)} {g10(loss)}", f"{g10(gw)} {g10(gw)}", "1",
                      f"{mat(head.grad)} {vec(b.grad)}"])


def seed_001_s2():
    X = torch.tensor(np.load(os.path.join(HERE, "001_X.npy")))
    y = torch.tensor(np.load(os.path.join(HERE, "001_y.npy")))
    # record(...) initialises its layer fields when it is made, from the program's seed counter:
    # the four inner records first (g, f: seeds 0..7), then the outer one's inp (8) and out (9).
    blocks = [dict(g=dense(64, 64, 2 * k), f=dense(64, 64, 2 * k + 1)) for k in range(4)]
    inp, out = dense(16, 64, 8), dense(64, 1, 9)

    def block(p, x):
        gate = torch.sigmoid(x @ p["g"][0] + p["g"][1])
        h = gelu(F.layer_norm(x, (x.shape[-1],), eps=1e-5) @ p["f"][0] + p["f"][1])
        return x + gate * h

    h = X @ inp[0]
    for layer in blocks:
        h = block(layer, h)
    loss = ((h @ out[0] - y) ** 2).mean()
    loss.backward()
    n = 16 * 64 + 64 + 8 * (64 * 64 + 64) + 64 + 1
    write("001_s2_gated_blocks", [g10(loss), f"{n} {n} 4",
                                  f"{g10((blocks[1]['g'][0].grad ** 2).sum())} "
                                  f"{g10(out[0].grad.sum())}"])


def seed_002_s1():
    # sequential([linear(4, 32), activation("gelu"), linear(32, 3)]).init(seed=0): paths 0.* 2.*
    W0, b0 = dense(4, 32, 0, "0.")
    W2, b2 = dense(32, 3, 0, "2.")
    x = normal((8, 4), 0, "randn")  # randn without seed=: the program's first seed, 0
    logits = gelu(x @ W0 + b0) @ W2 + b2
    write("002_s1_contract", ["[8, 3]", f"{g10(logits.sum())} {g10((logits ** 2).sum())}"])


def seed_002_s9():
    x = normal((5, 8), 7, "randn")
    W = (normal((8, 8), 0, "randn") * 0.1).requires_grad_()
    G = (normal((8, 8), 1, "randn") * 0.1).requires_grad_()
    edges = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 0), (1, 3)]
    edges += [(j, i) for i, j in edges if i != j and (j, i) not in edges]  # undirected=true
    src = torch.tensor([e[0] for e in edges])
    dst = torch.tensor([e[1] for e in edges])
    msg = x[src] @ W
    gate = torch.sigmoid(x[dst] @ G)
    summed = torch.zeros(5, 8).index_add(0, dst, msg * gate)
    count = torch.zeros(5).index_add(0, dst, torch.ones(len(edges)))
    out = x + summed / count.clamp(min=1).unsqueeze(1)
    loss = (out ** 2).mean()
    loss.backward()
    write("002_s9_own_layer", [g10(loss), f"{g10(W.grad.sum())} {g10((G.grad ** 2).sum())} "
                                          f"{vec(count)} {len(edges)}"])


def params_np():
    """params_np.npz, the archive params_io.kiln loads: written by numpy.savez."""
    np.savez(os.path.join(HERE, "params_np.npz"),
             **{"0.W": np.arange(1, 13, dtype=np.float64).reshape(4, 3) / 10, "0.b": np.zeros(3),
                "2.W": np.ones((3, 2)), "2.b": np.array([0.5, 0.25])})


def hessian():
    X = torch.tensor([[0.5, -1.0], [1.5, 0.25], [0.3, 0.9]])
    W = torch.tensor([[0.3, -0.6], [0.9, 0.2]])
    b = torch.tensor([0.1, -0.2])

    def f(flat):  # the parameters' elements in tree order: W (row-major), then b
        return (torch.tanh(X @ flat[:4].reshape(2, 2) + flat[4:]) ** 2).sum()

    flat = torch.cat([W.reshape(-1), b])
    H = torch.autograd.functional.hessian(f, flat)
    v = torch.cat([torch.tensor([1.0, 0.0, 0.0, 0.5]), torch.tensor([0.0, -1.0])])
    hv = H @ v
    write("hessian", ["[6, 6]", mat(H), f"{mat(hv[:4].reshape(2, 2))} {vec(hv[4:])}", "1 1"])


def seed_001_s2_ops():
    x = normal((2, 3, 6, 6), 1, "randn")
    w = normal((4, 3, 3, 3), 2, "randn") * 0.2
    c = F.conv2d(x, w, padding=1)
    pooled = F.max_pool2d(F.relu(c), 2)
    E = normal((10, 8), 3, "randn")
    h = E[torch.tensor([[1, 2, 3], [4, 5, 9]])]
    q = F.layer_norm(h, (8,), eps=1e-5) @ normal((8, 8), 4, "randn")
    mask = torch.triu(torch.full((3, 3), float("-inf")), diagonal=1)
    scores = q @ h.transpose(1, 2) / math.sqrt(8.0) + mask
    att = torch.softmax(scores, -1) @ h
    rms = h / torch.sqrt((h ** 2).mean(-1, keepdim=True) + 1e-6)
    acts = gelu(q) + torch.sigmoid(q) + torch.tanh(q) + F.softplus(q)
    logits = att.reshape(6, 8)
    ce = F.cross_entropy(logits, torch.arange(6))
    write("001_s2_ops", [f"{g10(pooled.sum())} {g10((F.avg_pool2d(c, 3) ** 2).sum())}",
                         f"{g10((att ** 2).sum())} {g10(rms.sum())} "
                         f"{g10(torch.log_softmax(scores, -1)[:, -1].sum())}",
                         g10(acts.sum()), f"{g10(ce)} {g10(((att - h) ** 2).mean())}"])


def minimize():
    X = torch.tensor([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5], [-2.0, 1.0]])
    y = torch.tensor([[1.0], [2.0], [0.0], [-1.0]])

    def run(**kw):
        w = torch.tensor([[0.1], [-0.2]], requires_grad=True)
        b = torch.tensor([0.0], requires_grad=True)
        f = lambda: ((torch.tanh(X @ w + b) - y) ** 2).sum() + 0.1 * (w ** 2).sum()
        opt = torch.optim.LBFGS([w, b], **kw)

        def closure():
            opt.zero_grad()
            loss = f()
            loss.backward()
            return loss

        opt.step(closure)
        return w.detach(), b.detach(), f().detach(), opt.state[opt._params[0]]["n_iter"]

    w, b, loss, n = run(max_iter=20)
    w2, _, loss2, _ = run(max_iter=5, lr=0.5, history_size=2)
    write("minimize", [f"{mat(w)} {vec(b)} {g10(loss)} {n}", f"{mat(w2)} {g10(loss2)}"])


# ---------------------------------------------------------------- fit (train/fit.c)

def shuffle(n, seed, epoch):
    """kiln_fit's order of epoch `epoch`: Fisher-Yates from the end, j = (w0:w1) mod (i + 1) with
    w = Philox-4x32-10 of counter (i, i >> 32, epoch, 0x5348 "SH") keyed by the seed."""
    idx = list(range(n))
    key = (seed & M32, seed >> 32)
    for i in range(n - 1, 0, -1):
        w = philox4x32((i & M32, i >> 32, epoch & M32, 0x5348), key)
        j = ((w[0] << 32) | w[1]) % (i + 1)
        idx[i], idx[j] = idx[j], idx[i]
    return idx


def cosine_lr(step, total, base, warmup=0):
    """kiln_cosine_lr (train/schedule.c, docs/training.md)."""
    step = max(step, 0)
    if warmup > 0 and step < warmup:
        return base * step / warmup
    warmup = max(warmup, 0)
    if step >= total:
        return 0.0
    return base * 0.5 * (1 + math.cos(math.pi * (step - warmup) / (total - warmup)))


def step_lr(step, base, step_size, gamma):
    """kiln_step_lr: torch.optim.lr_scheduler.StepLR's rate."""
    return base if step < 0 or step_size < 1 else base * gamma ** (step // step_size)


def fit(params, data, loss_fn, opt, epochs=10, batch_size=0, seed=0, clip=None, schedule=None,
        val=None):
    """kiln_fit: every epoch the samples in shuffle(n, seed, epoch) order, cut into batches of
    batch_size (the last one smaller); per step the loss of the batch at the current parameters,
    clip_grad_norm_, and the optimizer's step at the rate schedule(step, total_steps) (0-based
    step) or the optimizer's lr; history[e] the batch losses' mean weighted by batch size;
    val_history[e] the loss on val after epoch e. Returns (history, val_history)."""
    n = data[0].shape[0]
    bs = batch_size if 0 < batch_size < n else n
    nbatches = (n + bs - 1) // bs
    total, step = nbatches * epochs, 0
    history, val_history = [], []
    for e in range(epochs):
        idx = torch.tensor(shuffle(n, seed, e))
        acc = 0.0
        for b in range(nbatches):
            rows = idx[b * bs:(b + 1) * bs]
            if schedule:
                for group in opt.param_groups:
                    group["lr"] = schedule(step, total)
            opt.zero_grad()
            loss = loss_fn(params, *[d[rows] for d in data])
            loss.backward()
            if clip:
                torch.nn.utils.clip_grad_norm_(params, clip)
            opt.step()
            step += 1
            acc += float(loss) * len(rows)
        history.append(acc / n)
        if val:
            with torch.no_grad():
                val_history.append(float(loss_fn(params, *val)))
    return history, val_history


def seed_002_s7():
    X = torch.tensor(np.load(os.path.join(HERE, "002_s7_X.npy")))
    y = torch.tensor(np.load(os.path.join(HERE, "002_s7_y.npy")))

    def init():  # sequential([linear(4, 32), activation("gelu"), linear(32, 3)]).init(seed=0)
        return [*dense(4, 32, 0, "0."), *dense(32, 3, 0, "2.")]

    model = lambda p, x: gelu(x @ p[0] + p[1]) @ p[2] + p[3]
    ce = lambda p, x, t: F.cross_entropy(model(p, x), t)
    params = init()
    with torch.no_grad():
        ce0 = float(ce(params, X, y))

    # fit(model, params, X, y, loss="cross_entropy", opt=adam(lr=1e-3), epochs=20, batch_size=64)
    trained = init()
    adam = torch.optim.Adam(trained, lr=1e-3, foreach=False)
    hist, _ = fit(trained, [X, y], ce, adam, epochs=20, batch_size=64)

    # the own loop: adamw(lr=3e-4, weight_decay=0.01), 5 steps on X[0:64], clip_grad_norm(g, 1.0)
    p = init()
    adamw = torch.optim.AdamW(p, lr=3e-4, weight_decay=0.01, foreach=False)
    for _ in range(5):
        adamw.zero_grad()
        ce(p, X[0:64], y[0:64]).backward()
        torch.nn.utils.clip_grad_norm_(p, 1.0)
        adamw.step()

    # fit with the other options of section 7: seed, clip, schedule, val
    p2 = init()
    sgd = torch.optim.SGD(p2, lr=0.1, momentum=0.9, foreach=False)
    hist2, val2 = fit(p2, [X[0:80], y[0:80]], ce, sgd, epochs=6, batch_size=24, seed=7, clip=0.5,
                      schedule=lambda s, total: step_lr(s, 0.1, 4, 0.5), val=[X[80:96], y[80:96]])
    p3 = init()
    adamw3 = torch.optim.AdamW(p3, lr=3e-3, weight_decay=0.1, foreach=False)
    hist3, _ = fit(p3, [X, y], ce, adamw3, epochs=4, batch_size=40, seed=3,
                   schedule=lambda s, total: cosine_lr(s, 10, base=3e-3, warmup=3))

    with torch.no_grad():
        ce_trained, ce_p, ce_p3 = float(ce(trained, X, y)), float(ce(p, X, y)), float(ce(p3, X, y))
    write("002_s7_fit", [
        g10(hist[-1]),
        f"20 {str(hist[0] > hist[-1]).lower()} cpu none",
        f"{g10(ce_trained)} [96, 3]",
        "1" if ce_p < ce0 else "0",
        f"{g10(cosine_lr(100, 1000, base=3e-4, warmup=100))} {g10(step_lr(7, 0.1, 5, 0.5))}",
        vec(hist),
        f"{g10(ce_p)} {g10(ce0)}",
        f"{vec(hist2)} {vec(val2)}",
        f"{vec(hist3)} {g10(ce_p3)}",
        f"{g10(cosine_lr(50, 1000, base=3e-4, warmup=100))} "
        f"{g10(cosine_lr(700, 1000, base=3e-4, warmup=100))} "
        f"{g10(cosine_lr(1200, 1000, base=3e-4, warmup=100))}",
    ])


if __name__ == "__main__":
    params_np()
    minimize()
    seed_001_s2_ops()
    hessian()
    grad_fd()
    seed_001_s2()
    seed_002_s1()
    seed_002_s7()
    seed_002_s9()
