#!/usr/bin/env bash
# setup.sh — installs the Debian packages that Kiln and its coming issues need.
#
#   tools/setup.sh            what building, running and testing need (CI runs this), and the
#                             venv build-python-venv/ (Debian's python3 with scikit-build-core
#                             from PyPI) where test python.pip_install runs `pip install ./python`,
#                             and the node tests of the onnx release pinned below (1.23.2):
#                             pip's onnx and numpy in a venv of /usr/bin/python3 at
#                             build-onnx-venv/, whose generators tools/onnx_node_data.py runs
#                             once into build-onnx-node/onnx-VERSION/ (test
#                             unit.test_onnx.node-VERSION; docs/onnx.md, "Conformance")
#   tools/setup.sh --bench    also what bench/ needs: Debian's PyTorch 1.13 and torchvision (a
#                             peer, and the ONNX exports of bench/run.sh and bench/onnx_models.sh)
#                             and matplotlib (charts), then the pip peers in a virtual environment
#                             of /usr/bin/python3 at build-bench-venv/: torch 2.x (eager and
#                             torch.compile), torchvision and transformers (bench/models.sh's
#                             models), onnxruntime, onnx, onnxscript (torch's dynamo exporter,
#                             bench/exporters.py) and numpy (bench/peers.sh names it)
#
# Idempotent and quick when everything is there: it asks dpkg which packages
# are missing and only then runs `apt-get update` and `apt-get install`
# (and imports scikit-build-core in build-python-venv/, onnx in build-onnx-venv/, and with --bench
# the pip peers in build-bench-venv/, and only then runs pip; the node tests are generated only
# when their folder's stamp is missing).
# Runs as root, or through sudo when it is available. The HIP packages are
# installed only where the distribution offers them (apt-cache shows a
# candidate), and failing to install them is a warning, not an error: a HIP
# device is optional at run time too.
set -euo pipefail

required=(
  cmake ninja-build build-essential python3           # build and test drivers
  python3-numpy                                       # the tests' Python is /usr/bin/python3 with numpy
  clang-16 llvm-16-dev llvm-16-tools libclang-rt-16-dev  # CPU codegen, lit/FileCheck, libFuzzer
  libmlir-16-dev mlir-16-tools
  libopenblas-dev                                     # BLAS for large CPU matmuls
  spirv-tools spirv-headers libvulkan-dev mesa-vulkan-drivers  # the Vulkan target
  libprotobuf-c-dev protobuf-c-compiler               # ONNX import
  python3-onnx libonnx-testdata                       # onnx.proto for protoc-c; ONNX conformance tests
  libcjson-dev                                        # safetensors headers (JSON)
  valgrind
  pkg-config                                          # test install.packages (kiln.pc)
  openmpi-bin libopenmpi-dev                          # data-parallel training (train/comm.c) and
                                                      # its tests (mpirun; docs/distributed.md)
  python3-dev python3-pytest python3-torch python3-venv python3-pip  # the Python package (python/):
                                                      # Python.h, its pytest suite, torch for its
                                                      # DLPack and numerics tests, the pip venv
)
optional=(libamdhip64-dev rocm-device-libs)           # the HIP target
# `setup.sh --bench`: what bench/ needs besides (the peers and the chart; not needed by the tests).
# (bench/ also uses python3-venv and python3-pip, which make its venv, python3-dev, whose Python.h
# torch.compile's C++ kernels include on the CPU, and python3-torch: the tests need them too.)
bench=(python3-torchvision python3-matplotlib)  # (python3-torch, -venv, -pip, -dev: required above)
with_bench=false
[[ ${1:-} == --bench ]] && with_bench=true && required+=("${bench[@]}")
# The pip peers of bench/ live in a venv of Debian's python3 (not the python3 on PATH, which
# differs between machines; not Debian's site-packages, whose torch is 1.13).
bench_venv=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build-bench-venv
# torch and torchvision in one pip command, so that pip picks a torchvision built for that torch;
# pip_check asks for one of torchvision's C++ ops, which register only against the torch they were
# built for
pip_peers=("torch>=2" torchvision transformers onnxruntime onnx onnxscript numpy)
pip_check='import sys, torch, torch._dynamo, torchvision, transformers, onnxruntime, onnx, onnxscript, numpy
torch.ops.torchvision.nms
print("torch %s, torchvision %s, transformers %s, onnxruntime %s, onnx %s, numpy %s"
      % (torch.__version__, torchvision.__version__, transformers.__version__,
         onnxruntime.__version__, onnx.__version__, numpy.__version__))
sys.exit(int(torch.__version__.split(".")[0]) < 2)'

# The venv that test python.pip_install runs `pip install ./python` in: Debian's python3 with its
# numpy and torch (--system-site-packages), and scikit-build-core (the package's build backend,
# which Debian 12 does not package) from PyPI.
py_venv=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build-python-venv
python_venv() {
  local py=$py_venv/bin/python
  if [[ -x $py ]] && "$py" -c "import scikit_build_core" 2>/dev/null; then
    return 0
  fi
  if [[ ! -x $py ]]; then
    echo "setup.sh: creating the Python package's venv $py_venv (/usr/bin/python3 -m venv)"
    /usr/bin/python3 -m venv --system-site-packages "$py_venv" ||
      { echo "setup.sh: /usr/bin/python3 -m venv $py_venv failed" >&2; exit 1; }
  fi
  echo "setup.sh: pip-installing scikit-build-core into $py_venv"
  "$py" -m pip install --disable-pip-version-check "scikit-build-core>=0.10" ||
    { echo "setup.sh: pip could not install scikit-build-core into $py_venv (pip's error" \
        "above; PyPI must be reachable)" >&2
      exit 1; }
}

