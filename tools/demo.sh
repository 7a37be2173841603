#!/usr/bin/env bash
# demo.sh — the main job: build Kiln and run an example model end to end.
#
# Installs what is missing (setup.sh), builds build/bin/kiln, prints the IR of
# examples/mlp.kir (a 2-layer MLP with constant weights, input x: f32[N, 4]),
# runs it on examples/mlp_input.npy (N = 3) and prints the outputs, which are
# also written to $KILN_DEMO_OUT (default /tmp/kiln-demo) as .npy files.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

tools/setup.sh >/dev/null

out=${KILN_DEMO_OUT:-/tmp/kiln-demo}
model=examples/mlp.kir
input=examples/mlp_input.npy

if [[ -f build/CMakeCache.txt ]] && ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' build/CMakeCache.txt; then
  rm -rf build
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_WERROR=ON >/dev/null
cmake --build build -j2 --target kiln

if [[ ! -f $input ]]; then
  # The committed input is made by tests/fixtures/npy/make.py, which needs NumPy.
  /usr/bin/python3 tests/fixtures/npy/make.py
fi

echo
echo "== the model: build/bin/kiln ir $model"
build/bin/kiln ir "$model"
echo
echo "== the run: build/bin/kiln run $model --input x=$input -o $out --print"
build/bin/kiln run "$model" --input x="$input" -o "$out" --print
