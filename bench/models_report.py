"""models_report.py — the tables and the chart of bench/models.sh, from the lines of bench/models.py.

Usage (/usr/bin/python3; matplotlib only for the chart):
  models_report.py LOG OUT.md [OUT.png|""] COMMAND VERSIONS PEERS

LOG holds the runners' CHECK, RESULT, COMPILE, MEM, PLAN, ERROR and ONNX lines (bench/models.py's
docstring). Ratios are a peer's median over Kiln's (the .so's): above 1, Kiln is faster. A cell of a
runner that failed holds its error; a runner that was not run says so.
"""
import os
import re
import subprocess
import sys

RUNNERS = [("kiln-so", "Kiln .so"), ("kiln-jit", "Kiln JIT"), ("ort", "ONNX Runtime"),
           ("torch", "torch eager"), ("torchc", "torch.compile")]
PEERS = [("ort", "ORT"), ("torch", "eager"), ("torchc", "torch.compile")]
ERROR_OF = {"kiln-compile": "kiln-so"}  # whose column a runner's error lands in


def parse(path):
    r = {"result": {}, "check": {}, "compile": {}, "mem": {}, "plan": {}, "error": {}, "onnx": {}}
    for line in open(path):
        p = line.split()
        if len(p) < 3:
            continue
        if p[0] == "RESULT" and len(p) >= 5:
            r["result"][(p[1], p[2])] = (float(p[3]), int(p[4]))
        elif p[0] == "CHECK":
            m = re.search(r"error ([0-9.e+-]+) against \w+ \((ok|FAIL)\)", line)
            k = (p[1], p[2])
            if m:
                err, ok = float(m.group(1)), m.group(2) == "ok"
                old = r["check"].get(k)
                if not old or (not ok, err) > (not old[1], old[0]):
                    r["check"][k] = (err, ok)
            else:  # a count or shape that differs
                r["check"][k] = (float("inf"), False)
        elif p[0] == "COMPILE":
            r["compile"][(p[1], p[2])] = float(p[3])
        elif p[0] == "MEM":
            r["mem"][(p[1], p[2])] = float(p[3])
        elif p[0] == "PLAN":
            r["plan"][p[1]] = float(p[3])
        elif p[0] == "ONNX":
            r["onnx"][p[1]] = int(p[2])
        elif p[0] == "ERROR":
            who = ERROR_OF.get(p[2], p[2])
            r["error"].setdefault((p[1], who), " ".join(p[3:]))
    return r


def tags_of(r):
    tags = list(r["onnx"])
    return sorted(tags, key=lambda t: (["resnet50", "mobilenet_v3_large", "bert", "gpt2"].index(
        t.rsplit("-b", 1)[0]) if t.rsplit("-b", 1)[0] in ["resnet50", "mobilenet_v3_large", "bert",
                                                            "gpt2"] else 9, int(t.rsplit("-b", 1)[1])))


def cell_error(msg):
    msg = msg.replace("|", "\\|").replace("`", "'")
    return "failed: `%s`" % (msg if len(msg) < 240 else msg[:237] + "...")


def missing(r, tag, who, peers):
    if (tag, who) in r["error"]:
        return cell_error(r["error"][(tag, who)])
    if who in ("torch", "torchc") and "torch2" not in peers:
        return "not run (BENCH_PEERS)"
    return "—"


def fmt_ms(v):
    return "%.1f" % v if v >= 10 else "%.2f" % v


def times_table(r, tags, peers):
    head = ["model", "batch"] + [t + " ms" for _, t in RUNNERS] + \
        ["%s / Kiln" % t for _, t in PEERS] + ["best peer / Kiln"]
    rows = []
    for tag in tags:
        model, b = tag.rsplit("-b", 1)
        row = [model, b]
        for who, _ in RUNNERS:
            v = r["result"].get((tag, who))
            row.append(fmt_ms(v[0]) + (" (n=%d)" % v[1]) if v else missing(r, tag, who, peers))
        k = r["result"].get((tag, "kiln-so"))
        best = None
        for who, _ in PEERS:
            v = r["result"].get((tag, who))
            row.append("%.2f" % (v[0] / k[0]) if v and k else "")
            if v and (best is None or v[0] < best[0]):
                best = (v[0], who)
        row.append("%.2f (%s)" % (best[0] / k[0], dict(PEERS)[best[1]]) if best and k else "")
        rows.append(row)
    return head, rows


def checks_table(r, tags, peers):
    head = ["model", "batch"] + [t for w, t in RUNNERS if w != "ort"]
    rows = []
    for tag in tags:
        model, b = tag.rsplit("-b", 1)
        row = [model, b]
        for who, _ in RUNNERS:
            if who == "ort":
                continue
            c = r["check"].get((tag, who))
            row.append("%.1e %s" % (c[0], "ok" if c[1] else "**FAIL**") if c
                       else missing(r, tag, who, peers))
        rows.append(row)
    return head, rows


def cost_table(r, tags):
    head = ["model", "batch", "ONNX MiB", "kiln compile s", "kiln compile peak MiB",
            "Kiln plan MiB", "Kiln JIT compile s", "torch.compile s"] + \
        ["peak MiB " + t for _, t in RUNNERS]
    rows = []
    for tag in tags:
        model, b = tag.rsplit("-b", 1)

        def g(d, k, f="%.1f"):
            return f % d[k] if k in d else ""

        rows.append([model, b, "%.0f" % (r["onnx"][tag] / 1024.0), g(r["compile"], (tag, "kiln-so")),
                     g(r["mem"], (tag, "kiln-compile"), "%.0f"), g(r["plan"], tag, "%.0f"),
                     g(r["compile"], (tag, "kiln-jit")), g(r["compile"], (tag, "torchc"))] +
                    [g(r["mem"], (tag, who), "%.0f") for who, _ in RUNNERS])
    return head, rows


