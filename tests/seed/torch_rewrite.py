#!/usr/bin/python3
"""The float64 PyTorch rewrite of the seed programs in this folder.

Writes params_np.npz (an archive numpy.savez made, for params_io.kiln) and the .expected files (the stdout `kiln run PROGRAM.kiln` must print; check.sh compares
numbers with a relative tolerance of 1e-7) of grad_fd, hessian, minimize, 001_s2_gated_blocks,
001_s2_ops, 002_s1_contract, 002_s4_s10_recipes, 002_s7_fit and 002_s9_own_layer, computed by
PyTorch in float64 from the same numbers: the data files here and Kiln's documented initialisers,
re-implemented below (Philox-4x32-10 as in ir/ref_source.c, the normal and uniform draws of
kl_init_fill in layers/core.c, He and Glorot initialisation, the layers' parameter paths of
docs/layers.md, the program's seed counter of docs/kiln-syntax.md), kiln_fit's loop (train/fit.c:
the per-epoch Philox shuffle, batches, schedules, clipping, history and val_history) around
torch.optim's optimizers, and the IR's random op (dropout, the VAE's sampling) fed with each
training step's seed. Run it with Debian's /usr/bin/python3 (numpy, torch 1.13);
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


def philox_np(ctr, key):
    """philox4x32 on numpy arrays of counters (uint64 holding 32-bit words)."""
    c0, c1, c2, c3 = (np.asarray(c, dtype=np.uint64) for c in ctr)
    k0, k1 = np.uint64(key[0]), np.uint64(key[1])
    m, s32 = np.uint64(M32), np.uint64(32)
    for r in range(10):
        if r:
            k0 = (k0 + np.uint64(0x9E3779B9)) & m
            k1 = (k1 + np.uint64(0xBB67AE85)) & m
        p0 = np.uint64(0xD2511F53) * c0
        p1 = np.uint64(0xCD9E8D57) * c2
        c0, c1, c2, c3 = (p1 >> s32) ^ c1 ^ k0, p1 & m, (p0 >> s32) ^ c3 ^ k1, p0 & m
    return c0, c1, c2, c3


def draws(n, seed, word2, word3=0):
    """Philox words of counters (i, i >> 32, word2, word3), i < n, keyed by the 64-bit seed."""
    i = np.arange(n, dtype=np.uint64)
    seed &= 0xFFFFFFFFFFFFFFFF
    z = np.zeros(n, dtype=np.uint64)
    return philox_np((i & np.uint64(M32), i >> np.uint64(32), z + np.uint64(word2),
                      z + np.uint64(word3)), (seed & M32, seed >> 32))


def unit53_np(hi, lo):
    bits = (hi >> np.uint64(5)) << np.uint64(26) | (lo >> np.uint64(6))
    return bits.astype(np.float64) * 2.0 ** -53


def normal(shape, seed, path, a=1.0):
    """kl_init_fill with KL_INIT_NORMAL: element i from counter (i, 0, fnv1a32(path), 0)."""
    n = int(np.prod(shape)) if shape else 1
    w = draws(n, seed, fnv1a32(path))
    u1, u2 = unit53_np(w[0], w[1]), unit53_np(w[2], w[3])
    x = a * np.sqrt(-2.0 * np.log(1.0 - u1)) * np.cos(2 * math.pi * u2)
    return torch.tensor(x).reshape(shape)


def uniform(shape, seed, path, a):
    """kl_init_fill with KL_INIT_UNIFORM: a (2 u - 1), u from the words 0 and 1."""
    n = int(np.prod(shape)) if shape else 1
    w = draws(n, seed, fnv1a32(path))
    return torch.tensor(a * (2.0 * unit53_np(w[0], w[1]) - 1.0)).reshape(shape)


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
        val=None, seeded=False):
    """kiln_fit: every epoch the samples in shuffle(n, seed, epoch) order, cut into batches of
    batch_size (the last one smaller); per step the loss of the batch at the current parameters,
    clip_grad_norm_, and the optimizer's step at the rate schedule(step, total_steps) (0-based
    step) or the optimizer's lr; history[e] the batch losses' mean weighted by batch size;
    val_history[e] the loss on val after epoch e. Returns (history, val_history). With seeded,
    loss_fn also takes the step's seed (dropout and sampling on)."""
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
            batch = [d[rows] for d in data] + ([step_seed(seed, step)] if seeded else [])
            loss = loss_fn(params, *batch)
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

    p4 = init()
    sgd4 = torch.optim.SGD(p4, lr=0.5, foreach=False)
    hist4, _ = fit(p4, [X, y], ce, sgd4, epochs=3, batch_size=32, seed=5,
                   schedule=lambda s, total: 0.2 * 0.5 ** (s / 4) + 0.01 * s)

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
        vec(hist4),
    ])


