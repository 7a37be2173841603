#!/usr/bin/env bash
# models.sh — real models exported by today's tools: pip's torch 2.x torch.onnx.export of
# torchvision's resnet50 and mobilenet_v3_large and transformers' BertModel (bert-base) and
# GPT2LMHeadModel (gpt2), random weights, sequence 128, batch 1 and 8; Kiln (the `kiln compile`
# shared object through ctypes, and the JIT `kiln run`) beside ONNX Runtime, torch 2.x eager and
# torch.compile, in one run. Issue 17 item 8.
#
#   bench/models.sh [MODEL ...]   (default: resnet50 mobilenet_v3_large bert gpt2)
#   KILN_NUM_THREADS=T            threads for every runner (default 1); pin the run yourself, e.g.
#                                 `taskset -c 1 bench/models.sh` for one thread
#   BENCH_BATCHES="1 8"           the batch sizes (each is an export of its own, static shapes)
#   BENCH_REPS=N BENCH_SECONDS=S  timed runs per median: up to N (20), or S seconds (20), 3 at least
#   BENCH_PEERS="torch2 ort"      ort is the reference of the checks and cannot be left out;
#                                 without torch2 the torch eager and torch.compile columns say so
#   BENCH_CHART=0                 no PNG chart (and no matplotlib needed)
#   OUT=path                      the results file (default bench/results/<date>-models-t<T>.md;
#                                 the chart beside it, .png)
#   KILN=path                     a kiln binary to use as it is (default: build/bin/kiln, built)
#   BENCH_DIR=path                keep the exports and outputs there (default: a temporary folder,
#                                 removed); an export already there is reused
#
# bench/models.py (the bench venv of tools/setup.sh --bench: torch 2.x, torchvision, transformers,
# onnxruntime, onnx) exports each model and runs each runner in a process of its own: ONNX Runtime
# first, whose outputs are the reference; then torch eager, torch.compile, `kiln compile`, the .so
# and `kiln run --repeat`, each checked against ONNX Runtime (max|got - ort| / max|ort| <= 1e-4;
# a mismatch is a FAIL in the table and the script's exit status). A model Kiln cannot import gets
# its error in the table instead of numbers. bench/models_report.py writes the tables and the chart.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. bench/peers.sh
export KILN_NUM_THREADS=${KILN_NUM_THREADS:-1}
export OPENBLAS_NUM_THREADS=$KILN_NUM_THREADS OMP_NUM_THREADS=$KILN_NUM_THREADS
export MKL_NUM_THREADS=$KILN_NUM_THREADS
export BENCH_REPS=${BENCH_REPS:-20} BENCH_SECONDS=${BENCH_SECONDS:-20}
read -ra batches <<<"${BENCH_BATCHES:-1 8}"
out=${OUT:-bench/results/$(date +%F)-models-t$KILN_NUM_THREADS.md}
build=${BUILD_DIR:-build}
models=("$@")
[ ${#models[@]} -eq 0 ] && models=(resnet50 mobilenet_v3_large bert gpt2)

bench_select torch2 ort
bench_has ort ||
  { echo "models.sh: ONNX Runtime is the reference every output is checked against; BENCH_PEERS must name ort" >&2; exit 1; }
need=(ort hf-models)
bench_has torch2 && need+=(torch2)
[[ ${BENCH_CHART:-1} == 0 ]] || need+=(matplotlib)
bench_need "${need[@]}"

if [ -z "${KILN:-}" ]; then
  cfg=()
  [ -f "$build/CMakeCache.txt" ] || cfg=(-G Ninja -DCMAKE_BUILD_TYPE=Release)
  cmake -S . -B "$build" "${cfg[@]}" >/dev/null &&
    cmake --build "$build" -j"$(nproc)" --target kiln kiln_rt >/dev/null || exit 1
fi
kiln=$(realpath "${KILN:-$build/bin/kiln}")

if [ -n "${BENCH_DIR:-}" ]; then
  tmp=$BENCH_DIR
  mkdir -p "$tmp"
else
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
fi
py=$bench_venv_py
tags=()
for b in "${batches[@]}"; do for m in "${models[@]}"; do tags+=("$m-b$b"); done; done
todo=()
for t in "${tags[@]}"; do [ -f "$tmp/$t.onnx" ] || todo+=("$t"); done
if [ ${#todo[@]} -gt 0 ]; then
  echo "models.sh: exporting ${todo[*]}" >&2
  "$py" bench/models.py export "$tmp" "${todo[@]}" 2>"$tmp/export.err" >&2 ||
    { echo "models.sh: export failed: $(tail -3 "$tmp/export.err")" >&2; exit 1; }
fi

log=$tmp/results.txt
: >"$log"
fails=0
# run TAG WHO COMMAND...: its lines into the log, an ERROR line if it failed without one
run() {
  local tag=$1 who=$2
  shift 2
  echo "models.sh: $tag $who" >&2
  "$@" >"$tmp/$tag.$who.out" 2>"$tmp/$tag.$who.err"
  local rc=$?
  cat "$tmp/$tag.$who.out" >>"$log"
  grep -E "^(CHECK|RESULT|COMPILE)" "$tmp/$tag.$who.out" >&2
  if [ $rc -ne 0 ]; then
    fails=$((fails + 1))
    grep -q "^ERROR $tag " "$tmp/$tag.$who.out" ||
      echo "ERROR $tag $who exit $rc: $(tail -1 "$tmp/$tag.$who.err")" >>"$log"
  fi
  return $rc
}
versions=$("$py" -c 'import torch, torchvision, transformers, onnxruntime, onnx
print("torch %s, torchvision %s, transformers %s, onnxruntime %s, onnx %s" % (torch.__version__,
      torchvision.__version__, transformers.__version__, onnxruntime.__version__, onnx.__version__))')
chart=${out%.md}.png
[[ ${BENCH_CHART:-1} == 0 ]] && chart=
# The tables (and the chart) are rewritten after each model, so that a long run shows its rows
# as they come.
report() {
  "$bench_debian_py" bench/models_report.py "$log" "$out" "$chart" "bench/models.sh${*:+ $*}" \
    "$versions" "${bench_peers[*]}"
}
for t in "${tags[@]}"; do
  echo "ONNX $t $(du -k "$tmp/$t.onnx" | cut -f1)" >>"$log"
  run "$t" ort "$py" bench/models.py ort "$tmp" "$t"
  if bench_has torch2; then
    run "$t" torch "$py" bench/models.py torch "$tmp" "$t"
    # inductor's on-disk caches off: its compile time cold, as Kiln's (bench/peers.sh)
    run "$t" torchc env TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 "$py" bench/models.py torchc "$tmp" "$t"
  fi
  run "$t" kiln-compile "$py" bench/models.py kiln-compile "$tmp" "$t" "$kiln" &&
    # numpy's own OpenBLAS on one thread beside Kiln's pool (bench/onnx_models.sh says why)
    OPENBLAS_NUM_THREADS=1 run "$t" kiln-so "$py" bench/models.py kiln-so "$tmp" "$t" "$tmp/$t.so"
  run "$t" kiln-jit "$py" bench/models.py kiln-jit "$tmp" "$t" "$kiln"
  rm -f "$tmp/$t.so"
  report "$@" || exit 1
done
cat "$out"
exit $((fails > 0))
