#!/usr/bin/env bash
# run.sh BUILD_DIR WORK_DIR — test `install.packages`: installs the build into WORK_DIR/prefix
# (`cmake --install --prefix`), moves the tree (the install is relocatable), then builds
# examples/ against it three ways — pkg-config kiln (libkiln.so), pkg-config kiln-static (libkiln.a
# and every dependency), find_package(Kiln) (tests/install/consumer) — and runs what it built,
# including a model that the installed `kiln compile` wrote.
set -euo pipefail
build=$1 work=$2
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
rm -rf "$work" && mkdir -p "$work"
step() { echo "== $*"; }

step "cmake --install $build --prefix $work/staged"
cmake --install "$build" --prefix "$work/staged" >"$work/install.log"
mv "$work/staged" "$work/prefix"
prefix=$work/prefix
libdir=$(dirname "$(find "$prefix" -name libkiln.a)")
for f in bin/kiln include/kiln/kiln.h; do [[ -e $prefix/$f ]] || { echo "missing $f"; exit 1; }; done
for f in libkiln.so libkiln.a libkiln_rt.a libkiln_gpurt.a pkgconfig/kiln.pc \
         pkgconfig/kiln-static.pc cmake/Kiln/KilnConfig.cmake kiln/aot/runtime/exec/rt.h; do
  [[ -e $libdir/$f ]] || { echo "missing $libdir/$f"; exit 1; }
done
export PKG_CONFIG_PATH=$libdir/pkgconfig

# train_loop EXE: its held-out accuracy after 3 epochs (the full run is example.train_loop's)
check_train() {
  local out
  out=$("$1" 3)
  echo "$out" | tail -1
  grep -Eq '^accuracy [0-9.]+' <<<"$out"
}

step "pkg-config kiln: $(pkg-config --cflags --libs kiln)"
cc -std=c11 -O1 "$src/examples/train_loop.c" $(pkg-config --cflags --libs kiln) -lm \
  -Wl,-rpath,"$libdir" -o "$work/train_loop_pc_shared"
readelf -d "$work/train_loop_pc_shared" | grep -q 'NEEDED.*libkiln.so.0'
check_train "$work/train_loop_pc_shared"

step "pkg-config kiln-static"
cc -std=c11 -O1 "$src/examples/train_loop.c" $(pkg-config --cflags --libs kiln-static) \
  -o "$work/train_loop_pc_static"
! readelf -d "$work/train_loop_pc_static" | grep -q 'NEEDED.*libkiln'
check_train "$work/train_loop_pc_static"

step "find_package(Kiln): tests/install/consumer"
cmake -S "$src/tests/install/consumer" -B "$work/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" >"$work/consumer.log"
# The installed tool must find the installed runtime kit, not this source tree or build.
env -u KILN_SOURCE_DIR -u KILN_LIB_DIR cmake --build "$work/consumer" -j1 >>"$work/consumer.log"
check_train "$work/consumer/train_loop_shared"
check_train "$work/consumer/train_loop_static"
step "mlp.so from the installed kiln compile, run by examples/mlp_main.c on 4 threads"
(cd "$work/consumer" && LD_LIBRARY_PATH=. ./mlp_main 4)
echo "install.packages: OK"
