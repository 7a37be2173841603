#!/usr/bin/env bash
# setup.sh — installs the Debian packages that Kiln and its coming issues need.
#
#   tools/setup.sh            what building, running and testing need (CI runs this)
#   tools/setup.sh --bench    also what bench/ needs: PyTorch 1.13 and torchvision (the peers,
#                             and the ONNX exports of bench/onnx_models.sh) and matplotlib (charts)
#
# Idempotent and quick when everything is there: it asks dpkg which packages
# are missing and only then runs `apt-get update` and `apt-get install`.
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
)
optional=(libamdhip64-dev rocm-device-libs)           # the HIP target
# `setup.sh --bench`: what bench/ needs besides (the peers and the chart; not needed by the tests)
bench=(python3-torch python3-torchvision python3-matplotlib)
[[ ${1:-} == --bench ]] && required+=("${bench[@]}")

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

mapfile -t missing < <(missing_of "${required[@]}")
mapfile -t missing_optional < <(hip_available && missing_of "${optional[@]}" || true)
if [[ ${#missing[@]} -eq 0 && ${#missing_optional[@]} -eq 0 ]]; then
  echo "setup.sh: all packages are installed"
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
echo "setup.sh: done"