# ------------------------------------------------------ 002 sections 4 and 10 (zoo models)

def glorot(n_in, n_out, seed, path):
    return uniform((n_in, n_out), seed, path, math.sqrt(6.0 / (n_in + n_out)))


def tree(seed, spec):
    """Parameters by path: spec maps a path to (kind, shape[, arg]) in kl_init's kinds."""
    out = {}
    for path, (kind, shape, *arg) in spec.items():
        if kind == "he":
            fan_in = int(np.prod(shape[1:])) if len(shape) == 4 else shape[0]
            t = normal(shape, seed, path, math.sqrt(2.0 / fan_in))
        elif kind == "glorot":
            t = glorot(shape[0], shape[1], seed, path)
        elif kind == "normal":
            t = normal(shape, seed, path, arg[0])
        elif kind == "uniform":
            t = uniform(shape, seed, path, arg[0])
        elif kind == "forget":
            t = torch.zeros(shape)
            t[arg[0]:2 * arg[0]] = 1
        else:
            t = torch.ones(shape) if kind == "ones" else torch.zeros(shape)
        out[path] = t.requires_grad_()
    return out


def linear_spec(prefix, n_in, n_out):
    return {prefix + "W": ("he", (n_in, n_out)), prefix + "b": ("zeros", (n_out,))}


def mlp_spec(prefix, sizes):
    out = {}
    for i in range(len(sizes) - 1):
        out.update(linear_spec(f"{prefix}{2 * i}.", sizes[i], sizes[i + 1]))
    return out


def mlp_apply(p, prefix, n, x, out_act=False):
    """mlp: linear, relu between two linears (and after the last with out_act)."""
    for i in range(n):
        x = x @ p[f"{prefix}{2 * i}.W"] + p[f"{prefix}{2 * i}.b"]
        if i < n - 1 or out_act:
            x = torch.relu(x)
    return x


def cnn_spec(prefix, c_in, classes, image, channels, dense):
    out, c, k = {}, c_in, 0
    for ch in channels:
        out[f"{prefix}{k}.W"] = ("he", (ch, c, 3, 3))
        out[f"{prefix}{k}.b"] = ("zeros", (ch,))
        c, k, image = ch, k + 3, image // 2
    out.update(linear_spec(f"{prefix}{k + 1}.", c * image * image, dense))
    out.update(linear_spec(f"{prefix}{k + 3}.", dense, classes))
    return out


def cnn_apply(p, prefix, n_conv, x):
    """cnn: per entry conv2d(k=3, same) + b, relu, max_pool(2); flatten, linear, relu, linear."""
    for i in range(n_conv):
        x = F.max_pool2d(torch.relu(F.conv2d(x, p[f"{prefix}{3 * i}.W"], padding=1)
                                    + p[f"{prefix}{3 * i}.b"].reshape(-1, 1, 1)), 2)
    x = x.flatten(1)
    k = 3 * n_conv + 1
    return torch.relu(x @ p[f"{prefix}{k}.W"] + p[f"{prefix}{k}.b"]) @ p[f"{prefix}{k + 2}.W"] + \
        p[f"{prefix}{k + 2}.b"]