# ONNX's node tests as the onnx release below defines them: pip's wheel ships their generators,
# not their data. tools/onnx_node_data.py writes them (seeded: the same bytes every time) into
# build-onnx-node/onnx-VERSION/, once: a folder whose stamp names these versions is complete.
# tests/CMakeLists.txt reads the first line below; tests/fixtures/onnx_conformance/
# node-VERSION.{pass,wrong} go with it.
onnx_node_version=1.23.2
onnx_numpy_version=2.4.6
onnx_pins=("onnx==$onnx_node_version" "numpy==$onnx_numpy_version")
onnx_venv=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build-onnx-venv
onnx_node_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build-onnx-node/onnx-$onnx_node_version
onnx_node() {
  local py=$onnx_venv/bin/python t0=$SECONDS
  local stamp
  stamp=$(cat "$onnx_node_dir/stamp" 2>/dev/null || true)
  if [[ $stamp == "onnx $onnx_node_version, numpy $onnx_numpy_version:"* ]]; then
    echo "setup.sh: ONNX's node tests are in $onnx_node_dir ($stamp)"
    return 0
  fi
  local check="import onnx, numpy, sys
sys.exit((onnx.__version__, numpy.__version__) != ('$onnx_node_version', '$onnx_numpy_version'))"
  if ! { [[ -x $py ]] && "$py" -c "$check" 2>/dev/null; }; then
    if [[ ! -x $py ]]; then
      echo "setup.sh: creating the ONNX venv $onnx_venv (/usr/bin/python3 -m venv)"
      /usr/bin/python3 -m venv "$onnx_venv" ||
        { echo "setup.sh: /usr/bin/python3 -m venv $onnx_venv failed" >&2; exit 1; }
    fi
    echo "setup.sh: pip-installing ${onnx_pins[*]} into $onnx_venv"
    "$py" -m pip install --disable-pip-version-check "${onnx_pins[@]}" ||
      { echo "setup.sh: pip could not install ${onnx_pins[*]} into $onnx_venv (pip's error" \
          "above; PyPI must be reachable)" >&2
        exit 1; }
  fi
  echo "setup.sh: generating ONNX's node tests (onnx $onnx_node_version) into $onnx_node_dir"
  "$py" "$(dirname "${BASH_SOURCE[0]}")/onnx_node_data.py" "$onnx_node_dir" ||
    { echo "setup.sh: tools/onnx_node_data.py failed" >&2; exit 1; }
  echo "setup.sh: ONNX's node tests generated in $(( SECONDS - t0 )) s"
}

# (Outputs are captured before grep -q looks at them: with pipefail, a writer
# killed by SIGPIPE when grep stops early would fail the test.)
missing_of() {
  local p status
  for p in "$@"; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    [[ $status == "install ok installed" ]] || echo "$p"
  done
}

hip_available() {
  local policy
  policy=$(apt-cache policy libamdhip64-dev 2>/dev/null || true)
  grep -Eq 'Candidate: [^(]' <<<"$policy"
}

as_root() {
  if [[ $EUID -eq 0 ]]; then
    "$@"
  elif command -v sudo >/dev/null; then
    sudo "$@"
  else
    echo "setup.sh: need root (or sudo) to run: $*" >&2
    exit 1
  fi
}

apt_install() {
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@"
}

# `setup.sh --bench`: the venv and its pip packages, when an import of them fails
bench_pip() {
  local py=$bench_venv/bin/python have
  if [[ -x $py ]] && have=$("$py" -c "$pip_check" 2>/dev/null); then
    echo "setup.sh: the bench venv $bench_venv has $have"
    return 0
  fi
  if [[ ! -x $py ]]; then
    echo "setup.sh: creating the bench venv $bench_venv (/usr/bin/python3 -m venv)"
    /usr/bin/python3 -m venv "$bench_venv" ||
      { echo "setup.sh: /usr/bin/python3 -m venv $bench_venv failed" >&2; exit 1; }
  fi
  echo "setup.sh: pip-installing ${pip_peers[*]} into $bench_venv (torch from PyPI: several GB)"
  "$py" -m pip install --disable-pip-version-check "${pip_peers[@]}" ||
    { echo "setup.sh: pip could not install ${pip_peers[*]} into $bench_venv (pip's error above)" >&2
      exit 1; }
  if ! have=$("$py" -c "$pip_check"); then
    echo "setup.sh: after pip, $py still cannot import torch >= 2 (with a torchvision built for it)," \
      "transformers, onnxruntime, onnx and numpy" >&2
    exit 1
  fi
  echo "setup.sh: the bench venv has $have"
}

mapfile -t missing < <(missing_of "${required[@]}")
mapfile -t missing_optional < <(hip_available && missing_of "${optional[@]}" || true)
if [[ ${#missing[@]} -eq 0 && ${#missing_optional[@]} -eq 0 ]]; then
  echo "setup.sh: all packages are installed"
  python_venv
  onnx_node
  $with_bench && bench_pip
  exit 0
fi

as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "setup.sh: installing ${missing[*]}"
  apt_install "${missing[@]}"
fi
# After the update the HIP packages may have become available.
mapfile -t missing_optional < <(hip_available && missing_of "${optional[@]}" || true)
if [[ ${#missing_optional[@]} -gt 0 ]]; then
  echo "setup.sh: installing ${missing_optional[*]} (optional: the HIP target)"
  apt_install "${missing_optional[@]}" ||
    echo "setup.sh: warning: could not install ${missing_optional[*]}; the HIP target stays off" >&2
fi
mapfile -t still < <(missing_of "${required[@]}")
if [[ ${#still[@]} -gt 0 ]]; then
  echo "setup.sh: still missing after apt-get: ${still[*]}" >&2
  exit 1
fi
python_venv
onnx_node
$with_bench && bench_pip
echo "setup.sh: done"
