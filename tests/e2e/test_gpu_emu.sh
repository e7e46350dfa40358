#!/bin/sh
# test_gpu_emu.sh -- the GPU path end to end without a GPU: the trainer with
# the "cuda" compute backend and the "nccl" comm backend built against the
# CPU emulation of CUDA, cuBLAS and NCCL (tests/doubles/train_emu, tests/emu), against
# ddptrain on "cpu":
#  (a) --device cuda and --device cpu train the same loss curve (50 steps, an
#      MLP with BatchNorm and dropout, and a small CNN) at 1 and 2 ranks, each
#      rank on its own emulated GPU (DDP_EMU_GPUS=2), and a residual network
#      (20 steps) at 2;
#  (b) after np=2 the replicas are bit-identical (--check-replicas, which
#      catches one flipped bit), and np=2
#      at batch B follows np=1 at batch 2B;
#  (c) two ranks of a host on one GPU are refused (exit 9);
#  (d) --precision bf16 and tf32 train on cuda close to fp32 (bf16 also a
#      chain of dense layers whose hidden outputs are kept in bf16), and are
#      refused on cpu; convolution nets' activations kept in bf16 give the
#      weights of fp32 ones bit for bit; bf16 at np=2 with --zero 1 trains
#      --zero 0's losses;
#  (e) an NCCL asynchronous error ends the job with one line, no hang, and
#      so does a failed ncclAllReduce or ncclCommInitRank (DDP_EMU_FAIL);
#  (f) an injected CUDA failure ends it with one line naming the call;
#  (j) a collective that never completes on the GPU (the host's wait for
#      the device never returns, DDP_EMU_HANG): the watchdog names the
#      gradient collective queued last and says the ranks wait for their
#      GPUs (exit 10, no hang); and a wait for the GPU with no collective
#      pending: the watchdog names the rank and its GPU (exit 10);
#  (g) this CPU-only ddptrain refuses --device cuda (exit 2) and trains on
#      cpu with --device auto;
#  (h) out of pinned host memory, the loader's batches fall back to malloc
#      with one warning and train the same;
#  (i) the stream orderings: the emulation queues every stream's work and
#      runs it only when something waits for it (DDP_EMU_STREAMS=lazy, its
#      default, so (a)-(h) run that way: a missing wait for an upload or an
#      all-reduce reads stale data); under lazy-first the copy and comm
#      streams run as soon as they may (a copy that does not wait for the
#      compute still reading its buffer overwrites it), here with 4
#      micro-batches a step so the two device batches are each reused
#      within a step; and under sync everything runs when called.  Each
#      trains the cpu curve;
#  (k) the profiler ranges (NVTX, counted by the emulation): each step's
#      forward, backward and optimizer phase and each bucket's all-reduce,
#      every range closed;
#  (l) the host keeps ahead of the GPU: 8 more steps add no host wait that
#      leaves the emulated GPU idle (DDP_EMU_DRAIN_REPORT), np=1 and np=2;
#      with --clip-grad-norm over 2 buckets, one each a step (the norm);
#      the non-finite guard, reading each step's losses one step late,
#      names the step and sample on cuda; --diagnose's step times include
#      each step's own device work;
#  and a --device cuda checkpoint resumes to the same weights as a run
#  without the interruption.
#
# Tolerances (fp32 losses as printed, 6 significant digits): the cuda
# kernels sum in other orders than the cpu backend (block reductions, the
# emulated cuBLAS GEMM, BatchNorm statistics in double), so every step
# differs by a few float32 roundings (~1e-7 relative), which 50 steps of SGD
# with momentum amplify.  A loss within 2e-3 of the cpu loss at every step
# (relative to max(1, |loss|)) is that; a real fault -- a wrong gradient,
# dropout mask, BatchNorm statistic or NCCL datatype, a missing reduction --
# moves the loss by more than 1e-2 within a few steps.  (On the emulation
# the curves measured equal to all 6 digits.)  bf16 GEMM inputs round to 8 significant
# bits (2^-9 relative per input): the first 10 steps stay within 5e-3 of fp32
# (measured 1e-3), after which the perturbed trajectory drifts apart like any
# two runs on 8-sample batches (measured 4e-2 by step 50): within 1e-1 at
# every step, i.e. training, not diverging; and not equal to fp32.
. ./testenv.sh || exit 99
set -u
ddp_tmpdir
EMU="$top_builddir/tests/doubles/train_emu"
export DDP_TEST_TIMEOUT=300
"$DDPPREP" synthetic --classes 4 --features 12 --samples 800 --val 100 --seed 3 -o "$T/d.h5" \
  >/dev/null || fail "ddptrain-prep synthetic"
