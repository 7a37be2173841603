#!/usr/bin/env bash
# attention_cpu.sh — CPU seconds per run on ONE thread (process user time,
# which a shared machine disturbs far less than wall time): Kiln's
# flash_attention (bench_attention, KILN_NUM_THREADS=1; per run =
# (user(N runs) - user(1 run)) / (N - 1), so compile and warm-up cancel out)
# and torch 2.x's CPU SDPA (bench/attention_sdpa_cpu.py, one thread), causal
# B=1 H=8 D=64 f32, forward and forward+backward.
#
#   bench/attention_cpu.sh [T ...]                 (default: 1024 4096)
#   BIN=path/to/bench_attention bench/attention_cpu.sh ...   (another build)
#   KILN_ATTENTION_ISA=scalar bench/attention_cpu.sh ...     (the portable kernels)
#   BENCH_PEERS="" bench/attention_cpu.sh ...                 (Kiln alone, no torch rows)
#
# torch 2.x is the torch2 peer, pip's torch in the venv of tools/setup.sh --bench
# (bench/peers.sh); the script stops before it runs anything when it is not there.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. bench/peers.sh
bench_select torch2
bench_need "${bench_peers[@]}"
bin=${BIN:-build/bin/bench_attention}
[ -x "$bin" ] || { echo "no $bin: cmake --build build --target bench_attention" >&2; exit 1; }
lengths=("$@")
[ ${#lengths[@]} -gt 0 ] || lengths=(1024 4096)
user() { { KILN_NUM_THREADS=1 /usr/bin/time -f %U "$bin" "$@" >/dev/null; } 2>&1 | tail -1; }
for t in "${lengths[@]}"; do
  n=5; [ "$t" -le 1024 ] && n=21
  f1=$(user "$t" 1 fwd) fn=$(user "$t" "$n" fwd)
  b1=$(user "$t" 1 both) bn=$(user "$t" "$n" both)
  # `both` times the forward graph and then the gradient graph, reps each
  "$bench_debian_py" -c "
f = ($fn - $f1) / ($n - 1); b = ($bn - $b1) / ($n - 1) - f
print('| $t | kiln flash_attention (${KILN_ATTENTION_ISA:-auto}) | %.3f | %.3f |' % (f, b))"
  bench_has torch2 || continue
  "$bench_venv_py" bench/attention_sdpa_cpu.py "$t" "$n" | sed -E 's/^T=([0-9]+) (.*) 1 thread: fwd ([0-9.]+) s, fwd\+bwd ([0-9.]+) s.*/| \1 | \2 | \3 | \4 |/'
done
