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
#   BENCH_PEERS="torch1 ort" bench/run.sh   the peers to compare against (default: all of
#                                    torch1 torch2 ort; BENCH_TORCH2=0 leaves torch2 out,
#                                    BENCH_PEERS="" runs Kiln alone); BENCH_CHART=0: no chart
#
# Kiln (build-rel/bin/bench_peers, fusion off and on) and the peers time the same workloads on
# the same shapes: torch1, PyTorch 1.13 eager (Debian's python3-torch through /usr/bin/python3);
# torch2, pip's torch 2.x eager and with torch.compile; ort, ONNX Runtime on ONNX exports of the
# same modules, which torch1 writes (bench/peers_torch.py --export), so ort needs torch1 too. The
# pip peers run in the venv of `tools/setup.sh --bench`, build-bench-venv/ (bench/peers.sh names
# both interpreters; KILN_BENCH_PYTHON overrides the venv's). Every peer asked for must be there:
# otherwise, or when the export fails, the script stops before it runs anything, saying what is
# missing and how to install it or leave it out, rather than leave out its column. The machine's
# STREAM-triad bandwidth and OpenBLAS sgemm are measured in the same run. bench/report.py writes
# the table to bench/results/<date>.md (and prints it), bench/chart.py the chart beside it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. bench/peers.sh
bench_select torch1 torch2 ort
[ "${BENCH_TORCH2:-1}" = 1 ] || read -ra bench_peers <<<"$(bench_without torch2)"
need=("${bench_peers[@]}")
bench_has ort && need+=(ort-export) # torch1 writes the ONNX files that ort runs
[ "${BENCH_CHART:-1}" = 0 ] || need+=(matplotlib)
bench_need "${need[@]}"
echo "bench: peers ${bench_peers[*]:-none}" >&2
T=${1:-$(nproc)}
export KILN_NUM_THREADS=$T OPENBLAS_NUM_THREADS=$T OMP_NUM_THREADS=$T MKL_NUM_THREADS=$T
export BENCH_REPS=${BENCH_REPS:-15} BENCH_CLOCK=${BENCH_CLOCK:-wall}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if bench_has ort &&
  ! "$bench_debian_py" bench/peers_torch.py --export "$tmp" >/dev/null 2>"$tmp/export.err"; then
  echo "run.sh: the ONNX export for ONNX Runtime failed (bench/peers_torch.py --export):" >&2
  tail -5 "$tmp/export.err" >&2
  echo "run.sh: nothing was run; fix the export, or leave ort out:" \
    "BENCH_PEERS=\"$(bench_without ort)\" bench/run.sh" >&2
  exit 1
fi
build=${BUILD_DIR:-build-rel}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j2 --target bench_peers >/dev/null
# Each workload runs on every side back to back, so that a change in the machine's load (it is
# shared) moves all sides of one row alike.
workloads=${BENCH_WORKLOADS:-triad sgemm gelu_chain softmax layer_norm mlp_fwd mlp_adam block_fwd block_train cnn_fwd lstm_fwd}
for w in $workloads; do
  echo "bench: $w" >&2
  "$build"/bin/bench_peers $w >>"$tmp/kiln.txt" 2>>"$tmp/kiln.err" || echo "bench_peers $w failed" >&2
  [ $w = triad ] && continue
  if bench_has torch1; then
    "$bench_debian_py" bench/peers_torch.py $w >>"$tmp/torch.txt" 2>>"$tmp/torch.err" ||
      echo "peers_torch.py $w failed: $(tail -3 "$tmp/torch.err")" >&2
  fi
  if bench_has torch2; then
    BENCH_TORCH_IMPL=torch2 "$bench_venv_py" bench/peers_torch.py $w >>"$tmp/torch2.txt" 2>>"$tmp/torch2.err" ||
      echo "torch 2.x $w failed: $(tail -3 "$tmp/torch2.err")" >&2
    BENCH_TORCH_IMPL=torch2c BENCH_TORCH_COMPILE=1 "$bench_venv_py" bench/peers_torch.py $w \
      >>"$tmp/torch2.txt" 2>>"$tmp/torch2.err" ||
      echo "torch.compile $w failed: $(tail -3 "$tmp/torch2.err")" >&2
  fi
  if bench_has ort && [ -f "$tmp/$w.onnx" ]; then
    "$bench_venv_py" bench/peers_ort.py "$tmp" $w >>"$tmp/ort.txt" 2>>"$tmp/ort.err" ||
      echo "peers_ort.py $w failed: $(tail -3 "$tmp/ort.err")" >&2
  fi
done
mkdir -p bench/results
out=bench/results/$(date +%Y-%m-%d)${BENCH_TAG:+-$BENCH_TAG}-t$T-$BENCH_CLOCK${OPENBLAS_CORETYPE:+-$OPENBLAS_CORETYPE}.md
# report.py asks the venv's interpreter for ONNX Runtime's version (BENCH_ORT_PYTHON)
BENCH_ORT_PYTHON="$bench_venv_py" "$bench_debian_py" bench/report.py "$T" "${BENCH_WORKLOADS:+BENCH_WORKLOADS=\"$BENCH_WORKLOADS\" }${BENCH_PEERS+BENCH_PEERS=\"$BENCH_PEERS\" }${BENCH_TAG:+BENCH_TAG=$BENCH_TAG }BENCH_CLOCK=$BENCH_CLOCK bench/run.sh $*" "$tmp"/*.txt | tee "$out"
if [ "${BENCH_CHART:-1}" != 0 ]; then
  "$bench_debian_py" bench/chart.py "${out%.md}.png" "Kiln vs peers, $T threads ($(date +%Y-%m-%d))" \
    "$tmp"/*.txt && printf '\n![Kiln over each peer](%s)\n' "$(basename "${out%.md}.png")" >>"$out"
fi
echo "written: $out" >&2
