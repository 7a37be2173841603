#!/usr/bin/env bash
# sdist_install.sh BUILD_DIR WORK_DIR — test `python.sdist`: python/sdist.sh writes the source
# distribution, which is unpacked in WORK_DIR and installed from there by build-python-venv's pip
# (--target WORK_DIR/site, so the venv's own install, test python.pip_install's, is left alone);
# then examples/python/two_moons.py and value_and_grad.py run on the installed package. The sdist
# holds no build of the repository: it builds libkiln whole (scikit-build-core in
# BUILD_DIR/python-sdist-build, kept between runs: the first run takes minutes).
set -euo pipefail
build=$1 work=$2
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
venv=$src/build-python-venv
[[ -x $venv/bin/python ]] || { echo "no $venv: run tools/setup.sh" >&2; exit 1; }
rm -rf "$work" && mkdir -p "$work"
echo "== python/sdist.sh"
"$src/python/sdist.sh" "$work/dist" "$venv/bin/python" | tail -1
tar -C "$work" -xzf "$work"/dist/kiln-*.tar.gz
# The sdist's files all carry one fixed date, older than every object in the kept build folder, so
# ninja there would take them all for up to date and link a stale module: each file gets the date
# of the file it came from in the working tree.
(cd "$work"/kiln-*/ && find . -type f -print0 | while IFS= read -r -d '' f; do
  [[ -e $src/$f ]] && touch -r "$src/$f" "$f"; done; true)
echo "== pip install $(basename "$work"/kiln-*/) (the unpacked sdist)"
"$venv/bin/pip" install --disable-pip-version-check --no-build-isolation --no-deps \
  --target "$work/site" --config-settings=build-dir="$build/python-sdist-build" "$work"/kiln-*/ \
  >"$build/python-sdist.log" 2>&1 || { tail -40 "$build/python-sdist.log"; exit 1; }
cd "$work"
export PYTHONPATH=$work/site
"$venv/bin/python" -c "import kiln; print('kiln', kiln.__version__, 'from', kiln.__file__)" |
  tee where.txt
grep -q "$work/site" where.txt
echo "== examples/python/two_moons.py"
"$venv/bin/python" "$src/examples/python/two_moons.py" 2>/dev/null | tee out.txt
grep -Eq '^accuracy (0[.]9[5-9]|1[.]0)' out.txt
echo "== examples/python/value_and_grad.py"
"$venv/bin/python" "$src/examples/python/value_and_grad.py" | tee out.txt
grep -Eq '^accuracy (0[.]9[5-9]|1[.]0)' out.txt