"$MAKE_DECK" images "$T/img.h5" 512 || fail "make_deck images"
mlp="--model linear:32,bn,relu,dropout:0.1,linear:auto --lr 0.05 --seed 5 --log-every 1 --eval-every 0"
cnn="--model conv:4:3:1:1,bn,relu,maxpool:2,linear:auto --lr 0.05 --seed 5 --log-every 1 --eval-every 0"

# losses FILE: the per-step losses of a run's log, one a line
losses() { sed -n 's/^step \([0-9]*\)\/[0-9]* epoch [0-9]* loss \([^ ]*\).*/\1 \2/p' "$1"; }

# close NAME TOL A B [N]: the loss curves of logs A and B agree within TOL
# (relative to max(1, |loss|)) at every step, or at the first N (both logs
# have 50 steps)
close() {
  losses "$3" >"$T/la"; losses "$4" >"$T/lb"
  [ "$(wc -l <"$T/la")" -eq "${close_steps:-50}" ] && [ "$(wc -l <"$T/lb")" -eq "${close_steps:-50}" ] ||
    { cat "$3" "$4"; fail "$1: not ${close_steps:-50} logged steps"; }
  paste "$T/la" "$T/lb" | awk -v tol="$2" -v name="$1" -v upto="${5:-50}" '
    $1 > upto { next }
    { d = $2 - $4; if (d < 0) d = -d; s = $4 < 0 ? -$4 : $4; if (s < 1) s = 1;
      if (d / s > worst) { worst = d / s; at = $1 } }
    END { printf "%s: largest loss difference %.3g (step %d), tolerance %s\n", name, worst, at, tol;
          exit worst > tol }' || fail "$1: loss curves differ beyond $2"
}

# run NAME NP PROGRAM OPTIONS...: train, the log in $T/NAME.log
run() {
  name=$1 np=$2 prog=$3; shift 3
  mpirun_np "$np" "$prog" "$@" >"$T/$name.log" 2>&1 || { cat "$T/$name.log"; fail "$name failed"; }
}

export DDP_EMU_GPUS=2
# (a) cuda == cpu within tolerance, MLP and CNN, np=1 and np=2
for np in 1 2; do
  run "mlp-cpu-$np" $np "$DDPTRAIN" "$T/d.h5" $mlp --batch 8 --steps 50 --device cpu
  run "mlp-cuda-$np" $np "$EMU" "$T/d.h5" $mlp --batch 8 --steps 50 --device cuda \
    --check-replicas 10 --save "$T/mlp-cuda-$np.h5"
  grep -q "device cuda\|, comm nccl" "$T/mlp-cuda-$np.log" && grep -q "comm nccl" "$T/mlp-cuda-$np.log" ||
    { cat "$T/mlp-cuda-$np.log"; fail "np=$np: not the cuda + nccl path"; }
  close "mlp np=$np cuda vs cpu" 2e-3 "$T/mlp-cuda-$np.log" "$T/mlp-cpu-$np.log"
  run "cnn-cpu-$np" $np "$DDPTRAIN" "$T/img.h5" $cnn --batch 8 --steps 50 --device cpu
  run "cnn-cuda-$np" $np "$EMU" "$T/img.h5" $cnn --batch 8 --steps 50 --device cuda \
    --check-replicas 10
  close "cnn np=$np cuda vs cpu" 2e-3 "$T/cnn-cuda-$np.log" "$T/cnn-cpu-$np.log"
