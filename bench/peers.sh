# shellcheck shell=bash
# peers.sh — the interpreters of bench/'s peers, named once, and the check that a peer is there.
# Sourced by the bench scripts (bash, set -u safe):
#
#   bench_debian_py   Debian's /usr/bin/python3: python3-torch 1.13, torchvision, matplotlib
#                     (apt, tools/setup.sh --bench), and the standard library for small sums
#   bench_venv_py     the venv of tools/setup.sh --bench, build-bench-venv/bin/python (made from
#                     /usr/bin/python3): pip's torch 2.x (eager and torch.compile), onnxruntime,
#                     onnx, numpy; KILN_BENCH_PYTHON=path uses another interpreter instead
#
#   bench_select PEER...   the peers this script compares against, as BENCH_PEERS chooses them
#                          (default: all of PEER...; BENCH_PEERS="" for none) into bench_peers
#   bench_has PEER         whether PEER is in bench_peers
#   bench_without PEER     bench_peers without PEER, as a BENCH_PEERS value
#   bench_need PEER...     every PEER imports, or the script stops (exit 1) before it runs
#                          anything, naming each missing peer, what is missing and the fix
#
# Peers: torch1 (torch 1.x in bench_debian_py), torch2 (torch >= 2 in bench_venv_py), ort
# (onnxruntime, onnx, numpy in bench_venv_py); bench_need also checks ort-export (torch1, which
# writes the ONNX files that ort runs), torchvision (torch1 with torchvision), hf-models (pip's
# torchvision and transformers in bench_venv_py, which make bench/models.sh's models) and
# matplotlib (the charts).
# A peer that is not there never turns into a silently missing column.

# Kiln's compile times are measured cold, like the peers' (torch.compile's caches are off too):
# the JIT's on-disk kernel cache (docs/compile.md) is off unless the caller set it.
export KILN_KERNEL_CACHE=${KILN_KERNEL_CACHE:-0}

bench_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bench_script=${0##*/}
bench_debian_py=/usr/bin/python3
bench_venv_py=${KILN_BENCH_PYTHON:-$bench_root/build-bench-venv/bin/python}
bench_peers=()

# bench_peer PEER: sets bench_p_py, bench_p_code (what must import), bench_p_what (the words
# for the message) and bench_p_out (the selectable peer that needs PEER, or the variable that
# leaves PEER out; empty when the script cannot do without it)
bench_peer() {
  local torch1='import torch; v = torch.__version__
assert v.split(".")[0] == "1", "torch " + v + " there, not 1.x"'
  case $1 in
  torch1)
    bench_p_py=$bench_debian_py bench_p_code=$torch1 bench_p_out=torch1
    bench_p_what="Debian's PyTorch 1.13 eager, python3-torch" ;;
  torch2)
    bench_p_py=$bench_venv_py bench_p_out=torch2
    bench_p_code='import torch; v = torch.__version__
assert int(v.split(".")[0]) >= 2, "torch " + v + " there, not >= 2"'
    bench_p_what="pip's torch 2.x, eager and torch.compile" ;;
  ort)
    bench_p_py=$bench_venv_py bench_p_code='import numpy, onnxruntime, onnx' bench_p_out=ort
    bench_p_what="pip's onnxruntime, onnx and numpy" ;;
  ort-export)
    bench_p_py=$bench_debian_py bench_p_code=$torch1 bench_p_out=ort
    bench_p_what="ONNX Runtime's column needs Debian's PyTorch 1.13, python3-torch, for the"
    bench_p_what+=" ONNX exports it runs" ;;
  torchvision)
    bench_p_py=$bench_debian_py bench_p_code='import torch, torchvision' bench_p_out=
    bench_p_what="Debian's PyTorch 1.13 and torchvision, python3-torch python3-torchvision,"
    bench_p_what+=" which export the models" ;;
  hf-models)
    bench_p_py=$bench_venv_py bench_p_code='import torch, torchvision, transformers' bench_p_out=
    bench_p_what="pip's torchvision and transformers in the bench venv, which make and export"
    bench_p_what+=" the models" ;;
  matplotlib)
    bench_p_py=$bench_debian_py bench_p_code='import matplotlib' bench_p_out=BENCH_CHART=0
    bench_p_what="the chart's matplotlib, python3-matplotlib" ;;
  *)
    echo "$bench_script: bench/peers.sh knows no peer '$1'" >&2
    exit 1 ;;
  esac
}

# bench_peer_missing PEER: nothing when PEER imports; otherwise prints what is missing and succeeds
bench_peer_missing() {
  local err
  bench_peer "$1"
  if [[ ! -x $bench_p_py ]]; then
    echo "$bench_p_py does not exist"
  elif ! err=$("$bench_p_py" -c "$bench_p_code" 2>&1 >/dev/null); then
    echo "$bench_p_py says: ${err##*$'\n'}" # the exception's last line
  fi
}

bench_select() {
  local p known=" $* " all=" torch1 torch2 ort " chosen=()
  read -ra chosen <<<"${BENCH_PEERS-$*}"
  bench_peers=()
  for p in "${chosen[@]}"; do
    [[ $all == *" $p "* ]] ||
      { echo "$bench_script: BENCH_PEERS names '$p'; the peers are torch1 torch2 ort" >&2; exit 1; }
    # a peer this script has no column for is no error: one BENCH_PEERS serves every script
    [[ $known == *" $p "* ]] && ! bench_has "$p" && bench_peers+=("$p")
  done
  return 0
}

bench_has() { [[ " ${bench_peers[*]-} " == *" $1 "* ]]; }

bench_without() {
  local p keep=()
  for p in "${bench_peers[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done
  echo "${keep[*]}"
}

bench_need() {
  local p why drop=() keep=() vars="" q
  for p in "$@"; do
    bench_peer "$p"
    why=$(bench_peer_missing "$p")
    [[ -z $why ]] && continue
    echo "$bench_script: missing peer $p ($bench_p_what): $why" >&2
    drop+=("$bench_p_out")
  done
  [[ ${#drop[@]} -eq 0 ]] && return 0
  # The fix: install, or (where the script can do without) leave the missing peers out.
  for q in "${drop[@]}"; do
    [[ $q == *=* && " $vars " != *" $q "* ]] && vars+="$q "
  done
  local hint="" left=false
  for p in "${bench_peers[@]}"; do
    if [[ " ${drop[*]} " == *" $p "* ]]; then left=true; else keep+=("$p"); fi
  done
  $left && vars+="BENCH_PEERS=\"${keep[*]}\" "
  local it=it
  [[ ${#drop[@]} -gt 1 ]] && it=them
  [[ -n $vars ]] && hint=", or leave $it out: ${vars}bench/$bench_script"
  echo "$bench_script: nothing was run; tools/setup.sh --bench installs the peers$hint" >&2
  exit 1
}
