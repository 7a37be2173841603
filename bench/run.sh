#!/usr/bin/env bash
# run.sh — Kiln side by side with its peers, at one thread count, in one run.
#
#   bench/run.sh [THREADS]      (default: every CPU; BENCH_REPS=15 runs per median)
#   BENCH_CLOCK=cpu bench/run.sh 1   process CPU time instead of wall time: on a busy shared
#                                    machine the only stable measure (one thread)
#   OPENBLAS_CORETYPE=SkylakeX bench/run.sh   OpenBLAS's AVX-512 kernels for Kiln's GEMMs and
#                                    torch's alike (the table records the setting)
#   BENCH_WORKLOADS="lstm_fwd" BENCH_TAG=lstm bench/run.sh 1   some workloads only, written to
#                                    bench/results/<date>-<tag>-t1-....md
#
# Kiln (build-rel/bin/bench_peers, fusion off and on), PyTorch eager (Debian's
# python3-torch through /usr/bin/python3) and ONNX Runtime (the pip python, on
# ONNX exports of the same modules, when `import onnxruntime` works) time the
# same workloads on the same shapes; the machine's STREAM-triad bandwidth and
# OpenBLAS sgemm are measured in the same run. bench/report.py writes the table
# to bench/results/<date>.md (and prints it).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
T=${1:-$(nproc)}
export KILN_NUM_THREADS=$T OPENBLAS_NUM_THREADS=$T OMP_NUM_THREADS=$T MKL_NUM_THREADS=$T
export BENCH_REPS=${BENCH_REPS:-15} BENCH_CLOCK=${BENCH_CLOCK:-wall}
build=${BUILD_DIR:-build-rel}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j2 --target bench_peers >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Each workload runs on every side back to back, so that a change in the machine's load (it is
# shared) moves all sides of one row alike.
torch=false ort=false torch2=false
/usr/bin/python3 -c 'import torch' 2>/dev/null && torch=true
python3 -c 'import onnxruntime' 2>/dev/null && ort=true
# pip's torch 2.x in the pyenv python (BENCH_TORCH2=0 skips it): eager and torch.compile
[ "${BENCH_TORCH2:-1}" = 1 ] && python3 -c 'import torch' 2>/dev/null && torch2=true
if $torch && ! /usr/bin/python3 bench/peers_torch.py --export "$tmp" >/dev/null 2>"$tmp/export.err"; then
  echo "ONNX export failed: $(tail -3 "$tmp/export.err")" >&2
fi
workloads=${BENCH_WORKLOADS:-triad sgemm gelu_chain softmax layer_norm mlp_fwd mlp_adam block_fwd block_train cnn_fwd lstm_fwd}
for w in $workloads; do
  echo "bench: $w" >&2
  "$build"/bin/bench_peers $w >>"$tmp/kiln.txt" 2>>"$tmp/kiln.err" || echo "bench_peers $w failed" >&2
  [ $w = triad ] && continue
  if $torch; then
    /usr/bin/python3 bench/peers_torch.py $w >>"$tmp/torch.txt" 2>>"$tmp/torch.err" ||
      echo "peers_torch.py $w failed: $(tail -3 "$tmp/torch.err")" >&2
  fi
  if $torch2; then
    BENCH_TORCH_IMPL=torch2 python3 bench/peers_torch.py $w >>"$tmp/torch2.txt" 2>>"$tmp/torch2.err" ||
      echo "torch 2.x $w failed: $(tail -3 "$tmp/torch2.err")" >&2
    BENCH_TORCH_IMPL=torch2c BENCH_TORCH_COMPILE=1 python3 bench/peers_torch.py $w \
      >>"$tmp/torch2.txt" 2>>"$tmp/torch2.err" ||
      echo "torch.compile $w failed: $(tail -3 "$tmp/torch2.err")" >&2
  fi
  if $ort && [ -f "$tmp/$w.onnx" ]; then
    python3 bench/peers_ort.py "$tmp" $w >>"$tmp/ort.txt" 2>>"$tmp/ort.err" ||
      echo "peers_ort.py $w failed: $(tail -3 "$tmp/ort.err")" >&2
  fi
done
mkdir -p bench/results
out=bench/results/$(date +%Y-%m-%d)${BENCH_TAG:+-$BENCH_TAG}-t$T-$BENCH_CLOCK${OPENBLAS_CORETYPE:+-$OPENBLAS_CORETYPE}.md
python3 bench/report.py "$T" "${BENCH_WORKLOADS:+BENCH_WORKLOADS=\"$BENCH_WORKLOADS\" }${BENCH_TAG:+BENCH_TAG=$BENCH_TAG }BENCH_CLOCK=$BENCH_CLOCK bench/run.sh $*" "$tmp"/*.txt | tee "$out"
if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  /usr/bin/python3 bench/chart.py "${out%.md}.png" "Kiln vs peers, $T threads ($(date +%Y-%m-%d))" \
    "$tmp"/*.txt && printf '\n![Kiln over each peer](%s)\n' "$(basename "${out%.md}.png")" >>"$out"
else
  echo "no chart: install python3-matplotlib (Debian) for /usr/bin/python3" >&2
fi
echo "written: $out" >&2
