#!/usr/bin/env bash
# onnx_models.sh — real exported models: PyTorch -> ONNX -> Kiln, checked and timed beside
# PyTorch and ONNX Runtime, in one run.
#
#   bench/onnx_models.sh [MODEL ...]     (default: resnet18 mobilenet_v2 transformer lstm)
#   KILN_NUM_THREADS=T (default 1) threads for all three; BENCH_REPS=N (default 20) runs per median
#   OUT=path  the results file (default bench/results/<date>-onnx-models-t<threads>.md)
#   KILN=path a kiln binary to use as it is (default: build/bin/kiln, built here first)
#
# bench/onnx_models.py (Debian's python3-torch 1.13 and python3-torchvision through /usr/bin/python3)
# exports each model with a random input and PyTorch's outputs; for each, `kiln compile model.onnx
# -o model.so` and `kiln run model.onnx` run, both outputs are compared with PyTorch's (f32, 1e-4
# relative), and bench/onnx_run.py (the venv of tools/setup.sh --bench: pip's numpy and
# onnxruntime; bench/peers.sh names both interpreters) times the compiled .so through ctypes and
# ONNX Runtime on the same input. A model Kiln cannot import gets its error in the table instead
# of numbers. Without torchvision or ONNX Runtime the script stops before it runs anything.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. bench/peers.sh
export KILN_NUM_THREADS=${KILN_NUM_THREADS:-1}
export OPENBLAS_NUM_THREADS=$KILN_NUM_THREADS OMP_NUM_THREADS=$KILN_NUM_THREADS
export BENCH_REPS=${BENCH_REPS:-20}
out=${OUT:-bench/results/$(date +%F)-onnx-models-t$KILN_NUM_THREADS.md}
build=${BUILD_DIR:-build}
models=("$@")
[ ${#models[@]} -eq 0 ] && models=(resnet18 mobilenet_v2 transformer lstm)

bench_need torchvision ort
if [ -z "${KILN:-}" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
    cmake --build "$build" -j2 --target kiln kiln_rt >/dev/null || exit 1
fi
kiln=${KILN:-$build/bin/kiln}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bench_debian_py" bench/onnx_models.py export "$tmp" "${models[@]}" 2>"$tmp/export.err" ||
  { echo "export failed: $(tail -5 "$tmp/export.err")" >&2; exit 1; }

rows=() fails=0
for m in "${models[@]}"; do
  echo "bench: $m" >&2
  size=$(du -k "$tmp/$m.onnx" | cut -f1)
  inputs=()
  for f in "$tmp/$m".in*.npy; do
    k=${f##*.in}; k=${k%.npy}; inputs+=(--input "x$k=$f")
  done
  t0=$(date +%s.%N)
  if ! "$kiln" compile "$tmp/$m.onnx" -o "$tmp/$m.so" >"$tmp/$m.compile" 2>&1; then
    err=$(tail -1 "$tmp/$m.compile")
    rows+=("| $m | $size | import/compile failed: \`${err//|/\\|}\` | | | | | |")
    fails=$((fails + 1))
    continue
  fi
  ctime=$(echo "$(date +%s.%N) - $t0" | bc)
  "$kiln" run "$tmp/$m.onnx" "${inputs[@]}" -o "$tmp/$m.run" >/dev/null 2>"$tmp/$m.run.err" &&
    "$bench_venv_py" bench/onnx_run.py compare "$tmp" "$m" "$tmp/$m.run" >"$tmp/$m.check" || fails=$((fails + 1))
  # OPENBLAS_NUM_THREADS=1 for numpy's own OpenBLAS in this process: on two threads its servers
  # spun beside Kiln's pool after a numpy call and the LSTM took 1.1 ms one run in three instead of
  # 0.11-0.16 (Kiln's pool runs its BLAS calls on one thread each anyway: docs/cpu-runtime.md)
  OPENBLAS_NUM_THREADS=1 "$bench_venv_py" bench/onnx_run.py kiln "$tmp" "$m" "$tmp/$m.so" \
    >>"$tmp/$m.check" || fails=$((fails + 1))
  "$bench_venv_py" bench/onnx_run.py ort "$tmp" "$m" >>"$tmp/$m.check" || fails=$((fails + 1))
  "$bench_debian_py" bench/onnx_models.py time "$tmp" "$m" >>"$tmp/$m.check" 2>/dev/null
  cat "$tmp/$m.check" >&2
  err() { grep "CHECK $m $1 " "$tmp/$m.check" | sed 's/.*error \([^ ]*\) (\(.*\))/\1 \2/' | sort -g -r | head -1; }
  res() { grep "RESULT $m $1 " "$tmp/$m.check" | awk '{print $4}'; }
  rows+=("| $m | $size | $(printf %.1f "$ctime") | $(err kiln-run) | $(err kiln-so) | $(res kiln) | $(res torch) | $(res ort) |")
done

{
  echo "# Real exported models: Kiln vs PyTorch vs ONNX Runtime ($(date +%F))"
  echo
  echo "Command: \`bench/onnx_models.sh ${*:-}\` (KILN_NUM_THREADS=$KILN_NUM_THREADS, medians of"
  echo "$BENCH_REPS runs after 3 warm-ups). Models exported by \`bench/onnx_models.py\` with Debian's"
  echo "PyTorch $("$bench_debian_py" -c 'import torch; print(torch.__version__)') / torchvision"
  echo "$("$bench_debian_py" -c 'import torchvision; print(torchvision.__version__)') (random weights,"
  echo "eval mode, opset 17; resnet18 and mobilenet_v2 at 1x3x224x224, the transformer encoder 2 layers"
  echo "d=64 h=4 ff=128 at 1x16x64, the LSTM 2 layers x 64 at 1x16x32). ONNX Runtime"
  echo "$("$bench_venv_py" -c 'import onnxruntime; print(onnxruntime.__version__)') (pip, CPU provider)."
  echo "Machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs,"
  echo "shared with other jobs (load average $(cut -d' ' -f1-3 /proc/loadavg)): times are indicative."
  echo
  echo "Errors are max|got - torch| / max|torch| over each model's outputs (the worst output), for"
  echo "\`kiln run\` (JIT) and for the \`kiln compile\` shared object called through ctypes; issue 8's"
  echo "bound is 1e-4. Compile s is \`kiln compile model.onnx -o model.so\` end to end (import, codegen,"
  echo "the system linker). Times are one forward, in ms."
  echo
  echo "| model | ONNX KiB | compile s | error kiln run | error kiln .so | kiln ms | torch ms | ORT ms |"
  echo "|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
} >"$out"
cat "$out"
exit $((fails > 0))
