#!/bin/sh
# test_device_plan.sh -- the device memory plan of a GPU run, on the CPU
# emulation of CUDA (tests/doubles/train_emu, tests/emu): DDP_EMU_GPU_MEM_MB
# sets the emulated GPUs' memory (cudaMalloc beyond it fails,
# cudaMemGetInfo reports it) and DDP_EMU_MEM_REPORT=1 prints at exit the
# most device memory each process held at once ("peak"):
#  (a) the plan is what the trainer allocates: its total less the runtime
#      reserve is each run's peak within [-0.05, +0.25] MiB (the table's
#      figures are rounded to 0.05 MiB; the cuda backend's own reduction
#      buffers, about 0.1 MiB, are in the reserve), for a CNN with
#      BatchNorm, its convolution workspace, --on-nonfinite skip and fp16
#      gradient compression, for a wide convolution with a bias at a large
#      batch (its bias gradient's scratch), for the MLP of (b) and (c) at
#      --zero 1 and 2, and for the runs of (d) with their large device
#      batches; with
#      --precision bf16 the plan's bound on the bf16 GEMM inputs holds (the
#      peak is not above it), for the CNN, for 32 convolutions whose inputs
#      kept in bf16 for cuDNN outweigh the bound's slack, for 16 residual
#      blocks whose outputs' bf16 copies outweigh it, and for a deep MLP
#      whose parameters' bf16 copy outweighs it, whose activations
#      in bf16 are 3 MiB less than in fp32 at batch 256 (hidden outputs kept
#      in bf16);
#  (b) np=2 (DDP_EMU_GPUS=2), a model whose --zero 0 plan does not fit a
#      GPU on which its --zero 1 plan does: refused at start-up (exit 5, one
#      line with the plan's parts and the free memory, saying "run with
#      --zero 1"), before anything large is on the device (peak under
#      1 MiB); with --zero 1 it trains there, and its plan is the figure the
#      refusal gave for --zero 1 and its peak that plan;
#  (c) on a GPU between the --zero 1 and --zero 2 plans: --zero 1 is refused
#      saying "run with --zero 2"; --zero 2 trains there (its plan the
#      refusal's figure, its peak that plan);
#  (d) np=1, a batch whose activations do not fit: refused naming the
#      largest --batch that fits; that batch trains on that GPU, one more
#      is refused;
#  (e) on cpu there is no device plan (the host check is the one of
#      test_limits.sh).
#
# The GPU sizes come from the plans themselves, not from constants: a first
# run on a 1 MiB GPU is refused with the plans of --zero 0, 1 and 2, and the
# sizes are taken halfway between them, rounded down to whole MiB (the
# plans are exact byte counts of the layout, and the emulated GPU has its
# whole size free at the check, so nothing varies between runs); the model
# -- 12 layers of 512 units, AdamW, buckets of one layer -- keeps those
# plans at least 3 MiB apart (checked; measured 11.0 and 3.6), so every size
# is at least 0.5 MiB from both plans beside it.
. ./testenv.sh || exit 99
set -u
ddp_tmpdir
EMU="$top_builddir/tests/doubles/train_emu"
export DDP_TEST_TIMEOUT=300 DDP_EMU_GPUS=2 DDP_EMU_MEM_REPORT=1
"$DDPPREP" synthetic --classes 4 --features 12 --samples 800 --val 100 --seed 3 -o "$T/d.h5" \
  >/dev/null || fail "ddptrain-prep synthetic"
"$MAKE_DECK" images "$T/img.h5" 512 || fail "make_deck images"
spec=$(printf 'linear:512,relu,%.0s' 1 2 3 4 5 6 7 8 9 10 11 12)linear:auto
big="--model $spec --optimizer adamw --lr 0.001 --batch 8 --steps 2 --device cuda --log-every 1
  --eval-every 0 --bucket-cap-mb 0.5 --first-bucket-mb 0.5"