done
# a residual network (the residual add and its backward, a padded max-pool,
# identity and stride-2 projection blocks) on cuda as on cpu, np=2 with
# SyncBatchNorm.  Not resnet18 itself: on these 8x8 images its last stages
# are 1x1 and BatchNorm sees 16 values a channel, where a rounding
# difference flips a ReLU within 3 steps (tests/e2e/test_resnet.sh)
rn="--model conv:8:3:1:1:nobias,bn,relu,maxpool:3:2:1,res(conv:8:3:1:1:nobias,bn,relu,conv:8:3:1:1:nobias,bn),relu,res(conv:16:3:2:1:nobias,bn,relu,conv:16:3:1:1:nobias,bn),relu,gap,linear:auto"
rn="$rn --lr 0.02 --seed 5 --log-every 1 --eval-every 0 --batch 8 --steps 20"
run "resnet-cpu" 2 "$DDPTRAIN" "$T/img.h5" $rn --device cpu
run "resnet-cuda" 2 "$EMU" "$T/img.h5" $rn --device cuda --check-replicas 5
close_steps=20 close "residual network np=2 cuda vs cpu" 2e-3 "$T/resnet-cuda.log" "$T/resnet-cpu.log"
# the start-up table names every rank's GPU
grep -q "gpus         rank 0 on " "$T/mlp-cuda-2.log" && grep -q "rank 1 on " "$T/mlp-cuda-2.log" ||
  { cat "$T/mlp-cuda-2.log"; fail "the start-up table lacks the ranks' GPUs"; }

# (b) np=2 replicas identical (--check-replicas 10 above passed: hashes
# equal every 10 steps; the check sees one flipped bit on the GPU path);
# np=2 batch 8 follows np=1 batch 16
DDP_TEST_TIMEOUT=120 mpirun_np 2 "$EMU" "$T/d.h5" $mlp --batch 8 --steps 50 --device cuda \
  --check-replicas 5 --inject bitflip:1:15 >"$T/flip.out" 2>"$T/flip.err"
ddp_expect_error "$T/flip.err" $? 6 "a flipped bit on the GPU" "replicas diverged after step 15: rank 1's layers.0.weight"
run "mlp-cuda-1-b16" 1 "$EMU" "$T/d.h5" $mlp --batch 16 --steps 50 --device cuda
close "mlp cuda np=2 batch 8 vs np=1 batch 16" 2e-3 "$T/mlp-cuda-2.log" "$T/mlp-cuda-1-b16.log"

# (c) two ranks on one GPU
DDP_EMU_GPUS=1 mpirun_np 2 "$EMU" "$T/d.h5" $mlp --batch 8 --steps 5 --device cuda \
  >"$T/dup.out" 2>"$T/dup.err"
ddp_expect_error "$T/dup.err" $? 9 "two ranks on one GPU" "ranks 0 and 1 of host|both compute on GPU|--gpus-per-task=1"

# --allreduce names an algorithm of the mpi comm backend: with nccl, refused
mpirun_np 2 "$EMU" "$T/d.h5" $mlp --batch 8 --steps 5 --device cuda --allreduce ring \
  >"$T/ar.out" 2>"$T/ar.err"
ddp_expect_error "$T/ar.err" $? 2 "--allreduce ring with nccl" \
  "--allreduce ring: the nccl comm backend chooses its own algorithm"

# (d) bf16 and tf32 (inputs to 10 mantissa bits: closer than bf16's 7): close
# to fp32, not equal; refused on cpu
for pt in "bf16 5e-3" "tf32 1e-3"; do
  set -- $pt
  run "mlp-$1" 1 "$EMU" "$T/d.h5" $mlp --batch 8 --steps 50 --device cuda --precision "$1"
  close "mlp $1 vs fp32, steps 1-10" "$2" "$T/mlp-$1.log" "$T/mlp-cuda-1.log" 10
  close "mlp $1 vs fp32" 1e-1 "$T/mlp-$1.log" "$T/mlp-cuda-1.log"
  losses "$T/mlp-$1.log" | cmp -s - "$T/lb" && fail "$1: the same losses as fp32 ($1 GEMMs not in effect)"
  grep -q "precision    $1" "$T/mlp-$1.log" || fail "$1: not in the start-up table"
  "$EMU" "$T/d.h5" $mlp --steps 5 --device cpu --precision "$1" >"$T/$1.out" 2>"$T/$1.err"
  ddp_expect_error "$T/$1.err" $? 2 "$1 on cpu" "--precision $1 needs --device cuda"
