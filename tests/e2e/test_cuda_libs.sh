#!/bin/sh
# test_cuda_libs.sh -- a CUDA build's programs load cuBLAS only when they bind
# a GPU (cuda/blas.cu: dlopen at ddp_cuda_init), so a run on the CPU does not
# pay for it (cuBLAS and cuBLASLt: 25,000 page faults of relocations, about
# 0.1 s of system time a process):
#   - ddptrain and ddptrain-prep do not list libcublas among their needed
#     libraries;
#   - a training run that computes on the CPU (--device auto here, where no
#     GPU is visible; --device cpu where one is) never loads it
#     (LD_DEBUG=libs, the dynamic loader's own trace);
#   - the library the backend loads (DDP_CUBLAS_SONAME) is one this machine
#     has.
# Builds without CUDA: skipped (no cuBLAS to load).
. ./testenv.sh || exit 99
set -u
case " $DDP_COMPUTE_BACKENDS " in
  *" cuda "*) ;;
  *) echo "test_cuda_libs.sh: skipped: a build without CUDA loads no cuBLAS" >&2; exit 77 ;;
esac
ddp_tmpdir
for p in "$DDPTRAIN" "$DDPPREP"; do
  objdump -p "$p" | grep -q 'NEEDED.*libcublas' &&
    { objdump -p "$p" | grep NEEDED; fail "$(basename "$p") is linked with cuBLAS (it should load it only to bind a GPU)"; }
done
"$DDPPREP" synthetic --classes 3 --features 8 --samples 64 --seed 1 -o "$T/d.h5" >/dev/null ||
  fail "ddptrain-prep synthetic"
device=auto
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && device=cpu
LD_DEBUG=libs "$DDPTRAIN" "$T/d.h5" --model linear:8,relu,linear:auto --batch 8 --steps 2 \
  --device "$device" --log-every 0 >"$T/run.out" 2>"$T/run.err" || { cat "$T/run.out" "$T/run.err"; fail "the run failed"; }
grep -q 'calling init:' "$T/run.err" || { head -n 20 "$T/run.err"; fail "LD_DEBUG=libs traced nothing"; }
grep -q 'libcublas' "$T/run.err" && { grep libcublas "$T/run.err" | head -n 5; fail "--device $device loaded cuBLAS"; }
soname=$(sed -n 's/^#define DDP_CUBLAS_SONAME "\(.*\)"$/\1/p' "$top_builddir/ddp_build.h")
[ -n "$soname" ] || fail "ddp_build.h defines no DDP_CUBLAS_SONAME"
found=$(ldconfig -p 2>/dev/null | awk -v s="$soname" '$1 == s { print $NF; exit }')
if [ -z "$found" ]; then
  for d in $(sed -n 's/^CUDA_LDFLAGS = //p' "$top_builddir/Makefile" | tr ' ' '\n' | sed -n 's/^-L//p'); do
    [ -e "$d/$soname" ] && found=$d/$soname
  done
fi
[ -n "$found" ] || fail "$soname, the cuBLAS the backend loads, is neither in ldconfig's cache nor in the build's CUDA library directory"
echo "test_cuda_libs.sh: passed (cuBLAS: $found, loaded only to bind a GPU)"
