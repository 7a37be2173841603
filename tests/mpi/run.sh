#!/usr/bin/env bash
# run.sh KILN PYTHON MPIEXEC WORKDIR fit|faults — data-parallel `kiln fit` on MPI (docs/distributed.md).
#
#   fit     an MLP (f32 and f64), a CNN and a transformer trained by `mpirun -np 2` and `-np 4`
#           (oversubscribed) on loopback, their parameters against one process's with the same
#           global batch: f32 within 1e-5 (rounding), f64 within 1e-12 (the sum's order); a batch
#           smaller than the ranks (empty shards) gives the one-process bits; rank 0 alone prints
#           and writes. The sum that overlaps the backward pass gives the bits of the sum after
#           it (KILN_COMM_OVERLAP=0) and of 1 KiB buckets, and is handed over during the pass (overlap).
#           A program's fit() under mpirun (`kiln run`) and dropout's masks over ranks.
#   faults  ranks with different models end with the same error on every rank, and so does a
#           rank that fails alone to build its step (without waiting for the timeout); a rank killed
#           mid-run (SIGKILL) and a rank that hangs (SIGSTOP, found by KILN_COMM_TIMEOUT) end the
#           whole job with a non-zero status, never a hang.
#
# Every mpirun is wrapped in `timeout`. Root (CI containers) needs Open MPI's consent; loopback
# only (self and shared memory); no single-copy mechanism in containers.
set -euo pipefail
kiln=$1 py=$2 mpiexec=$3 work=$4 what=$5
src=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_btl=self,vader
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
# the runtime's thread pool: one thread per rank, as the one-process run
export KILN_NUM_THREADS=1
rm -rf "$work" && mkdir -p "$work" && cd "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
mpi() { local np=$1; shift; timeout 300 "$mpiexec" -np "$np" "$@"; }

"$py" - <<'EOF'
import numpy as np
r = np.random.default_rng(7)
x = r.standard_normal((103, 2)).astype(np.float32)
np.save("x.npy", x)
np.save("y.npy", ((x[:, 0] * x[:, 1] > 0) + (x[:, 0] > 1)).astype(np.int64))
np.save("img.npy", r.standard_normal((37, 1, 8, 8)).astype(np.float32))
np.save("imgy.npy", r.integers(0, 4, 37))
np.save("tok.npy", r.integers(0, 50, (29, 8)))
np.save("toky.npy", r.integers(0, 3, 29))
EOF

# compare TAG MODEL X Y BATCH DTYPE TOL [fit options]: one process, then 2 and 4 ranks
compare() {
  local tag=$1 model=$2 x=$3 y=$4 bs=$5 dt=$6 tol=$7
  shift 7
  local args=(fit "$model" --x "$x" --y "$y" --loss cross_entropy --opt adam --lr 0.01 --seed 3
              --batch-size "$bs" --dtype "$dt" -q "$@")
  "$kiln" "${args[@]}" -o "$tag.1.safetensors" > "$tag.1.out" 2>&1 || { cat "$tag.1.out"; fail "$tag: one process"; }
  local np
  for np in 2 4; do
    mpi "$np" "$kiln" "${args[@]}" -o "$tag.$np.safetensors" > "$tag.$np.out" 2> "$tag.$np.err" ||
      { cat "$tag.$np.out" "$tag.$np.err"; fail "$tag: $np ranks"; }
    # rank 0 alone prints the epochs, the same as one process's (to the loss's rounding)
    diff <(cut -d' ' -f1-2 "$tag.1.out" | grep '^epoch') <(cut -d' ' -f1-2 "$tag.$np.out") > /dev/null ||
      { cat "$tag.$np.out"; fail "$tag: $np ranks printed other epoch lines"; }
    grep -q "^data-parallel: $np ranks (MPI)" "$tag.$np.err" || fail "$tag: no 'data-parallel' line"
    local res
    res=$("$py" "$src/compare.py" "$tag.1.safetensors" "$tag.$np.safetensors" "$tol") ||
      fail "$tag: $np ranks differ from one process by more than $tol: $res"
    echo "$tag, $np ranks: $res"
  done
  overlap "$tag" "${args[@]}"
}