done
# ... bf16 on a chain of dense layers, whose hidden outputs only the next
# dense layer reads and are kept in bf16 (cuda/bf16.h; written by the
# forwards' cuBLASLt matmuls, the fused ReLUs' masks read from them): close
# to fp32 too
# (and with 1032 classes the loss's gradient kept in bf16 for the last
# layer, with its column sums for the bias: cuda/loss.cu, xent_dense)
"$DDPPREP" synthetic --classes 1032 --features 16 --samples 400 --val 0 --seed 3 -o "$T/wide.h5" \
  >/dev/null || fail "ddptrain-prep synthetic (1032 classes)"
chain="--model linear:32,relu,linear:32,relu,linear:auto --lr 0.05 --seed 5 --log-every 1 --eval-every 0"
for deck in d wide; do
  for p in fp32 bf16; do
    run "chain-$deck-$p" 1 "$EMU" "$T/$deck.h5" $chain --batch 8 --steps 30 --device cuda --precision $p
  done
  close_steps=30 close "dense chain bf16 vs fp32 ($deck), steps 1-10" 5e-3 "$T/chain-$deck-bf16.log" \
    "$T/chain-$deck-fp32.log" 10
done
# ... bf16 on convolution nets: a convolution's output (no bias) that only a
# BatchNorm reads, and a BatchNorm's (or its fused ReLU's) that only a
# convolution reads, are kept in bf16 (cuda/act16.h), and so are their
# gradients, written and read as such by cuDNN and the BatchNorm kernels:
# the same weights after 10 steps, bit for bit, as with them in fp32
# (DDP_CUDA_CONV_ACTS=fp32: rounded for and widened after each cuDNN call),
# for the residual network of (a) (a projection block after the ReLU of an
# add: the gradients of its two convolutions for that ReLU's output kept in
# bf16, which the ReLU's backward sums in its mask), for one with an
# identity block after such a ReLU (rnb), and
# for a CNN whose first convolution has a bias (its output kept in bf16
# without it, which the BatchNorm adds as it reads: ddp_cuda_act_bias); in
# effect: fewer widening passes in the model of the last step
# (DDP_CUDA_MODEL; the deck without /val, so that the last step is a
# training one)
h5copy -i "$T/img.h5" -o "$T/imgtr.h5" -s /train -d /train || fail "h5copy /train"
cnnb="--model conv:8:3:1:1,bn,relu,conv:8:3:1:1:nobias,bn,relu,maxpool:2,linear:auto"
cnnb="$cnnb --lr 0.05 --seed 5 --batch 8"
blk="conv:8:3:1:1:nobias,bn,relu,conv:8:3:1:1:nobias,bn"
rnb="--model conv:8:3:1:1:nobias,bn,relu,res($blk),relu,res($blk),relu"
rnb="$rnb,res(conv:16:3:2:1:nobias,bn,relu,conv:16:3:1:1:nobias,bn),relu,gap,linear:auto"
rnb="$rnb --lr 0.02 --seed 5 --batch 8"
for net in rn rnb cnnb; do
  eval "spec=\$$net"
  for a in bf16 fp32; do
    DDP_CUDA_CONV_ACTS=$a DDP_CUDA_MODEL=1 run "acts-$net-$a" 1 "$EMU" "$T/imgtr.h5" $spec --steps 10 \
      --log-every 0 --eval-every 0 --device cuda --precision bf16 --save "$T/acts-$net-$a.h5"
  done
  h5diff -r "$T/acts-$net-bf16.h5" "$T/acts-$net-fp32.h5" /model /model >"$T/acts-$net.diff" 2>&1 ||
    { head -n 20 "$T/acts-$net.diff"; fail "$net: bf16 activations change the weights"; }
  widens() { awk '$1 ~ /^widen_kernel/ { c += $2 } END { print c + 0 }' "$1"; }
  wb=$(widens "$T/acts-$net-bf16.log") wf=$(widens "$T/acts-$net-fp32.log")
  [ "$wb" -lt "$wf" ] || { cat "$T/acts-$net-bf16.log"
    fail "$net: $wb widening passes with bf16 activations, $wf without"; }