def lm_spec(vocab, d, layers, context):
    out = {"0.E": ("normal", (vocab, d), 0.02), "1.P": ("normal", (context, d), 0.02)}
    for i in range(layers):
        b = f"2.blocks.{i}."
        out.update({b + "norm1.gamma": ("ones", (d,)), b + "norm1.beta": ("zeros", (d,))})
        out.update({b + "att." + w: ("glorot", (d, d)) for w in ("Wq", "Wk", "Wv", "Wo")})
        out.update({b + "att.bo": ("zeros", (d,)), b + "norm2.gamma": ("ones", (d,)),
                    b + "norm2.beta": ("zeros", (d,))})
        out.update(linear_spec(b + "ff1.", d, 4 * d))
        out.update(linear_spec(b + "ff2.", 4 * d, d))
    out.update({"2.norm.gamma": ("ones", (d,)), "2.norm.beta": ("zeros", (d,))})
    out.update(linear_spec("3.", d, vocab))
    return out


def step_seed(seed, step):
    """The seed input of training step `step` (kiln_trainer_step): seed ^ step * 0x9E3779B97F4A7C15
    modulo 2^64 (the random op's key is its two 32-bit halves)."""
    return (seed ^ (step * 0x9E3779B97F4A7C15)) & 0xFFFFFFFFFFFFFFFF


def random_op(shape, seed, stream, dist):
    """The IR's random op (kir_ref_random): element e from Philox counter (e, e >> 32, stream,
    stream >> 32) keyed by the seed; uniform = the top 24 bits of word 0, normal = Box-Muller of
    the top 24 bits of words 0 and 1."""
    n = int(np.prod(shape))
    w = draws(n, seed, stream & M32, stream >> 32)
    u1 = (w[0] >> np.uint64(8)).astype(np.float64) * 2.0 ** -24
    if dist == "uniform":
        return torch.tensor(u1).reshape(shape)
    u2 = (w[1] >> np.uint64(8)).astype(np.float64) * 2.0 ** -24
    return torch.tensor(np.sqrt(-2.0 * np.log(1.0 - u1)) * np.cos(2 * math.pi * u2)).reshape(shape)


