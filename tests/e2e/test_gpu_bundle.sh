#!/bin/sh
# test_gpu_bundle.sh -- the bundle of scripts/gpu-bundle runs where Open MPI,
# HDF5 and BLAS are not installed (the GPU machine, which has only CUDA,
# NCCL and PyTorch).  The test packs this build (CPU-only or CUDA: the
# mechanism is the same), then in a private mount namespace hides the
# system's Open MPI (libraries, plugins, help texts, configuration, mpirun,
# orted, ompi_info), PMIx, HDF5 and BLAS (empty directories and /dev/null
# bound over them) and checks that
#   - the hiding works: the build's own ddptrain no longer starts, and a
#     bundle with libopenblas.so.0 taken out fails to start too;
#   - the bundled ddptrain-prep makes a deck, and the bundled ddptrain
#     trains on it as a singleton (np=1, no launcher) and at np=2 under the
#     bundled mpirun: progress lines with a loss, a done line, exit 0;
#   - every shared object those processes loaded (LD_DEBUG=libs: mpirun and
#     both ranks, Open MPI's plugins included) came from the bundle, except
#     the C runtime and, in a CUDA build, the libraries the bundle declares
#     external (MANIFEST: cudart, cuBLAS, cuBLASLt, NCCL, which the GPU
#     machine provides), by exactly those names;
#   - tests/gpu/run-all writes its results into three files, the logs
#     packed in one archive.
# Needs root and unshare -m: skipped (77) without them, or fails when
# DDP_REQUIRE_MOUNT=1 (.ci/run sets it).
. ./testenv.sh || exit 99
set -u
if [ "$(id -u)" != 0 ] || ! unshare -m sh -c 'mount --bind /dev/null /dev/null' 2>/dev/null; then
  ddp_skip DDP_REQUIRE_MOUNT "hiding the system's libraries needs root and unshare -m / mount --bind"
fi
command -v ompi_info >/dev/null 2>&1 || ddp_skip DDP_REQUIRE_MOUNT "no ompi_info: this test packs Open MPI's runtime"
ddp_tmpdir
export DDP_TEST_TIMEOUT=${DDP_TEST_TIMEOUT:-120}
B=$T/gpu-bundle
sh "$top_srcdir/scripts/gpu-bundle" --from-build "$top_builddir" --no-make --no-tar --out "$B" >"$T/bundle.log" 2>&1 ||
  { cat "$T/bundle.log"; fail "scripts/gpu-bundle --from-build $top_builddir"; }
cat "$T/bundle.log"
for f in bin/ddptrain bin/ddptrain-prep bin/mpirun bin/orted env.sh MANIFEST lib/libmpi.so.40 share/openmpi; do
  [ -e "$B/$f" ] || fail "the bundle has no $f"
done
grep -q '^glibc 2\.[0-9]*$' "$B/MANIFEST" || fail "MANIFEST names no glibc version: $(grep '^glibc' "$B/MANIFEST")"
# cuDNN, loaded with dlopen where the build has its header: an optional library
if grep -q '^#define HAVE_CUDNN 1' "$top_builddir/ddp_build.h"; then
  grep -q '^optional .*libcudnn\.so\.[0-9]' "$B/MANIFEST" ||
    fail "MANIFEST does not name cuDNN as optional: $(grep '^optional' "$B/MANIFEST")"
fi

# the namespace: hide, then run the checks (inner.sh); its output says what failed
cat >"$T/inner.sh" <<'EOF'
set -u
T=$1 B=$2 ORIG=$3
fail() { echo "FAIL: $*" >&2; exit 1; }
empty=$T/empty; mkdir -p "$empty"
pkglib=$(ompi_info --path pkglibdir --parsable | sed -n 's/^path:pkglibdir://p')
pkgdata=$(ompi_info --path pkgdatadir --parsable | sed -n 's/^path:pkgdatadir://p')
sysconf=$(ompi_info --path sysconfdir --parsable | sed -n 's/^path:sysconfdir://p')
bindir=$(ompi_info --path bindir --parsable | sed -n 's/^path:bindir://p')
libmpi=$(ldd "$ORIG" | awk '$1 == "libmpi.so.40" { print $3 }')
libdir=$(dirname "$(readlink -f "$libmpi")")
for d in "$pkglib" "$pkgdata" "$sysconf" "$libdir/pmix2" "$libdir/openblas-pthread" "$libdir/blas" \
  "$libdir/lapack" "$libdir/hdf5" "$libdir/openmpi"; do
  [ -d "$d" ] && { mount --bind "$empty" "$d" || fail "mount --bind over $d"; }