done
# ... a BatchNorm whose output (or its fused ReLU's) only a max pooling
# reads runs inside the pooling's pass, forward and backward (cuda/bn.cu,
# compute.h bn_maxpool): the same losses, evaluation and weights after 12
# steps, bit for bit, as with the layers alone (DDP_CUDA_BN_MAXPOOL=0), in
# fp32 and in bf16 (where the pooled outputs the convolutions read are kept
# in bf16), over 2x2 windows after a ReLU and ResNet's 3x3 stride 2 pad 1
# without one; in effect no max pooling kernel of its own in the model of
# the last training step
cnnp="--model conv:8:3:1:1,bn,relu,maxpool:2,conv:8:3:1:1:nobias,bn,maxpool:3:2:1,conv:8:3:1:1,bn"
cnnp="$cnnp,relu,gap,linear:auto --lr 0.05 --seed 5 --batch 8 --steps 12 --eval-every 5 --log-every 1"
for p in fp32 bf16; do
  for f in 1 0; do
    DDP_CUDA_BN_MAXPOOL=$f DDP_CUDA_MODEL=1 run "pool-$p-$f" 1 "$EMU" "$T/img.h5" $cnnp --device cuda \
      --precision $p --save "$T/pool-$p-$f.h5"
  done
  h5diff -r "$T/pool-$p-1.h5" "$T/pool-$p-0.h5" /model /model >"$T/pool-$p.diff" 2>&1 ||
    { head -n 20 "$T/pool-$p.diff"; fail "$p: BatchNorm + max pooling in one pass change the weights"; }
  for f in 1 0; do grep -E '^(step|eval) ' "$T/pool-$p-$f.log" | sed 's/ lr .*//' >"$T/pool-$p-$f.curve"; done
  grep -q '^eval ' "$T/pool-$p-1.curve" && cmp "$T/pool-$p-1.curve" "$T/pool-$p-0.curve" ||
    fail "$p: BatchNorm + max pooling in one pass change the losses or the evaluation"
  pools() { awk '$1 ~ /^maxpool_/ { c += $2 } END { print c + 0 }' "$1"; }
  fused() { awk '$1 ~ /^bn_maxpool_/ || $1 ~ /<pooled/ { c += $2 } END { print c + 0 }' "$1"; }
  [ "$(pools "$T/pool-$p-1.log")" -eq 0 ] && [ "$(fused "$T/pool-$p-1.log")" -eq 6 ] &&
    [ "$(pools "$T/pool-$p-0.log")" -eq 4 ] && [ "$(fused "$T/pool-$p-0.log")" -eq 0 ] ||
    { cat "$T/pool-$p-1.log"; fail "$p: the max poolings do not run inside their BatchNorms"; }
done
# ... bf16 at np=2 under --zero 1: the parameter all-gather rewrites what the
# optimizer's bf16 copy of the parameters holds (cuda/bf16.h, the mirror,
# kept where every weight's copy is aligned: 8 classes here, so the last
# layer's bias shifts nothing), which the trainer reports; the same losses
# as --zero 0, bit for bit (a stale copy would change them, and the
# emulation stops at its GEMM)
"$DDPPREP" synthetic --classes 8 --features 16 --samples 800 --seed 3 -o "$T/d8.h5" >/dev/null ||
  fail "ddptrain-prep synthetic (8 classes)"
for z in 0 1; do
  run "bf16-z$z" 2 "$EMU" "$T/d8.h5" $mlp --batch 8 --steps 20 --device cuda --precision bf16 \
    --zero $z --optimizer adamw --lr 1e-3
done
close_steps=20 close "bf16 np=2 --zero 1 vs --zero 0" 0 "$T/bf16-z1.log" "$T/bf16-z0.log" 20

