#!/usr/bin/env bash
# demo.sh — the main job: compile an example model to a shared object and run it.
#
# Installs what is missing (setup.sh), builds Kiln, prints the IR of
# examples/mlp.kir (a 2-layer MLP with constant weights, input x: f32[N, 4]),
# compiles it ahead of time into build/examples/mlp.so + mlp.h, builds the C
# program examples/mlp_main.c against them and runs it (N = 3, then 8 threads
# with separate instances), and prints the reference interpreter's result on
# the same input beside it (also written to $KILN_DEMO_OUT, default
# /tmp/kiln-demo, as .npy files).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

tools/setup.sh >/dev/null

out=${KILN_DEMO_OUT:-/tmp/kiln-demo}
model=examples/mlp.kir
input=examples/mlp_input.npy

if [[ -f build/CMakeCache.txt ]] && ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' build/CMakeCache.txt; then
  rm -rf build
fi
# the configuration of tools/test.sh's first suite, so that one build serves both
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_WERROR=ON >/dev/null
cmake --build build -j2 --target kiln kiln_rt

if [[ ! -f $input ]]; then
  # The committed input is made by tests/fixtures/npy/make.py, which needs NumPy.
  /usr/bin/python3 tests/fixtures/npy/make.py
fi

echo
echo "== the model: build/bin/kiln ir $model"
build/bin/kiln ir "$model"
echo
mkdir -p build/examples
echo "== compile: build/bin/kiln compile $model -o build/examples/mlp.so --header build/examples/mlp.h"
build/bin/kiln compile "$model" -o build/examples/mlp.so --header build/examples/mlp.h
cc -std=c11 -O2 -Ibuild/examples examples/mlp_main.c build/examples/mlp.so \
  -Wl,-rpath,"$PWD/build/examples" -lpthread -o build/examples/mlp_main
echo "   needs: $(readelf -d build/examples/mlp.so | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' | tr '\n' ' ')"
echo
echo "== the compiled model, from C: build/examples/mlp_main 8"
build/examples/mlp_main 8
echo
echo "== the reference interpreter on the same input: build/bin/kiln run $model --input x=$input -o $out --backend eager --print"
build/bin/kiln run "$model" --input x="$input" -o "$out" --backend eager --print