done
hidden=0
for f in "$libdir"/libmpi*.so* "$libdir"/libopen-rte.so* "$libdir"/libopen-pal.so* "$libdir"/libmca_common_*.so* \
  "$libdir"/libpmix.so* "$libdir"/libhdf5*.so* "$libdir"/libsz.so* "$libdir"/libaec.so* "$libdir"/libopenblas*.so* \
  "$libdir"/libblas.so* "$libdir"/libcblas.so* "$libdir"/liblapack.so* "$libdir"/libgfortran.so* \
  "$bindir"/orterun "$bindir"/orted "$bindir"/ompi_info "$bindir"/mpicc /usr/bin/mpirun /usr/bin/mpiexec; do
  r=$(readlink -f "$f" 2>/dev/null) || continue
  [ -f "$r" ] || continue
  mount --bind /dev/null "$r" || fail "mount --bind /dev/null over $r"
  hidden=$((hidden + 1))
done
echo "hidden: $hidden files and Open MPI's, PMIx's, HDF5's and BLAS's directories"
# the hiding works: the build's own program cannot start now
"$ORIG" --version >/dev/null 2>&1 && fail "the build's ddptrain still starts with the system's libraries hidden"
# the bundle, from a directory the build never saw
export DDP_BUNDLE=$B
. "$B/env.sh"
cd "$T" || exit 1
ddptrain-prep synthetic --classes 4 --features 32 --samples 1024 --val 128 --seed 3 -o "$T/d.h5" >"$T/prep.log" 2>&1 ||
  { cat "$T/prep.log"; fail "the bundled ddptrain-prep synthetic"; }
m="--model linear:64,relu,linear:auto --batch 32 --epochs 2 --log-every 8"
rm -rf "$T/ld" && mkdir "$T/ld"
LD_DEBUG=libs LD_DEBUG_OUTPUT=$T/ld/np1 timeout -k 5 60 ddptrain "$T/d.h5" $m >"$T/np1.out" 2>"$T/np1.err" ||
  { cat "$T/np1.out" "$T/np1.err"; fail "the bundled ddptrain as a singleton (np=1): exit $?"; }
root=""; [ "$(id -u)" = 0 ] && root=--allow-run-as-root
LD_DEBUG=libs LD_DEBUG_OUTPUT=$T/ld/np2 timeout -k 5 90 mpirun $root --oversubscribe --bind-to none -np 2 \
  ddptrain "$T/d.h5" $m >"$T/np2.out" 2>"$T/np2.err" ||
  { cat "$T/np2.out" "$T/np2.err"; fail "the bundled ddptrain at np=2 under the bundled mpirun: exit $?"; }
for n in np1 np2; do
  grep -q '^step [0-9]*/[0-9]* .*loss [0-9.]*' "$T/$n.out" || { cat "$T/$n.out"; fail "$n: no progress line with a loss"; }
  grep -q '^done: ' "$T/$n.out" || { cat "$T/$n.out"; fail "$n: no done line"; }
done
# two ranks really averaged gradients (a singleton all-reduces nothing)
grep -q 'grad_allreduces=[1-9]' "$T/np2.out" || { cat "$T/np2.out"; fail "np=2: no gradient all-reduce in the summary"; }
# what they loaded: every object from the bundle, but for the C runtime
sed -n 's/.*calling init: //p' "$T"/ld/np1.* "$T"/ld/np2.* | sort -u >"$T/loaded"
[ -s "$T/loaded" ] || fail "LD_DEBUG=libs recorded nothing"
crt='^/(usr/)?lib(64)?/(x86_64-linux-gnu/)?(ld-linux-x86-64|libc|libm|libmvec|libpthread|libdl|librt|libresolv|libutil|libanl|libnss_[a-z]*)\.so'
# a CUDA build's bundle declares the libraries the GPU machine provides
# (MANIFEST's "external" line: cudart, cuBLAS, cuBLASLt, NCCL): those come
# from outside by design, by exactly those names, and nothing else does
external=$(sed -n 's/^external //p' "$B/MANIFEST" | tr ' ' '\n' | sed '/^$/d')
: >"$T/declared"
for lib in $external; do grep -v "^$B/" "$T/loaded" | grep "/$lib\$" >>"$T/declared"; done
bad=$(grep -v "^$B/" "$T/loaded" | grep -Ev "$crt" | grep -Fxv -f "$T/declared")
[ -s "$T/declared" ] && echo "declared external, loaded from this machine: $(tr '\n' ' ' <"$T/declared")"
[ -z "$bad" ] || { echo "loaded from outside the bundle:"; echo "$bad"; fail "the bundled programs loaded libraries from the system"; }
for need in lib/libmpi.so.40 lib/libhdf5 lib/libopenblas.so.0 lib/openmpi/mca_; do
  grep -q "^$B/$need" "$T/loaded" || { cat "$T/loaded"; fail "nothing loaded from the bundle's $need"; }