# (k) profiler ranges (NVTX; the emulation counts them, DDP_EMU_NVTX_REPORT):
# per rank, each step's backward phase and every bucket's all-reduce
# (several buckets here) once a step, forward and optimizer at least once
# (the next step's upload starts in a forward phase inside the optimizer's),
# each range closed
DDP_EMU_NVTX_REPORT=1 run "mlp-nvtx" 2 "$EMU" "$T/d.h5" $mlp --batch 8 --steps 20 --device cuda \
  --bucket-cap-mb 0.002 --first-bucket-mb 0.002
grep 'ddp_emu: nvtx range' "$T/mlp-nvtx.log" >"$T/nvtx" || { cat "$T/mlp-nvtx.log"; fail "nvtx: no report"; }
sed 's/.*range "\(.*\)" started \([0-9]*\) ended \([0-9]*\) (pid.*/\1|\2|\3/' "$T/nvtx" >"$T/nvtx.t"
awk -F'|' '$2 != $3 { print "nvtx: range \"" $1 "\" started " $2 " times, ended " $3; bad = 1 }
  $1 == "ddptrain backward" && $2 == 20 { phases++ }
  $1 ~ /^ddptrain (forward|optimizer)$/ && $2 >= 20 { phases++ }
  $1 ~ /^ddptrain all-reduce bucket [0-9]+$/ && $2 == 20 { buckets++ }
  END { if (phases != 6) { print "nvtx: " phases + 0 " of 6 phase ranges (3 per rank) opened 20 times or more"; bad = 1 }
        if (buckets < 4) { print "nvtx: " buckets + 0 " bucket ranges opened 20 times, not >= 2 per rank"; bad = 1 }
        exit bad }' "$T/nvtx.t" || { cat "$T/nvtx"; fail "nvtx ranges"; }

# (e) an NCCL asynchronous error: one line, a non-zero exit, no hang
DDP_EMU_NCCL_ASYNC_ERROR=20 DDP_TEST_TIMEOUT=120 mpirun_np 2 "$EMU" "$T/d.h5" $mlp --batch 8 \
  --steps 50 --device cuda >"$T/async.out" 2>"$T/async.err"
ddp_expect_error "$T/async.err" $? 7 "NCCL async error" "NCCL reported an asynchronous error|ncclCommGetAsyncError"

# ... and a failed NCCL call is named with NCCL's own last error
DDP_EMU_FAIL=ncclAllReduce:30 DDP_TEST_TIMEOUT=120 mpirun_np 2 "$EMU" "$T/d.h5" $mlp --batch 8 \
  --steps 50 --device cuda >"$T/nf.out" 2>"$T/nf.err"
ddp_expect_error "$T/nf.err" $? 7 "failed ncclAllReduce" "ncclAllReduce failed|comm_nccl.c:"
DDP_EMU_FAIL=ncclCommInitRank:1 DDP_TEST_TIMEOUT=120 mpirun_np 2 "$EMU" "$T/d.h5" $mlp --batch 8 \
  --steps 5 --device cuda >"$T/ni.out" 2>"$T/ni.err"
ddp_expect_error "$T/ni.err" $? 7 "failed ncclCommInitRank" "ncclCommInitRank("

# (j) a hang on the GPU: every rank's 172nd cudaEventSynchronize never
# returns: step 86's wait for its losses (the non-finite guard's verdict,
# taken before the progress line of --log-every 1), after its buckets were
# queued.  Two a step: the batch's upload, then the losses
DDP_EMU_HANG=cudaEventSynchronize:172 DDP_TEST_TIMEOUT=120 mpirun_np 2 "$EMU" "$T/d.h5" $mlp \
  --batch 8 --steps 200 --device cuda --timeout 3 >"$T/hang.out" 2>"$T/hang.err"
ddp_expect_error "$T/hang.err" $? 10 "a collective hanging on the GPU" \
  "watchdog: gradient-bucket|has not completed in|every rank started it|waits for its GPU"