def lm_apply(p, tokens, layers, heads, dropout=0.0, seed=None):
    """transformer_lm: embedding + learned positions, pre-norm causal blocks (dropout after the
    attention and after the MLP, streams 0, 1, 2, ... in build order), final norm, linear."""
    B, T = tokens.shape
    d = p["0.E"].shape[1]
    x = p["0.E"][tokens] + p["1.P"][:T]
    stream = 0

    def drop(h):
        nonlocal stream
        if seed is None or dropout == 0:
            return h
        keep = random_op(h.shape, seed, stream, "uniform") >= dropout
        stream += 1
        return torch.where(keep, h * (1.0 / (1.0 - dropout)), torch.zeros(()))

    ln = lambda x, pre: F.layer_norm(x, (d,), p[pre + "gamma"], p[pre + "beta"], eps=1e-5)
    mask = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)
    split = lambda y: y.reshape(B, T, heads, d // heads).transpose(1, 2)
    for i in range(layers):
        b = f"2.blocks.{i}."
        h = ln(x, b + "norm1.")
        q, k, v = (split(h @ p[b + "att." + w]) for w in ("Wq", "Wk", "Wv"))
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // heads) + mask, -1) @ v
        x = x + drop(att.transpose(1, 2).reshape(B, T, d) @ p[b + "att.Wo"] + p[b + "att.bo"])
        h = gelu(ln(x, b + "norm2.") @ p[b + "ff1.W"] + p[b + "ff1.b"])
        x = x + drop(h @ p[b + "ff2.W"] + p[b + "ff2.b"])
    return ln(x, "2.norm.") @ p["3.W"] + p["3.b"]


def lstm_apply(p, prefix, x, hidden):
    """lstm_layer: z = [x_t, h] @ W + b, gates i, f, g, o; h and c start at 0."""
    h = c = torch.zeros(x.shape[0], hidden)
    out = []
    for t in range(x.shape[1]):
        z = torch.cat([x[:, t], h], 1) @ p[prefix + "W"] + p[prefix + "b"]
        i, f, g, o = z.split(hidden, 1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        out.append(h)
    return torch.stack(out, 1)


def seed_002_s4_s10():
    load = lambda name: torch.tensor(np.load(os.path.join(HERE, name + ".npy")).astype(
        np.float64 if name != "002_labels" and name != "002_tokens" else np.int64))
    images, labels, tokens = load("002_images"), load("002_labels"), load("002_tokens")
    tables, flat = load("002_tables"), load("002_images_flat")
    lines = []

    # section 4: dag of a cnn on the images and an mlp on the tables, trunk, two heads
    p = tree(0, {**cnn_spec("img.", 1, 64, 28, [16, 32], 64), **mlp_spec("tab.", [12, 64, 64]),
                 **mlp_spec("trunk.", [128, 128, 64]), **linear_spec("cls.", 64, 10),
                 **linear_spec("reg.", 64, 1)})
    with torch.no_grad():
        both = torch.cat([cnn_apply(p, "img.", 2, images), mlp_apply(p, "tab.", 2, tables)], -1)
        trunk = mlp_apply(p, "trunk.", 2, both)
        cls, reg = trunk @ p["cls.W"] + p["cls.b"], trunk @ p["reg.W"] + p["reg.b"]
    lines.append(f"[16, 10] [16, 1] {g10(reg.sum())} {g10(cls.sum())} {g10((cls ** 2).sum())}")

    # section 10, image classifier: cnn(1, 10, image=28, channels=[32, 64], dense_width=128),
    # fit(..., opt=adam(lr=1e-3), epochs=5, batch_size=128)
    ce = lambda logits, t: F.cross_entropy(logits.reshape(-1, logits.shape[-1]), t.reshape(-1))
    p = tree(0, cnn_spec("", 1, 10, 28, [32, 64], 128))
    params = list(p.values())
    hist, _ = fit(params, [images, labels], lambda q, x, t: ce(cnn_apply(p, "", 2, x), t),
                  torch.optim.Adam(params, lr=1e-3, foreach=False), epochs=5, batch_size=128)
    with torch.no_grad():
        ce_cnn = ce(cnn_apply(p, "", 2, images), labels)

    # character-level GPT: transformer_lm(12, d=128, heads=4, layers=4, context=128,
    # dropout=0.1), fit(..., epochs=10, batch_size=32, schedule=cosine_lr(s, 5000, base=3e-4,
    # warmup=200), clip=1.0) with adam's defaults; dropout drawn from each step's seed
    p = tree(0, lm_spec(12, 128, 4, 128))
    params = list(p.values())
    hist2, _ = fit(params, [tokens[:, 0:-1], tokens[:, 1:]],
                   lambda q, x, t, seed: ce(lm_apply(p, x, 4, 4, 0.1, seed), t),
                   torch.optim.Adam(params, lr=3e-4, foreach=False), epochs=10, batch_size=32,
                   clip=1.0, schedule=lambda s, total: cosine_lr(s, 5000, base=3e-4, warmup=200),
                   seeded=True)
    with torch.no_grad():
        ce_lm = ce(lm_apply(p, tokens[:, 0:-1], 4, 4), tokens[:, 1:])
    lines.append(f"{g10(hist[-1])} 10 {g10(hist2[-1])}")
    lines.append(f"{vec(hist)} {g10(ce_cnn)}")
    lines.append(f"{vec(hist2)} {g10(ce_lm)}")

    # LSTM and wide & deep: outputs of their init(seed=0) parameters
    p = tree(0, {"0.W": ("uniform", (67, 256), 1 / 8), "0.b": ("forget", (256,), 64),
                 "1.W": ("uniform", (128, 256), 1 / 8), "1.b": ("forget", (256,), 64),
                 **linear_spec("2.", 64, 1)})
    with torch.no_grad():
        h = lstm_apply(p, "1.", lstm_apply(p, "0.", normal((2, 5, 3), 5, "randn"), 64), 64)[:, -1]
        out3 = h @ p["2.W"] + p["2.b"]
    p = tree(0, {**linear_spec("wide.", 20, 1), **mlp_spec("deep.", [20, 128, 64, 1])})
    with torch.no_grad():
        x = normal((4, 20), 6, "randn")
        out5 = x @ p["wide.W"] + p["wide.b"] + mlp_apply(p, "deep.", 3, x)
    lines.append(f"[2, 1] [4, 1] {vec(out3[:, 0])} {vec(out5[:, 0])}")

    # VAE: vae(784, 16, hidden=[256]), fit(..., loss="vae", epochs=20, batch_size=128): the
    # reparameterisation's eps from the step's seed (stream 0); predict: z = mu
    p = tree(0, {**mlp_spec("encoder.", [784, 256]), **linear_spec("mu.", 256, 16),
                 **linear_spec("logvar.", 256, 16), **mlp_spec("decoder.", [16, 256, 784])})

    def vae(x, seed=None):
        h = mlp_apply(p, "encoder.", 1, x, out_act=True)
        mu, logvar = h @ p["mu.W"] + p["mu.b"], h @ p["logvar.W"] + p["logvar.b"]
        z = mu if seed is None else mu + torch.exp(logvar * 0.5) * random_op(mu.shape, seed, 0,
                                                                             "normal")
        return mlp_apply(p, "decoder.", 2, z), mu, logvar

    def vae_loss(q, x, seed):
        recon, mu, logvar = vae(x, seed)
        kl = -0.5 * (1 + logvar - mu ** 2 - torch.exp(logvar)).sum(1)
        return ((recon - x) ** 2).sum(1).mean() + kl.mean()

    params = list(p.values())
    hist3, _ = fit(params, [flat], vae_loss, torch.optim.Adam(params, lr=1e-3, foreach=False),
                   epochs=20, batch_size=128, seeded=True)
    with torch.no_grad():
        recon = vae(flat)[0]

    # graph classification: gin_net(5, 64, 3, layers=3) on three two-node graphs, fit with
    # graph=g, epochs=100: the whole graph every step (no shuffling), adam's defaults
    src, dst = torch.tensor([0, 1, 2, 3, 4, 5]), torch.tensor([1, 0, 3, 2, 5, 4])
    batch, y4 = torch.tensor([0, 0, 1, 1, 2, 2]), torch.tensor([0, 1, 2])
    spec = {}
    for k, (n_in, n_out) in enumerate([(5, 64), (64, 64), (64, 64)]):
        spec.update({f"{2 * k}.eps": ("zeros", ()), f"{2 * k}.W1": ("glorot", (n_in, n_out)),
                     f"{2 * k}.b1": ("zeros", (n_out,)), f"{2 * k}.W2": ("glorot", (n_out, n_out)),
                     f"{2 * k}.b2": ("zeros", (n_out,))})
    p = tree(0, {**spec, **linear_spec("7.", 64, 3)})

    def gin_net(x):
        for k in range(3):
            q = lambda name: p[f"{2 * k}.{name}"]
            z = (1 + q("eps")) * x + torch.zeros_like(x).index_add(0, dst, x[src])
            x = torch.relu(torch.relu(z @ q("W1") + q("b1")) @ q("W2") + q("b2"))
        return torch.zeros(3, x.shape[1]).index_add(0, batch, x) @ p["7.W"] + p["7.b"]

    x4 = normal((6, 5), 4, "randn")
    params = list(p.values())
    adam = torch.optim.Adam(params, lr=1e-3, foreach=False)
    hist4 = []
    for _ in range(100):
        adam.zero_grad()
        loss = F.cross_entropy(gin_net(x4), y4)
        loss.backward()
        adam.step()
        hist4.append(float(loss))
    with torch.no_grad():
        ce_gin = F.cross_entropy(gin_net(x4), y4)
    lines.append(f"[8, 784] {str(hist3[0] > hist3[-1]).lower()} "
                 f"{str(hist4[0] > hist4[-1]).lower()}")
    lines.append(f"{vec(hist3)} {g10(recon.sum())} {g10((recon ** 2).sum())}")
    lines.append(f"{g10(hist4[0])} {g10(hist4[49])} {g10(hist4[-1])} {g10(ce_gin)}")

    # dropout drawn from fit's seed: mlp([12, 16, 10], dropout=0.5) (paths 0 and 3: linear,
    # relu, dropout, linear) fit with seed=1 and seed=2 draw different masks at every step
    def mlp_drop(q, x, seed):
        h = torch.relu(x @ q["0.W"] + q["0.b"])
        keep = random_op(h.shape, seed, 0, "uniform") >= 0.5
        return torch.where(keep, h * (1.0 / (1.0 - 0.5)), torch.zeros(())) @ q["3.W"] + q["3.b"]

    hists = []
    for seed in (1, 2):
        p = tree(0, {**linear_spec("0.", 12, 16), **linear_spec("3.", 16, 10)})
        params = list(p.values())
        hists.append(fit(params, [tables, labels],
                         lambda q, x, t, s: F.cross_entropy(mlp_drop(p, x, s), t),
                         torch.optim.Adam(params, lr=1e-3, foreach=False), epochs=3,
                         batch_size=8, seed=seed, seeded=True)[0])
    lines.append(f"{vec(hists[0])} {vec(hists[1])}")
    write("002_s4_s10_recipes", lines)



def physics():
    """physics.kiln: grad inside a traced function, differentiated again (create_graph=True)."""
    X = torch.tensor([[0.5], [-1.0], [1.5], [0.25]])
    p = tree(3, {**mlp_spec("", [1, 8, 8, 1])})
    net = lambda q, x: torch.tanh(torch.tanh(x @ q["0.W"] + q["0.b"]) @ q["2.W"] + q["2.b"]) \
        @ q["4.W"] + q["4.b"]
    u = lambda q, x: net(q, x).sum()

    def d(f, x):  # grad(f)(x) traced: differentiable, x's copy a fresh leaf
        x = x.detach().requires_grad_() if not x.requires_grad else x
        return torch.autograd.grad(f(x), x, create_graph=True)[0]

    def residual1(q):
        return ((d(lambda x: u(q, x), X) - torch.cos(X)) ** 2).mean()

    def residual2(q):
        x = X.clone().requires_grad_()
        ux = d(lambda z: u(q, z), x).sum()
        uxx = torch.autograd.grad(ux, x, create_graph=True)[0]
        return ((uxx + torch.sin(X)) ** 2).mean() + 0.1 * ux ** 2

    params = list(p.values())
    r1 = residual1(p)
    g1 = dict(zip(p, torch.autograd.grad(r1, params, allow_unused=True)))
    r2 = residual2(p)
    g2 = dict(zip(p, torch.autograd.grad(r2, params, allow_unused=True)))
    z = lambda t: torch.zeros(()) if t is None else t
    # X captured by the inner function is a constant, though X is also what it differentiates by
    b = p["4.b"]
    gb = torch.autograd.grad(d(lambda x: (x * X * b).sum(), X).sum(), b)[0]
    write("physics", [f"{g10(r1)} {g10(r2)}",
                      f"{g10(g1['0.W'].sum())} {g10((g1['2.W'] ** 2).sum())} "
                      f"{vec(z(g1['4.b']).reshape(1))} {g10(r2)} {g10(g2['0.W'].sum())} "
                      f"{g10(g2['2.b'].sum())} {vec(g2['4.W'][0])}",
                      "1 1", f"{vec(gb)} {g10(X.sum())}"])


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
    seed_002_s4_s10()
    physics()