done
procs=$(grep -l "calling init: $B/lib/libopen-pal.so.40" "$T"/ld/np2.* | wc -l)
[ "$procs" -ge 3 ] || fail "Open MPI from the bundle in $procs processes of the np=2 run, expected 3 (mpirun, 2 ranks)"
ranks=$(grep -l "calling init: $B/lib/libmpi.so.40" "$T"/ld/np2.* | wc -l)
[ "$ranks" -eq 2 ] || fail "libmpi from the bundle in $ranks processes of the np=2 run, expected 2 ranks"
echo "loaded $(wc -l <"$T/loaded") objects, $(grep -c "^$B/" "$T/loaded") from the bundle; np=2: $procs processes"
# a bundle without libopenblas.so.0 does not start: it is not found elsewhere
mv "$B/lib/libopenblas.so.0" "$T/openblas.away"
ddptrain --version >"$T/broken.out" 2>&1 && fail "ddptrain started without the bundle's libopenblas.so.0"
grep -q 'libopenblas.so.0' "$T/broken.out" || { cat "$T/broken.out"; fail "the failure does not name libopenblas.so.0"; }
mv "$T/openblas.away" "$B/lib/libopenblas.so.0"
echo "inner: all checks passed"
EOF
timeout -k 10 300 unshare -m sh "$T/inner.sh" "$T" "$B" "$DDPTRAIN" >"$T/inner.log" 2>&1
rc=$?
cat "$T/inner.log"
[ $rc -eq 0 ] || fail "the bundle in a namespace without Open MPI, HDF5 and BLAS (exit $rc; the lines above say what)"
grep -q '^inner: all checks passed' "$T/inner.log" || fail "the checks in the namespace did not finish"
# tests/gpu/run-all, as the GPU machine runs it (here without a GPU, on a
# short budget: its steps skip or fail): it writes exactly three files, the
# logs in one archive, so a machine that brings back a few brings back all
timeout -k 5 120 "$top_srcdir/tests/gpu/run-all" --bundle "$B" --out "$T/gpu-out" --budget 40 \
  >"$T/runall.log" 2>&1
[ $? -lt 124 ] || { cat "$T/runall.log"; fail "tests/gpu/run-all hung"; }
[ "$(ls -A "$T/gpu-out" | wc -l)" -eq 3 ] && [ -f "$T/gpu-out/gpu-results.md" ] &&
  [ -f "$T/gpu-out/gpu-results.csv" ] && [ -f "$T/gpu-out/gpu-logs.tar.gz" ] ||
  { ls -la "$T/gpu-out"; cat "$T/runall.log"; fail "run-all: not the three files gpu-results.md, gpu-results.csv, gpu-logs.tar.gz"; }
tar -tzf "$T/gpu-out/gpu-logs.tar.gz" | grep -qx 'logs/libraries.log' ||
  { tar -tzvf "$T/gpu-out/gpu-logs.tar.gz"; fail "run-all: the archive lacks logs/libraries.log"; }
grep -q '^- verdict: ' "$T/gpu-out/gpu-results.md" || { cat "$T/gpu-out/gpu-results.md"; fail "run-all: no verdict"; }
echo "run-all: $(sed -n 's/^- verdict: //p' "$T/gpu-out/gpu-results.md") on this machine; three files"
echo "test_gpu_bundle.sh: passed"
