#!/usr/bin/env bash
# sdist.sh OUT_DIR [PYTHON] — the Python package's source distribution, self-contained: a
# kiln-VERSION.tar.gz in OUT_DIR that `pip install kiln-VERSION.tar.gz` builds anywhere the build
# dependencies are (docs/python.md: LLVM 16, MLIR, SPIRV-Tools, OpenBLAS, protobuf-c, cJSON).
#
# `python -m build --sdist python/` alone would not do: python/pyproject.toml builds Kiln from the
# repository root (cmake.source-dir = ".."), outside python/, so its sdist holds only python/.
# This script stages the files git tracks that the library and the module are built from (the
# root CMakeLists.txt, cmake/, include/, the library's folders, tools/ and python/ without its
# tests) with python/pyproject.toml at the top, cmake.source-dir "." and the package at
# python/kiln, and has scikit-build-core (PYTHON's, default build-python-venv's) write the sdist.
# Test `python.sdist` (slow) builds and runs what it writes.
set -euo pipefail
out=$(realpath -m "$1")
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
py=${2:-$src/build-python-venv/bin/python}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cd "$src"
git ls-files -z -- CMakeLists.txt cmake include ir frontend passes codegen runtime layers train \
  program tools python ':!python/tests' ':!python/sdist.sh' | tar --null -T - -cf - | tar -C "$stage" -xf -
sed -e 's|^cmake\.source-dir = "\.\."|cmake.source-dir = "."|' \
    -e 's|^wheel\.packages = \["kiln"\]|wheel.packages = ["python/kiln"]|' \
    -e 's|^sdist\.exclude = .*|sdist.exclude = ["/build*"]|' python/pyproject.toml >"$stage/pyproject.toml"
grep -q '^cmake.source-dir = "."' "$stage/pyproject.toml" &&
  grep -q '^wheel.packages = \["python/kiln"\]' "$stage/pyproject.toml" ||
  { echo "sdist.sh: python/pyproject.toml no longer has the lines this script rewrites" >&2; exit 1; }
cp python/README.md "$stage/README.md"
mkdir -p "$out"
cd "$stage"
"$py" -c "import sys; from scikit_build_core.build import build_sdist; print(sys.argv[1] + '/' + build_sdist(sys.argv[1]))" "$out"