# plan LOG: the plan's total in MiB from the start-up table
plan() { sed -n 's/^  device\/rank  plan \([0-9.]*\) MiB .*/\1/p' "$1"; }
# reserve LOG: the runtime reserve in MiB (the table's or the refusal's)
reserve() { sed -n 's/.*runtime reserve \([0-9.]*\) MiB.*/\1/p' "$1" | head -n 1; }
# peak LOG: the largest peak of the processes of a run, in MiB
peak() {
  sed -n 's/^ddp_emu: GPU [0-9]* peak \([0-9]*\) bytes.*/\1/p' "$1" |
    awk 'BEGIN { m = -1 } $1 > m { m = $1 } END { if (m >= 0) printf "%.4f\n", m / 1048576 }'
}
# fits NAME LOG [bound]: the run's peak matches its plan less the reserve
# ("bound": only that the peak is not above it)
fits() {
  _p=$(plan "$2") _r=$(reserve "$2") _k=$(peak "$2")
  [ -n "$_p" ] && [ -n "$_r" ] && [ -n "$_k" ] ||
    { cat "$2"; fail "$1: no plan, reserve or peak in the log"; }
  awk -v p="$_p" -v r="$_r" -v k="$_k" -v bound="${3:-}" -v name="$1" 'BEGIN {
    d = k - (p - r)
    printf "%s: plan %s MiB less the reserve %s, peak %.2f MiB (%+.2f)\n", name, p, r, k, d
    exit bound != "" ? d > 0.15 : (d < -0.05 || d > 0.25) }' ||
    { cat "$2"; fail "$1: the plan is not what the run allocated"; }
}
# run NAME NP PROGRAM OPTIONS...: train, the log in $T/NAME.log
run() {
  name=$1 np=$2 prog=$3; shift 3
  mpirun_np "$np" "$prog" "$@" >"$T/$name.log" 2>&1 || { cat "$T/$name.log"; fail "$name failed"; }
}

# (a) plan == allocation (the MLP's in (b) and (c))
cnn="--model conv:16:3:1:1,bn,relu,conv:16:3:1:1,gap,linear:auto --steps 2 --device cuda
  --eval-every 0 --batch 32"
run cnn 1 "$EMU" "$T/img.h5" $cnn --on-nonfinite skip --grad-compress fp16
grep -q "device/rank .*BatchNorm .*workspace .*16-bit gradients" "$T/cnn.log" ||
  { cat "$T/cnn.log"; fail "cnn: the plan lacks BatchNorm, workspace or 16-bit gradients"; }
fits "cnn" "$T/cnn.log"
run cnn-bf16 1 "$EMU" "$T/img.h5" $cnn --precision bf16
fits "cnn bf16" "$T/cnn-bf16.log" bound
# ... and 32 convolutions in bf16: each one's input kept in bf16 from its
# forward to its backward for cuDNN's weight gradient (cuda/conv.cu), 8 MiB
# in all, more than the bound's slack
deep="--model $(printf 'conv:16:3:1:1,%.0s' $(seq 32))gap,linear:auto
  --steps 2 --device cuda --eval-every 0 --batch 128 --precision bf16"
run deep-cnn-bf16 1 "$EMU" "$T/img.h5" $deep
fits "deep cnn bf16" "$T/deep-cnn-bf16.log" bound
# ... and 16 residual blocks in bf16: each block's output, fp32 for its
# shortcut and read by the next block's convolution, has a bf16 copy beside
# it that its writer keeps (cuda/bf16.h, compute.h act_copy16), 8 MiB in
# all at batch 256, in the plan where the memo's copies would be (a dry
# run, DDP_EMU_DRY: every allocation, no kernel run)
res="--model conv:16:3:1:1,bn,relu,$(printf 'res(conv:16:1:1:0,bn),relu,%.0s' $(seq 16))gap,linear:auto"
export DDP_EMU_DRY=1
run res-bf16 1 "$EMU" "$T/img.h5" $res --steps 2 --device cuda --eval-every 0 --batch 256 \
  --precision bf16
unset DDP_EMU_DRY
fits "residual cnn bf16" "$T/res-bf16.log" bound
# ... and the deep MLP of (b) in bf16 with 8 classes (every weight's copy
# aligned, so the backend keeps the parameters' bf16 copy the optimizer
# writes, cuda/bf16.h: 6 MiB, more than the bound's slack)
"$DDPPREP" synthetic --classes 8 --features 12 --samples 800 --seed 3 -o "$T/d8.h5" \
  >/dev/null || fail "ddptrain-prep synthetic (8 classes)"