# overlap TAG ARGS...: the sum that overlaps the backward pass (the default, above) gives the
# same bits as the sum after it (KILN_COMM_OVERLAP=0) and as small buckets (KILN_COMM_BUCKET=1K),
# and really overlaps: with small buckets the first bucket is handed to the communicator's thread
# after a step of the gradient program that is not its last (the trace's "went after step X of
# N", fixed by the program). When the thread began it ("began after step Y of N") is the
# scheduler's choice: it is counted and printed, not checked (on a loaded machine, as CI's
# parallel tests make it, no bucket may begin before the run's last step ends).
overlap() {
  local tag=$1
  shift
  KILN_COMM_OVERLAP=0 mpi 2 "$kiln" "$@" -o "$tag.after.safetensors" > /dev/null 2> "$tag.after.err" ||
    { cat "$tag.after.err"; fail "$tag: KILN_COMM_OVERLAP=0"; }
  KILN_COMM_BUCKET=1K KILN_COMM_TRACE=1 mpi 2 "$kiln" "$@" -o "$tag.small.safetensors" > /dev/null \
    2> "$tag.trace" || { cat "$tag.trace"; fail "$tag: KILN_COMM_BUCKET=1K"; }
  cmp "$tag.2.safetensors" "$tag.after.safetensors" || fail "$tag: the overlapped sum differs from the sum after the run"
  cmp "$tag.2.safetensors" "$tag.small.safetensors" || fail "$tag: 1 KiB buckets give other bits"
  local summary
  summary=$(awk '/^kiln: rank .* step .*: overlapped;/ {
      n++; went = $16; began = $21; N = $23 + 0; b = $7
      if (went + 0 >= 0 && went + 0 < N - 1) early++
      if (began + 0 >= 0 && began + 0 < N - 1) during++
    } /after the run/ { late++ }
    END { printf "%d %d %d %d %s %s", n, early, during, late, b, N }' "$tag.trace")
  read -r n early during late nb nsteps <<< "$summary"
  echo "$tag: overlap: $n rank-steps, $nb buckets of 1 KiB, the first sent before the last of" \
    "$nsteps steps in $early, begun before it in $during ($late after the run: empty shards);" \
    "bit-identical to KILN_COMM_OVERLAP=0"
  [[ $n -gt 0 ]] || { cat "$tag.trace"; fail "$tag: no step overlapped"; }
  [[ $early -eq $n ]] || { cat "$tag.trace"; fail "$tag: the first bucket went after the last step"; }
}

case $what in
fit)
  compare mlp32 "$src/../../examples/models/mlp.kiln" x.npy y.npy 16 f32 1e-5 --epochs 3
  compare mlp64 "$src/../../examples/models/mlp.kiln" x.npy y.npy 16 f64 1e-12 --epochs 3 \
    --val-x x.npy --val-y y.npy --clip 1
  compare cnn "$src/cnn.kiln" img.npy imgy.npy 8 f32 1e-5 --epochs 2
  compare transformer "$src/transformer.kiln" tok.npy toky.npy 8 f32 1e-5 --epochs 2
  # a global batch of 2 over 4 ranks: two shards are empty and contribute zeros. Not bit-identical
  # to one process in general: its weight gradient's product over the two rows may round once in
  # an FMA (OpenBLAS's dgemm on a CPU with FMA), where the ranks round each row's product
  compare tiny "$src/../../examples/models/mlp.kiln" x.npy y.npy 2 f64 1e-15 --epochs 1
  # A program's fit() under mpirun (`kiln run`): rank 0 alone prints and saves; f64 parameters
  # within 1e-12 of one process's.
  prog=(run "$src/fit_prog.kiln" --input X=x.npy --input y=y.npy)
  "$kiln" "${prog[@]}" > prog.1.out 2>&1 || { cat prog.1.out; fail "program: one process"; }
  mv prog.safetensors prog.1.safetensors
  mpi 2 "$kiln" "${prog[@]}" > prog.2.out 2>&1 || { cat prog.2.out; fail "program: 2 ranks"; }
  mv prog.safetensors prog.2.safetensors
  grep -q "data-parallel (MPI)" prog.2.out || { cat prog.2.out; fail "program: not data-parallel"; }
  [[ $(grep -c '^\[' prog.2.out) -eq 1 ]] || { cat prog.2.out; fail "program: printed by more than rank 0"; }
  echo "program fit(), 2 ranks: $("$py" "$src/compare.py" prog.1.safetensors prog.2.safetensors 1e-12)" ||
    fail "program: 2 ranks differ from one process by more than 1e-12"

  # Dropout: rank 0 keeps one process's key, the other ranks draw from keys of their own, so
  # that no two rows of a global batch share a mask. One row twice on 2 ranks (a row each)
  # against that row alone on one process, one SGD step in f64: without dropout the same bits
  # (the mean of two equal gradients); with dropout 0.5 other bits — rank 1's mask is not the
  # mask of rank 0's row, as it was when every rank drew with one key.
  "$py" -c "import numpy as np; x = np.load('x.npy')[:1]; y = np.load('y.npy')[:1]
