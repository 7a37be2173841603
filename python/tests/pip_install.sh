#!/usr/bin/env bash
# pip_install.sh BUILD_DIR WORK_DIR — test `python.pip_install`: the README's install line in the
# venv tools/setup.sh makes (build-python-venv/: Debian's python3, its numpy and torch, and
# scikit-build-core), then examples/python/ run by that venv's Python from WORK_DIR, so that the
# installed package is the one imported. scikit-build-core builds in BUILD_DIR/python-wheel, kept
# between runs (the first run builds libkiln whole: minutes).
set -euo pipefail
build=$1 work=$2
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
venv=$src/build-python-venv
[[ -x $venv/bin/python ]] || { echo "no $venv: run tools/setup.sh" >&2; exit 1; }
echo "== $venv/bin/pip install ./python"
"$venv/bin/pip" install --disable-pip-version-check --no-build-isolation --no-deps \
  --force-reinstall --config-settings=build-dir="$build/python-wheel" "$src/python" \
  >"$build/python-wheel.log" 2>&1 || { tail -40 "$build/python-wheel.log"; exit 1; }
rm -rf "$work" && mkdir -p "$work" && cd "$work"
"$venv/bin/python" -c "import kiln; print('kiln', kiln.__version__, 'from', kiln.__file__)" |
  tee where.txt
grep -q "$venv" where.txt
echo "== examples/python/two_moons.py"
"$venv/bin/python" "$src/examples/python/two_moons.py" 2>/dev/null | tee out.txt
grep -Eq '^accuracy (0[.]9[5-9]|1[.]0)' out.txt
echo "== examples/python/inference.py"
"$venv/bin/python" "$src/examples/python/inference.py" two_moons.so | tee out.txt
grep -q "8 threads agree: True" out.txt
echo "== examples/python/value_and_grad.py"
"$venv/bin/python" "$src/examples/python/value_and_grad.py" | tee out.txt
grep -Eq '^accuracy (0[.]9[5-9]|1[.]0)' out.txt