run big-bf16 1 "$EMU" "$T/d8.h5" $big --precision bf16
fits "deep mlp bf16" "$T/big-bf16.log" bound
# ... whose 12 hidden outputs, each read only by the next dense layer, are
# kept in bf16 (cuda/bf16.h): at batch 256 the plan's activations are those
# of fp32 less 12 x 256 x 512 x 2 bytes (3 MiB), and the run stays within it
acts() { sed -n 's/^  device\/rank  plan .* activations \([0-9.]*\),.*/\1/p' "$1"; }
for p in fp32 bf16; do
  run "wide-acts-$p" 1 "$EMU" "$T/d8.h5" $big --batch 256 --steps 1 --precision $p
done
fits "deep mlp bf16, batch 256" "$T/wide-acts-bf16.log" bound
a32=$(acts "$T/wide-acts-fp32.log") a16=$(acts "$T/wide-acts-bf16.log")
awk -v a="$a32" -v b="$a16" 'BEGIN { exit !(a != "" && b != "" && a - b > 2.95 && a - b < 3.05) }' ||
  { cat "$T/wide-acts-bf16.log"; fail "bf16 activations $a16 MiB, fp32 $a32: not 3 MiB less"; }
# ... and a wide convolution with a bias at a large batch, whose bias
# gradient's per-sample sums (a double per sample and channel: 1 MiB here)
# are in the plan's workspace
run wide 1 "$EMU" "$T/img.h5" --model conv:512:1,gap,linear:auto --steps 2 --device cuda \
  --eval-every 0 --batch 256
fits "wide conv" "$T/wide.log"

# the plans of --zero 0, 1 and 2 at np=2, from a refusal on a 1 MiB GPU
DDP_EMU_GPU_MEM_MB=1 mpirun_np 2 "$EMU" "$T/d.h5" $big >"$T/probe.out" 2>"$T/probe.err"
ddp_expect_error "$T/probe.err" $? 5 "the plans on a 1 MiB GPU" \
  "cuda device memory: this rank's plan needs|--zero 1 would need|--zero 2"
p0=$(sed -n "s/.*this rank's plan needs \([0-9.]*\) MiB.*/\1/p" "$T/probe.err")
p1=$(sed -n 's/.*--zero 1 would need \([0-9.]*\) MiB.*/\1/p' "$T/probe.err")
p2=$(sed -n 's/.*--zero 1 would need [0-9.]* MiB, --zero 2 \([0-9.]*\) MiB.*/\1/p' "$T/probe.err")
sizes=$(awk -v a="$p0" -v b="$p1" -v c="$p2" 'BEGIN {
  if (a == "" || b == "" || c == "" || a - b < 3 || b - c < 3) exit 1
  printf "%d %d\n", (a + b) / 2, (b + c) / 2 }') ||
  { cat "$T/probe.err"; fail "the plans of --zero 0, 1, 2 ('$p0', '$p1', '$p2') are not 3 MiB apart (--zero 1 and 2 must shrink the plan)"; }
set -- $sizes
mem01=$1 mem12=$2
echo "plans: --zero 0 $p0 MiB, --zero 1 $p1 MiB, --zero 2 $p2 MiB; GPUs of $mem01 and $mem12 MiB"

# (b) --zero 0 refused where --zero 1 fits; --zero 1 trains there
DDP_EMU_GPU_MEM_MB=$mem01 mpirun_np 2 "$EMU" "$T/d.h5" $big >"$T/z0.out" 2>"$T/z0.err"
ddp_expect_error "$T/z0.err" $? 5 "--zero 0 on a $mem01 MiB GPU" \
  "this rank's plan needs $p0 MiB (parameters |optimizer state |runtime reserve |of its device's $mem01.0 MiB are free|--zero 1 would need $p1 MiB|run with --zero 1"
k=$(peak "$T/z0.err")
awk -v k="$k" 'BEGIN { exit !(k != "" && k < 1) }' ||
  { cat "$T/z0.err"; fail "the refused run held $k MiB of device memory (allocated before the check)"; }
