#!/usr/bin/env bash
# distributed.sh — data-parallel scaling: `kiln fit` at 1 and 2 MPI ranks (one thread each)
# against PyTorch 1.13 DDP with gloo on the same machine, loopback, one thread a rank:
#   the MLP 784-1024-1024-10, global batch 256, 8192 samples, cross-entropy, Adam
#   a transformer classifier (d 128, 4 heads, 2 layers, T 64), global batch 64, 2048 samples
# Kiln's number is the last progress line's samples/s (the training loop, after compilation);
# PyTorch's is timed after its first step. Both on random data. Writes
# bench/results/<date>-distributed.md with the machine and the commands.
#
#   bench/distributed.sh [EPOCHS]          (BUILD_DIR=build by default; needs Open MPI)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
epochs=${1:-2}
build=${BUILD_DIR:-build}
kiln=$build/bin/kiln
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
export KILN_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 - "$tmp" <<'PY'
import sys
import numpy as np
d, r = sys.argv[1], np.random.default_rng(1)
np.save(d + "/x.npy", r.standard_normal((8192, 784)).astype(np.float32))
np.save(d + "/y.npy", r.integers(0, 10, 8192))
np.save(d + "/tok.npy", r.integers(0, 1000, (2048, 64)))
np.save(d + "/toky.npy", r.integers(0, 5, 2048))
PY
kiln_rate() { # MODEL X Y BATCH RANKS
  local cmd=("$kiln" fit "bench/distributed/$1.kiln" --x "$tmp/$2" --y "$tmp/$3" --loss cross_entropy
             --opt adam --lr 1e-3 --epochs "$epochs" --batch-size "$4" --seed 1 -o "$tmp/out.safetensors")
  if [[ $5 == 1 ]]; then "${cmd[@]}" 2>&1 >/dev/null; else mpirun -np "$5" "${cmd[@]}" 2>&1 >/dev/null; fi |
    sed -n 's/.* \([0-9.]*\) samples\/s$/\1/p' | tail -1
}
torch_rate() { /usr/bin/python3 bench/distributed_torch.py "$1" "$2" "$3" "$4" "$epochs" | sed -n 's/^samples\/s //p'; }
out=bench/results/$(date +%Y-%m-%d)-distributed.md
{
  echo "# Data-parallel scaling, 1 and 2 ranks (bench/distributed.sh)"
  echo
  echo "$(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD), $(getconf _NPROCESSORS_ONLN) CPUs (a machine shared with other work: load average $(cut -d" " -f1 /proc/loadavg) at the start):"
  echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), Open MPI"
  echo "$(mpirun --version | head -1 | awk '{print $NF}'), PyTorch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)'),"
  echo "one thread a rank, loopback (self, vader / gloo over TCP), $epochs epochs, random data."
  echo "Global samples a second (higher is better); speed-up = 2 ranks / 1 rank."
  echo
  echo "| model | global batch | Kiln 1 | Kiln 2 | speed-up | DDP 1 | DDP 2 | speed-up |"
  echo "|---|---|---|---|---|---|---|---|"
  for spec in "mlp x.npy y.npy 256 8192" "transformer tok.npy toky.npy 64 2048"; do
    set -- $spec
    k1=$(kiln_rate "$1" "$2" "$3" "$4" 1); k2=$(kiln_rate "$1" "$2" "$3" "$4" 2)
    t1=$(torch_rate "$1" 1 "$4" "$5"); t2=$(torch_rate "$1" 2 "$4" "$5")
    echo "| $1 | $4 | $k1 | $k2 | $(awk "BEGIN{printf \"%.2f\", $k2/$k1}") | $t1 | $t2 | $(awk "BEGIN{printf \"%.2f\", $t2/$t1}") |"
  done
} | tee "$out"
echo "wrote $out"