# ... and one with no collective pending: the 199th cudaStreamSynchronize,
# the progress line's read of step 169's loss sums after the guard's wait
# saw the step through (one a step, after start-up's, one per device buffer
# (zero-filled): a model that allocates another buffer moves the index): a
# kernel that never ends
DDP_EMU_HANG=cudaStreamSynchronize:199 DDP_TEST_TIMEOUT=120 mpirun_np 2 "$EMU" "$T/d.h5" $mlp \
  --batch 8 --steps 200 --device cuda --timeout 3 >"$T/hang2.out" 2>"$T/hang2.err"
ddp_expect_error "$T/hang2.err" $? 10 "a GPU hanging outside any collective" \
  "for its GPU (--timeout 3)|with no collective pending|waiting for their GPUs (2 of 2)|look at the GPU"

# (f) an injected CUDA failure names the call
DDP_EMU_FAIL=cudaMalloc:12 "$EMU" "$T/d.h5" $mlp --batch 8 --steps 5 --device cuda \
  >"$T/f1.out" 2>"$T/f1.err"
rc=$?
[ $rc -ne 0 ] || fail "cudaMalloc failure: exit 0"
ddp_expect_error "$T/f1.err" $rc $rc "injected cudaMalloc failure" "cudaMalloc"
DDP_EMU_FAIL=kernel:200 "$EMU" "$T/d.h5" $mlp --batch 8 --steps 20 --device cuda \
  >"$T/f2.out" 2>"$T/f2.err"
ddp_expect_error "$T/f2.err" $? 9 "injected kernel failure" "launch failure|.cu:"

# (h) pinned host memory runs out (the 2nd cudaMallocHost: the loader's
# first batch): that batch is in malloc'd memory, one warning, the same
# training
DDP_EMU_FAIL=cudaMallocHost:2 "$EMU" "$T/d.h5" $mlp --batch 8 --steps 50 --device cuda \
  >"$T/pin.log" 2>&1 || { cat "$T/pin.log"; fail "pinned memory out: the run failed"; }
[ "$(grep -c "pageable memory" "$T/pin.log")" = 1 ] ||
  { cat "$T/pin.log"; fail "pinned memory out: not one warning"; }
close "pageable fallback vs pinned" 0 "$T/pin.log" "$T/mlp-cuda-1.log"

# (i) the stream orderings, with gradient accumulation (4 micro-batches of 8),
# at np=1 and np=2 (at np=2 SyncBatchNorm's all-reduce in every forward
# runs the compute stream's queue up to it, so a write-after-read of a
# batch shows at np=1)
for np in 1 2; do
  run "acc-cpu-$np" $np "$DDPTRAIN" "$T/d.h5" $mlp --batch 8 --accum 4 --steps 50 --device cpu
  for order in lazy lazy-first sync; do
    export DDP_EMU_STREAMS=$order
    run "acc-$order-$np" $np "$EMU" "$T/d.h5" $mlp --batch 8 --accum 4 --steps 50 \
      --device cuda --check-replicas 10
    close "np=$np accum 4, streams $order, cuda vs cpu" 2e-3 "$T/acc-$order-$np.log" \
      "$T/acc-cpu-$np.log"
  done
  unset DDP_EMU_STREAMS
done

# (g) this ddptrain has no cuda backend
"$DDPTRAIN" "$T/d.h5" $mlp --steps 3 --device cuda >"$T/g.out" 2>"$T/g.err"
ddp_expect_error "$T/g.err" $? 2 "--device cuda without the backend" "built without the cuda backend|--device cpu"
run "auto" 1 "$DDPTRAIN" "$T/d.h5" $mlp --steps 3 --device auto
grep -q "device cpu" "$T/auto.log" || { cat "$T/auto.log"; fail "--device auto: not on cpu"; }