DDP_EMU_GPU_MEM_MB=$mem01 run z1 2 "$EMU" "$T/d.h5" $big --zero 1
[ "$(plan "$T/z1.log")" = "$p1" ] || { cat "$T/z1.log"; fail "--zero 1: plan is not the refusal's $p1 MiB"; }
grep -q "^step 2/2 " "$T/z1.log" || { cat "$T/z1.log"; fail "--zero 1: did not train"; }
fits "--zero 1" "$T/z1.log"

# (c) --zero 1 refused where --zero 2 fits; --zero 2 trains there
DDP_EMU_GPU_MEM_MB=$mem12 mpirun_np 2 "$EMU" "$T/d.h5" $big --zero 1 >"$T/z1r.out" 2>"$T/z1r.err"
ddp_expect_error "$T/z1r.err" $? 5 "--zero 1 on a $mem12 MiB GPU" \
  "this rank's plan needs $p1 MiB|--zero 2 would need $p2 MiB|run with --zero 2"
DDP_EMU_GPU_MEM_MB=$mem12 run z2 2 "$EMU" "$T/d.h5" $big --zero 2
[ "$(plan "$T/z2.log")" = "$p2" ] || { cat "$T/z2.log"; fail "--zero 2: plan is not the refusal's $p2 MiB"; }
grep -q "^step 2/2 " "$T/z2.log" || { cat "$T/z2.log"; fail "--zero 2: did not train"; }
fits "--zero 2" "$T/z2.log"

# (d) one rank, a batch too large: the largest batch that fits, on a GPU
# 4 MiB short of the plan at --batch 800 (about 10 MiB of activations and
# 1.6 MiB of device batches, whose samples of 256 features make them show
# in the peak)
"$DDPPREP" synthetic --classes 4 --features 256 --samples 800 --val 0 --seed 3 -o "$T/w.h5" \
  >/dev/null || fail "ddptrain-prep synthetic (256 features)"
wide="--model linear:1024,relu,linear:auto --steps 1 --device cuda --eval-every 0"
run b800 1 "$EMU" "$T/w.h5" $wide --batch 800
fits "--batch 800" "$T/b800.log"
p=$(plan "$T/b800.log") r=$(reserve "$T/b800.log")
mem=$(awk -v p="$p" -v r="$r" 'BEGIN { if (p - r < 8) exit 1; printf "%d\n", p - 4 }') ||
  { cat "$T/b800.log"; fail "--batch 800: plan $p MiB, not 8 MiB above the reserve $r MiB"; }
DDP_EMU_GPU_MEM_MB=$mem "$EMU" "$T/w.h5" $wide --batch 800 >"$T/b.out" 2>"$T/b.err"
ddp_expect_error "$T/b.err" $? 5 "--batch 800 on a $mem MiB GPU" "activations |run with --batch "
n=$(sed -n 's/.*run with --batch \([0-9]*\)$/\1/p' "$T/b.err")
[ -n "$n" ] && [ "$n" -gt 1 ] && [ "$n" -lt 800 ] || { cat "$T/b.err"; fail "no batch named: '$n'"; }
DDP_EMU_GPU_MEM_MB=$mem run "b$n" 1 "$EMU" "$T/w.h5" $wide --batch "$n"
grep -q "^done: 1 steps" "$T/b$n.log" || { cat "$T/b$n.log"; fail "--batch $n: did not train"; }
fits "--batch $n" "$T/b$n.log"
DDP_EMU_GPU_MEM_MB=$mem "$EMU" "$T/w.h5" $wide --batch $((n + 1)) >"$T/b1.out" 2>"$T/b1.err"
ddp_expect_error "$T/b1.err" $? 5 "--batch $((n + 1)) on a $mem MiB GPU" "run with --batch $n"

# (e) cpu: no device plan
run cpu 1 "$DDPTRAIN" "$T/w.h5" $wide --batch 800 --device cpu
grep -q "device/rank" "$T/cpu.log" && { cat "$T/cpu.log"; fail "cpu: a device plan in the table"; }
exit 0