def md(head, rows):
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(out)


def chart(r, tags, path, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    work = [t for t in tags if (t, "kiln-so") in r["result"]]
    peers = [(k, t) for k, t in PEERS if any((w, k) in r["result"] for w in work)]
    fig, ax = plt.subplots(figsize=(11, 4.8))
    width = 0.8 / max(1, len(peers))
    for j, (k, t) in enumerate(peers):
        xs = [i + (j - (len(peers) - 1) / 2) * width for i, w in enumerate(work)
              if (w, k) in r["result"]]
        ys = [r["result"][(w, k)][0] / r["result"][(w, "kiln-so")][0] for w in work
              if (w, k) in r["result"]]
        ax.bar(xs, ys, width, label="%s time / Kiln .so time" % t)
    ax.axhline(1.0, color="black", linestyle="--", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(work)))
    ax.set_xticklabels(work, rotation=30, ha="right")
    ax.set_ylabel("Kiln's speed over the peer (above 1: Kiln faster)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def machine():
    name = "?"
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            name = line.split(":", 1)[1].strip()
            break
    return name, os.cpu_count(), open("/proc/loadavg").read().split()[:3]


def settings():
    """The variables that decide the numbers, as the command line would set them."""
    env = ["KILN_NUM_THREADS=%s" % os.environ.get("KILN_NUM_THREADS", "1")]
    defaults = {"BENCH_REPS": "20", "BENCH_SECONDS": "20", "BENCH_BATCHES": "1 8"}
    for k in ["BENCH_REPS", "BENCH_SECONDS", "BENCH_BATCHES", "BENCH_PEERS"]:
        v = os.environ.get(k)
        if v is not None and v != defaults.get(k):
            env.append("%s=%s" % (k, "'%s'" % v if " " in v or not v else v))
    return " ".join(env) + " "


def main():
    log, out, png, command, versions, peers = sys.argv[1:7]
    r = parse(log)
    tags = tags_of(r)
    threads = os.environ.get("KILN_NUM_THREADS", "1")
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip() or "?"
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                            ":!bench", ":!docs"], capture_output=True, text=True).stdout.strip()
    cpu, ncpu, load = machine()
    aff = sorted(os.sched_getaffinity(0))
    date = subprocess.run(["date", "-u", "+%F %H:%M UTC"], capture_output=True,
                          text=True).stdout.strip()
    lines = [
        "# Real models exported by torch 2.x: Kiln vs ONNX Runtime, torch eager, torch.compile"
        " (%d thread%s)" % (int(threads), "" if threads == "1" else "s"),
        "",
        "Command: `%s%s%s` (%s; Kiln %s%s). Medians of up to %s runs or %s s of runs"
        " (n in each cell, 3 at least) after warm-ups; the process ran on CPU%s %s."
        % (settings(), "taskset -c %s " % ",".join(map(str, aff)) if len(aff) < ncpu else "",
           command, date, rev, " with uncommitted changes to its sources" if dirty else "",
           os.environ.get("BENCH_REPS"), os.environ.get("BENCH_SECONDS"),
           "s" if len(aff) > 1 else "", ",".join(map(str, aff))),
        "",
        "Peers: %s (the bench venv of `tools/setup.sh --bench`); peers selected: %s. Models exported"
        " by `bench/models.py` with `torch.onnx.export(dynamo=False)`, opset 17, random weights"
        " (seeded), static shapes: resnet50 and mobilenet_v3_large at Bx3x224x224; BertModel"
        " (bert-base config) and GPT2LMHeadModel (gpt2 config, no cache) with input_ids and"
        " attention_mask at Bx128, the last 16 positions of odd rows masked."
        % (versions, peers or "none"),
        "",
        "Machine: %s, %d CPUs, load average %s when the report was written: shared with other"
        " jobs, so times are indicative." % (cpu, ncpu, " ".join(load)),
        "",
        "## Forward time (ms) and ratios",
        "",
        "Ratios are the peer's median over the Kiln .so's (called through ctypes into preallocated"
        " outputs); above 1, Kiln is faster. Kiln JIT is `kiln run --repeat N` (outputs allocated"
        " each run). ONNX Runtime: CPU provider, intra-op threads = KILN_NUM_THREADS.",
        "",
        md(*times_table(r, tags, peers)),
        "",
        "## Outputs against ONNX Runtime's",
        "",
        "max|got - ort| / max|ort| over each output, the worst output; FAIL above 1e-4.",
        "",
        md(*checks_table(r, tags, peers)),
        "",
        "## Compile time and memory",
        "",
        "kiln compile s: `kiln compile model.onnx -o model.so` end to end (import, passes, LLVM,"
        " the system linker), and its process's peak resident set. Kiln plan MiB: the memory plan's"
        " peak that `kiln compile` prints (intermediates and constants). Kiln JIT compile s: what"
        " `kiln run --repeat` prints for its compile. torch.compile s: the first call (inductor,"
        " default mode). Peak MiB: the peak resident set of each runner's process (the Python"
        " interpreter and its libraries included; for Kiln JIT the `kiln run` process, which"
        " compiles twice).",
        "",
        md(*cost_table(r, tags)),
        "",
    ]
    if png:
        chart(r, tags, png, "Kiln .so vs peers, %s thread(s), batch 1 and 8" % threads)
        lines += ["Chart: `%s`." % os.path.basename(png), ""]
    with open(out, "w") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    main()