# (l) the host keeps ahead of the GPU: a step queues its work and the next
# one starts without waiting for it (the non-finite guard reads each step's
# losses one step late), so 8 more steps add no host wait that leaves the
# emulated GPU idle (DDP_EMU_DRAIN_REPORT), at np=1 and at np=2 with
# SyncBatchNorm; and the guard, one step late, still names the step and the
# sample whose input is NaN
drains() { sed -n 's/^ddp_emu: host waits that left the device idle: \([0-9]*\).*/\1/p' "$1" | sort -u; }
export DDP_EMU_DRAIN_REPORT=1
for np in 1 2; do
  for n in 4 12; do
    run "ahead-$np-$n" $np "$EMU" "$T/d.h5" $mlp --batch 8 --steps $n --device cuda --log-every 0
  done
  a=$(drains "$T/ahead-$np-4.log") b=$(drains "$T/ahead-$np-12.log")
  # (start-up's waits are counted: a counter that counts nothing fails here)
  [ -n "$a" ] && [ "$(echo "$a" | head -n 1)" -gt 0 ] && [ "$a" = "$b" ] ||
    { cat "$T/ahead-$np-12.log"; fail "np=$np: 8 more steps left the GPU idle $a -> $b times"; }
  echo "np=$np: host waits that left the GPU idle, 4 steps and 12: $a and $b"
done
# --clip-grad-norm needs the gradient norm on the host before the optimizer:
# one wait a step, however many buckets (2 here) its pieces come from
# (sumsq_many), not one a piece
for n in 4 12; do
  run "clip-$n" 1 "$EMU" "$T/d.h5" $mlp --batch 8 --steps $n --device cuda --log-every 0 \
    --clip-grad-norm 1 --bucket-cap-mb 0.001 --first-bucket-mb 0.001
done
grep -q "buckets      2:" "$T/clip-4.log" || { cat "$T/clip-4.log"; fail "clip: not 2 buckets"; }
a=$(drains "$T/clip-4.log") b=$(drains "$T/clip-12.log")
[ -n "$a" ] && [ -n "$b" ] && [ $((b - a)) -eq 8 ] ||
  { cat "$T/clip-12.log"; fail "--clip-grad-norm: 8 more steps left the GPU idle $a -> $b times, not 8 more"; }
unset DDP_EMU_DRAIN_REPORT
"$EMU" "$T/d.h5" $mlp --batch 8 --steps 10 --device cuda --log-every 0 --inject nan:0:5 \
  >"$T/nan.out" 2>"$T/nan.err"
ddp_expect_error "$T/nan.err" $? 8 "--inject nan on cuda" "the training loss is nan at step 5 on this rank"
grep -q "holds a non-finite input value (nan at value 0 of 12)" "$T/nan.err" ||
  { cat "$T/nan.err"; fail "--inject nan on cuda: the sample's input is not named"; }

# ... and --diagnose waits for each step's device work before its clock
# stops (the emulated kernels run while the host waits): the normal mode's
# step is many times its forward and backward phases, which only queue work
"$EMU" "$T/d.h5" --model linear:256,relu,linear:256,relu,linear:auto --batch 64 --device cuda \
  --diagnose >"$T/diag.out" 2>&1 || { cat "$T/diag.out"; fail "--diagnose on cuda failed"; }
awk '$1 == 0 && $2 == "normal" { found = 1; if (!($3 > 5 * ($5 + $6))) bad = 1;
       printf "--diagnose on cuda: step %s ms, forward %s, backward %s\n", $3, $5, $6 }
     END { exit !found || bad }' "$T/diag.out" ||
  { cat "$T/diag.out"; fail "--diagnose on cuda: the step time leaves out its device work"; }

# checkpoints on cuda: 30 steps straight == 15, then resumed to 30 (the
# weights go through download and upload)
run "ck-full" 1 "$EMU" "$T/d.h5" $mlp --batch 8 --steps 30 --device cuda --save "$T/full.h5"
run "ck-a" 1 "$EMU" "$T/d.h5" $mlp --batch 8 --steps 15 --device cuda --ckpt-dir "$T/ck"
run "ck-b" 1 "$EMU" "$T/d.h5" $mlp --batch 8 --steps 30 --device cuda --ckpt-dir "$T/ck" \
  --resume auto --save "$T/resumed.h5"
grep -q "resume       .*step 15" "$T/ck-b.log" || { cat "$T/ck-b.log"; fail "did not resume at step 15"; }
"$WEIGHTS_CMP" "$T/resumed.h5" "$T/full.h5" 0 >"$T/cmp" ||
  { cat "$T/cmp"; fail "resumed cuda run: other weights than the uninterrupted one"; }
exit 0