np.save('x1.npy', x); np.save('y1.npy', y); np.save('x2.npy', np.concatenate([x, x])); np.save('y2.npy', np.concatenate([y, y]))"
  for p in 0.0 0.5; do
    printf 'use layers\ninput x: f32[N, 2]\nmlp([2, 64, 64, 3], dropout=%s)\n' "$p" > drop.kiln
    d=(fit drop.kiln --loss cross_entropy --opt sgd --lr 0.5 --seed 3 --dtype f64 --epochs 1 -q)
    "$kiln" "${d[@]}" --x x1.npy --y y1.npy --batch-size 1 -o "drop$p.1.safetensors" > /dev/null 2>&1 ||
      fail "dropout $p: one process"
    mpi 2 "$kiln" "${d[@]}" --x x2.npy --y y2.npy --batch-size 2 -o "drop$p.2.safetensors" > /dev/null 2>&1 ||
      fail "dropout $p: 2 ranks"
    same=$("$py" "$src/compare.py" "drop$p.1.safetensors" "drop$p.2.safetensors" 1 | grep -c bit-identical || true)
    echo "dropout $p: one row on one process against it twice on 2 ranks: $([[ $same = 1 ]] && echo bit-identical || echo different)"
    [[ $p = 0.0 && $same = 1 ]] || [[ $p = 0.5 && $same = 0 ]] ||
      fail "dropout $p: expected $([[ $p = 0.0 ]] && echo the same bits || echo other bits)"
  done
  ;;
faults)
  # Different models on the two ranks (MPMD): the same error on both, status 1, no hang.
  sed 's/64, 64/64, 32/' "$src/../../examples/models/mlp.kiln" > other.kiln
  common=(--x x.npy --y y.npy --loss cross_entropy --epochs 1 -o m.safetensors -q)
  set +e
  timeout 300 "$mpiexec" -np 1 "$kiln" fit "$src/../../examples/models/mlp.kiln" "${common[@]}" : \
    -np 1 "$kiln" fit other.kiln "${common[@]}" > mismatch.out 2>&1
  rc=$?
  set -e
  cat mismatch.out
  [[ $rc -ne 0 && $rc -ne 124 ]] || fail "mismatched models: status $rc"
  # Each rank finds the mismatch and says so; but mpirun aborts the job as soon as one rank exits,
  # which may kill the other before it prints (1 of 5 runs here, on a loaded machine).
  [[ $(grep -c "has another model" mismatch.out) -ge 1 ]] || fail "mismatched models: no rank said so"

  # A file that one rank cannot read: every rank fails at once (no wait for the timeout).
  set +e
  KILN_COMM_TIMEOUT=60 timeout 300 "$mpiexec" -np 1 "$kiln" fit "$src/../../examples/models/mlp.kiln" \
    "${common[@]}" : -np 1 "$kiln" fit "$src/../../examples/models/mlp.kiln" "${common[@]}" \
    --val-x missing.npy --val-y y.npy > missing.out 2>&1
  rc=$?
  set -e
  cat missing.out
  [[ $rc -ne 0 && $rc -ne 124 ]] || fail "a missing file on rank 1: status $rc"
  grep -q "another rank failed before training" missing.out ||
    fail "a missing file on rank 1: rank 0 did not say that another rank failed"

  # A rank that fails alone while building its step (fp16 is refused with several ranks, and
  # only rank 1 asks for it): the ranks agree on that after building, so every rank fails at
  # once with a message, long before KILN_COMM_TIMEOUT (60 s) — rank 0 does not wait for it in
  # the first exchange.
  start=$SECONDS
  set +e
  KILN_COMM_TIMEOUT=60 timeout 300 "$mpiexec" -np 1 "$kiln" fit "$src/../../examples/models/mlp.kiln" \
    "${common[@]}" : -np 1 "$kiln" fit "$src/../../examples/models/mlp.kiln" "${common[@]}" \
    --precision fp16 > build.out 2>&1
  rc=$?
  set -e
  took=$((SECONDS - start))
  cat build.out
  echo "a rank that fails to build its step: status $rc after $took s"
  [[ $rc -ne 0 && $rc -ne 124 ]] || fail "a step that fails to build on rank 1: status $rc"
  [[ $took -lt 50 ]] || fail "a step that fails to build on rank 1: the job took $took s (the timeout?)"
  grep -q "rank 1 could not build the training step" build.out ||
    fail "a step that fails to build on rank 1: rank 0 did not say so"

  # A rank killed mid-run, then one that hangs: the job ends, non-zero, within the timeout.
  long=(fit "$src/../../examples/models/mlp.kiln" --x x.npy --y y.npy --loss cross_entropy
        --batch-size 4 --epochs 100000 -o long.safetensors -q)
  for sig in KILL STOP; do
    cat > rank.sh <<EOF
#!/bin/sh
# rank 1 trains until it has summed a step with rank 0 (its first KILN_COMM_TRACE line: the
# job's start-up is over, so rank 0 then waits in a step's sum, where KILN_COMM_TIMEOUT holds),
# a second more, then gets SIG$sig. The rank is the kiln process itself (exec), so Open MPI's
# abort reaches it; a stopped rank is killed 30 s later in any case (six times
# KILN_COMM_TIMEOUT). A kiln started in the background of the rank's shell outlived that shell
# when stopped, and in a fresh Debian root mpirun then waited for it until timeout's 300 s.
if [ "\$OMPI_COMM_WORLD_RANK" = 1 ]; then
  rm -f $sig.rank1
  (i=0; while [ ! -s $sig.rank1 ] && [ \$i -lt 600 ]; do sleep 0.1; i=\$((i + 1)); done
   sleep 1; kill -$sig \$\$; [ $sig = STOP ] && sleep 30 && kill -KILL \$\$) > /dev/null 2>&1 < /dev/null &
  KILN_COMM_TRACE=1 exec "$kiln" ${long[*]} 2> $sig.rank1
fi
exec "$kiln" ${long[*]}
EOF
    chmod +x rank.sh
    start=$SECONDS
    set +e
    KILN_COMM_TIMEOUT=5 mpi 2 ./rank.sh > "$sig.out" 2>&1
    rc=$?
    set -e
    echo "SIG$sig on rank 1: status $rc after $((SECONDS - start)) s"
    [[ $rc -ne 0 && $rc -ne 124 ]] || { cat "$sig.out"; fail "SIG$sig on rank 1: status $rc"; }
  done
  # the hung rank is found by the timeout, and named
  grep -q "no message with rank 1 within 5 s\|no send with rank 1 within 5 s" STOP.out ||
    { cat STOP.out; fail "SIGSTOP: rank 0 did not report its timeout"; }
  ;;
*) fail "unknown part '$what'" ;;
esac
echo "OK"
