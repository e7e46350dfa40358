#!/bin/sh
# test_gpu_model.sh -- the step model of the trainer's real step (DDP_CUDA_MODEL)
# and the cost check on the trainer's every launch, on the CPU emulation of
# CUDA (tests/doubles/train_emu; builds without CUDA):
#   - DDP_CUDA_MODEL=1, 5 steps of an MLP evaluated after each: the model of
#     training step 4 on stderr at exit, its GEMMs those of the step (2
#     forward, each a cuBLASLt matmul with the bias in its epilogue, 2
#     weight gradients, 1 input gradient: the first layer's is not
#     computed; none of the evaluation's),
#     dropout and BatchNorm rows, every launch declared; with --accum 2
#     and --log-every 1 the step's two micro-batches and one SGD (the next
#     batch's upload inside its optimizer phase does not end it); 1 step:
#     the line saying no step completed, and no model;
#   - DDP_EMU_COST_CHECK=1 (emu_cost.cc: every kernel's and cuBLAS call's
#     declared bytes against the device pages it touches, abort on a wrong
#     or missing one): the trainer's steps with dropout, GELU, BatchNorm,
#     residual blocks, max and global average pooling, AdamW and SGD, bf16,
#     --accum, --clip-grad-norm, the evaluation and the non-finite guard run
#     to the end;
#   - DDP_EMU_DRY=1: ResNet-18's model, its convolutions (cuDNN's three
#     calls; with DDP_CUDA_CONV=im2col, im2col and bf16 GEMMs) in the
#     table, with no kernel run, each block's last BatchNorm
#     applied by the block's add (no add pass in the forward); a CNN's
#     device plan without its 2x2 max poolings' argmaxes, and its pooled
#     features kept in bf16 for its dense layer;
#   - --precision bf16: a value used by two GEMMs is rounded once (the
#     forward's weight and input kept for the backward, the output gradient
#     shared by the backward's two GEMMs, rounded in the pass that masks it
#     for a fused ReLU and sums the bias gradient), and a weight not at all
#     by the forward (the optimizer writes its bf16 copy), nor a hidden
#     layer's output (kept in bf16), counted in the model's table; with
#     1032 classes the loss's gradient is written in bf16 for the last layer.
. ./testenv.sh || exit 99
set -u
ddp_tmpdir
EMU="$top_builddir/tests/doubles/train_emu"
[ -x "$EMU" ] || { echo "test_gpu_model.sh: $EMU is not built" >&2; exit 99; }
export DDP_TEST_TIMEOUT=300
"$DDPPREP" synthetic --classes 4 --features 64 --samples 800 --val 100 --seed 3 -o "$T/d.h5" \
  >/dev/null || fail "ddptrain-prep synthetic"
"$MAKE_DECK" images "$T/img.h5" 256 || fail "make_deck images"
# one step an epoch: an evaluation (2 batches of the 100) after every step
"$DDPPREP" synthetic --classes 4 --features 64 --samples 64 --val 100 --seed 4 -o "$T/e.h5" \
  >/dev/null || fail "ddptrain-prep synthetic (64 samples)"
mlp="--model linear:256,bn,relu,dropout:0.1,linear:auto --batch 64 --lr 0.05 --seed 5"

# (a) the model of the last complete step (the evaluation that follows it,
# 2 batches, is not part of it)
DDP_CUDA_MODEL=1 "$EMU" "$T/e.h5" $mlp --steps 5 --eval-every 1 --device cuda >"$T/a.out" 2>"$T/a.err" ||
  { cat "$T/a.out" "$T/a.err"; fail "DDP_CUDA_MODEL=1: the run failed"; }
[ "$(grep -c '^eval ' "$T/a.out")" -ge 4 ] || { cat "$T/a.out"; fail "not an evaluation after every step"; }
grep -q "^# model of training step 4 of this process (DDP_CUDA_MODEL) on an H200" "$T/a.err" ||
  { cat "$T/a.err"; fail "DDP_CUDA_MODEL=1: no model of step 4 on stderr"; }
grep -q "^# modeled step: [0-9.]* ms, [0-9]* launches" "$T/a.err" || { cat "$T/a.err"; fail "no modeled step line"; }
grep -q "WARNING" "$T/a.err" && { cat "$T/a.err"; fail "an undeclared launch in the trainer's step"; }
calls() { awk -v k="$1" '$1 == k { print $2 }' "$T/a.err"; }
[ "$(calls cublasSgemm)" = 3 ] && [ "$(calls cublasLtMatmul)" = 2 ] ||
  { cat "$T/a.err"; fail "the step's GEMMs: $(calls cublasSgemm) and $(calls cublasLtMatmul) forwards, expected 3 and 2"; }
[ -z "$(calls 'bias_act_kernel<uint32_t>')" ] || { cat "$T/a.err"; fail "a pass adding the bias beside the forward's matmul"; }
[ "$(calls dropout_k)" = 2 ] && [ "$(calls bn1d_stats_kernel)" = 1 ] && [ "$(calls sgd_mom_k)" = 1 ] ||
  { cat "$T/a.err"; fail "the step's dropout, BatchNorm or SGD launches are not 2, 1 and 1"; }
# a step is all of its micro-batches (--accum 2: twice the GEMMs, one
# SGD), and the next step's batch, read and uploaded inside its optimizer
# phase (--log-every 1), does not cut it in two
DDP_CUDA_MODEL=1 "$EMU" "$T/d.h5" $mlp --steps 4 --accum 2 --log-every 1 --eval-every 0 \
  --device cuda >"$T/a2.out" 2>"$T/a2.err" || { cat "$T/a2.out" "$T/a2.err"; fail "DDP_CUDA_MODEL=1 --accum 2 failed"; }
calls2() { awk -v k="$1" '$1 == k { print $2 }' "$T/a2.err"; }
[ "$(calls2 cublasSgemm)" = 6 ] && [ "$(calls2 cublasLtMatmul)" = 4 ] && [ "$(calls2 sgd_mom_k)" = 1 ] ||
  { cat "$T/a2.err"; fail "--accum 2 --log-every 1: the modeled step is not two micro-batches and one SGD"; }
DDP_CUDA_MODEL=1 "$EMU" "$T/d.h5" $mlp --steps 1 --eval-every 0 --device cuda >"$T/b.out" 2>"$T/b.err" ||
  { cat "$T/b.out" "$T/b.err"; fail "DDP_CUDA_MODEL=1 --steps 1 failed"; }
grep -q "^# DDP_CUDA_MODEL: no training step completed" "$T/b.err" && ! grep -q "^# modeled step" "$T/b.err" ||
  { cat "$T/b.err"; fail "--steps 1: not the no-step line"; }

# (b) the cost check on every launch of the trainer's steps and evaluation
export DDP_EMU_COST_CHECK=1 DDP_EMU_STREAMS=sync
"$EMU" "$T/d.h5" --model linear:256,bn,gelu,dropout:0.1,linear:256,relu,linear:auto --batch 64 \
  --optimizer adamw --lr 1e-3 --steps 4 --accum 2 --clip-grad-norm 1 --precision bf16 \
  --eval-every 2 --device cuda >"$T/c1.out" 2>&1 || { cat "$T/c1.out"; fail "cost check: the MLP's steps"; }
"$EMU" "$T/img.h5" --model "conv:8:3:1:1:nobias,bn,relu,maxpool:2,res(conv:8:3:1:1:nobias,bn,relu,conv:8:3:1:1:nobias,bn),relu,res(conv:16:3:2:1:nobias,bn,relu,conv:16:3:1:1:nobias,bn),relu,gap,linear:auto" \
  --batch 32 --lr 0.05 --momentum 0.9 --steps 3 --eval-every 0 --device cuda >"$T/c2.out" 2>&1 &&
"$EMU" "$T/img.h5" --model resnet18 --batch 8 --precision bf16 --steps 2 --eval-every 0 \
  --device cuda >>"$T/c2.out" 2>&1 ||
  { cat "$T/c2.out"; fail "cost check: the residual CNN's and ResNet-18's (bf16) steps"; }
unset DDP_EMU_COST_CHECK DDP_EMU_STREAMS

# (c) the dry run: ResNet-18's model at a real batch, nothing computed
DDP_EMU_DRY=1 DDP_CUDA_MODEL=1 "$EMU" "$T/img.h5" --model resnet18 --batch 128 --steps 3 \
  --precision bf16 --eval-every 0 --device cuda >"$T/d.out" 2>"$T/d.err" ||
  { cat "$T/d.out" "$T/d.err"; fail "DDP_EMU_DRY=1: ResNet-18 failed"; }
for k in cudnnConvolutionForward cudnnConvolutionBackwardData cudnnConvolutionBackwardFilter \
         widen_kernel cublasGemmEx to_bf16_kernel bn_fwd_kernel bn_maxpool_fwd_kernel add_k; do
  grep -q "^$k" "$T/d.err" || { cat "$T/d.err"; fail "ResNet-18's model has no $k row"; }
done
! grep -q "^im2col" "$T/d.err" || { cat "$T/d.err"; fail "ResNet-18's model has im2col rows beside cuDNN"; }
DDP_CUDA_CONV=im2col DDP_EMU_DRY=1 DDP_CUDA_MODEL=1 "$EMU" "$T/img.h5" --model resnet18 --batch 128 \
  --steps 3 --precision bf16 --eval-every 0 --device cuda >"$T/d2.out" 2>"$T/d2.err" ||
  { cat "$T/d2.out" "$T/d2.err"; fail "DDP_CUDA_CONV=im2col DDP_EMU_DRY=1: ResNet-18 failed"; }
grep -q "^im2col_bf16_kernel" "$T/d2.err" && ! grep -q "^cudnn" "$T/d2.err" &&
  grep -q "no cuDNN (im2col convolutions)" "$T/d2.out" ||
  { cat "$T/d2.out" "$T/d2.err"; fail "DDP_CUDA_CONV=im2col: ResNet-18's model not im2col's"; }
# ... its 20 BatchNorms' statistics combined and their parameters computed
# in one launch each (bn_stats_finalize, no SyncBatchNorm between: the 5 on
# planes of more than one cell here; the 15 on 1x1 planes, of 8x8 images,
# take BatchNorm1d's statistics kernel, then the parameters) and applied
# once each, the 8 blocks' last ones by the
# block's add (fuse_bn_adds_), the stem's by its max pooling
# (fuse_bn_pools_: no max pooling kernel of its own either way, and the
# device plan 0.5 MiB less, the stem BatchNorm's output of 128 x 64 x 4 x 4
# floats, than with the layers alone, DDP_CUDA_BN_MAXPOOL=0): no add in the
# forward; the ReLU after each
# add runs in it forward, alone backward (8), where 7 of them (the blocks'
# outputs the next block reads) sum their two gradients in the mask
# (sums_in_relu_): 1 add left in the backward (the stem's max-pool output);
# the gradients the convolutions compute for those 7 ReLUs' outputs are
# kept in bf16 as cuDNN writes them, which the ReLUs' backward reads: 1
# widening pass left (layer1.0's first convolution's, for the max pooling)
dcalls() { awk -v k="$1" 'index($1, k) == 1 { print $2 }' "$T/d.err"; }
[ "$(dcalls widen_kernel)" = 1 ] ||
  { cat "$T/d.err"; fail "ResNet-18's step: $(dcalls widen_kernel) widening passes, expected 1 (the convolutions' gradients for the blocks' inputs kept in bf16)"; }
# ... and the blocks' outputs (and the stem's max-pool output), fp32 for
# the shortcuts, have a bf16 copy their writer (the block's add, the
# pooling) keeps beside them, which the next block's convolutions take
# (compute.h act_copy16): 2 rounding passes left, the input batch's for the
# stem convolution and the pooled features' for the last dense layer
[ "$(dcalls to_bf16_kernel)" = 2 ] ||
  { cat "$T/d.err"; fail "ResNet-18's step: $(dcalls to_bf16_kernel) rounding passes, expected 2 (the blocks' inputs rounded by their writers)"; }
[ "$(dcalls bn_fwd_kernel)" = 19 ] && [ "$(dcalls bn_maxpool_fwd_kernel)" = 1 ] &&
  [ "$(dcalls bn_stats_finalize_kernel)" = 5 ] && [ -z "$(dcalls bn_stats_combine_kernel)" ] &&
  [ "$(dcalls bn_finalize_kernel)" = "$(dcalls bn1d_stats_kernel)" ] &&
  [ "$(dcalls add_k)" = 1 ] && [ "$(dcalls relu_bwd_k)" = 8 ] && [ -z "$(dcalls maxpool_)" ] ||
  { cat "$T/d.err"; fail "ResNet-18's step: $(dcalls bn_stats_finalize_kernel) statistics-and-parameters launches (expected 5, no bn_stats_combine_kernel, one bn_finalize_kernel per bn1d_stats_kernel), $(dcalls bn_fwd_kernel) BatchNorm passes, $(dcalls bn_maxpool_fwd_kernel) pooled ones, $(dcalls add_k) adds, $(dcalls relu_bwd_k) ReLU backward passes and max pooling rows '$(dcalls maxpool_)', expected 19, 1, 1, 8 and none"; }
DDP_CUDA_BN_MAXPOOL=0 DDP_EMU_DRY=1 "$EMU" "$T/img.h5" --model resnet18 --batch 128 --steps 1 \
  --precision bf16 --eval-every 0 --device cuda >"$T/d0.out" 2>&1 ||
  { cat "$T/d0.out"; fail "DDP_CUDA_BN_MAXPOOL=0 DDP_EMU_DRY=1: ResNet-18 failed"; }
acts() { sed -n 's/^  device\/rank .* activations \([0-9.]*\),.*/\1/p' "$1"; }
awk -v a="$(acts "$T/d.out")" -v b="$(acts "$T/d0.out")" 'BEGIN { d = b - a; exit !(a != "" && d > 0.45 && d < 0.55) }' ||
  { grep "device/rank" "$T/d.out" "$T/d0.out"; fail "ResNet-18's device plan: activations $(acts "$T/d.out") MiB with the stem's BatchNorm in its max pooling, $(acts "$T/d0.out") without; expected 0.5 MiB less"; }
# ... and a CNN's 2x2 poolings, whose windows do not overlap, keep no argmax
# (the backward finds each window's maximum again): at batch 1024 on 1x8x8
# images, the two BatchNorms' outputs (1024 x 8 x 8 x 8 and 1024 x 16 x 4 x
# 4 floats, 3 MiB) and the two argmaxes (0.75 MiB) less than alone; 3 MiB
# less, were the argmaxes kept
"$MAKE_DECK" images "$T/img1k.h5" 1024 || fail "make_deck images (1024)"
cnn="conv:8:3:1:1,bn,relu,maxpool:2,conv:16:3:1:1,bn,relu,maxpool:2,linear:auto"
for f in 1 0; do
  DDP_CUDA_BN_MAXPOOL=$f DDP_CUDA_MODEL=1 DDP_EMU_DRY=1 "$EMU" "$T/img1k.h5" --model "$cnn" \
    --batch 1024 --steps 2 --precision bf16 --eval-every 0 --device cuda >"$T/p$f.out" 2>&1 ||
    { cat "$T/p$f.out"; fail "DDP_CUDA_BN_MAXPOOL=$f DDP_EMU_DRY=1: the CNN failed"; }
done
# ... whose last pooling's output, read by the dense layer alone, is kept in
# bf16 as that layer's GEMMs round it (model_out_bf16): the step's rounding
# passes move the input batch (1024 x 64 values, 0.4 MB read and written)
# and the small weights, not the pooled features too (1024 x 256: 1.5 MB)
rmb=$(awk '$1 == "to_bf16_kernel" { print $4 }' "$T/p1.out")
awk -v m="$rmb" 'BEGIN { exit !(m != "" && m <= 0.5) }' ||
  { cat "$T/p1.out"; fail "the CNN's step: its rounding passes move $rmb MB, expected at most 0.5 (the pooled features kept in bf16 for the dense layer)"; }
awk -v a="$(acts "$T/p1.out")" -v b="$(acts "$T/p0.out")" 'BEGIN { d = b - a; exit !(a != "" && d > 3.6 && d < 3.9) }' ||
  { grep "device/rank" "$T/p1.out" "$T/p0.out"; fail "the CNN's device plan: activations $(acts "$T/p1.out") MiB with its BatchNorms in their 2x2 max poolings, $(acts "$T/p0.out") without; expected 3.75 MiB less (no argmax kept)"; }
# (d) bf16: each value rounded once (cuda/bf16.h): a step of 3 dense layers
# rounds the first layer's input in its forward (1 to_bf16_kernel): the
# hidden layers' outputs, which only the next dense layer reads, are kept in
# bf16, written so by the forwards' cuBLASLt matmuls (the bias and the ReLU
# in their epilogue), and the weights' copies are the parameters' mirror,
# which the optimizer writes as it updates them, kept where every weight's
# copy is aligned, which the layout makes so: with 4 classes too, whose last
# bias of 4 values the bucket places after the weights (a forward that
# rounded its weight again would make 4); each layer's output gradient is rounded once in its
# backward, in the pass that also sums the bias gradient: masked by the
# fused ReLU in the 2 hidden layers (from their bf16 outputs), as it is in
# the last; 8 GEMMs, the 3 forwards cuBLASLt matmuls (a backward that
# rounded its weight and input again would make more roundings; a ReLU left
# unfused, an output kept in fp32, or the output gradient rounded by a pass
# of its own, shows as other rows)
"$DDPPREP" synthetic --classes 8 --features 64 --samples 800 --seed 3 -o "$T/d8.h5" >/dev/null ||
  fail "ddptrain-prep synthetic (8 classes)"
bf16mlp="--model linear:256,relu,linear:256,relu,linear:auto --batch 64 --optimizer adamw --lr 1e-3
  --steps 3 --precision bf16 --eval-every 0 --device cuda"
DDP_CUDA_MODEL=1 "$EMU" "$T/d8.h5" $bf16mlp >"$T/e.out" 2>"$T/e.err" ||
  { cat "$T/e.out" "$T/e.err"; fail "DDP_CUDA_MODEL=1: the bf16 MLP failed"; }
ecalls() { awk -v k="$1" '$1 == k { print $2 }' "$T/e.err"; }
[ "$(ecalls cublasGemmEx)" = 5 ] && [ "$(ecalls cublasLtMatmul)" = 3 ] && [ "$(ecalls to_bf16_kernel)" = 1 ] &&
  [ "$(ecalls 'dy_pass_kernel<kPassMask16Bf16>')" = 2 ] && [ "$(ecalls 'dy_pass_kernel<kPassBf16>')" = 1 ] ||
  { cat "$T/e.err"; fail "bf16 MLP step: $(ecalls cublasGemmEx) GEMMs and $(ecalls cublasLtMatmul) forwards, $(ecalls to_bf16_kernel) roundings, $(ecalls 'dy_pass_kernel<kPassMask16Bf16>') masked and $(ecalls 'dy_pass_kernel<kPassBf16>') plain gradient passes, expected 5 and 3, 1, 2 and 1"; }
for k in relu_fwd_k relu_bwd_k; do
  [ -z "$(ecalls $k)" ] || { cat "$T/e.err"; fail "bf16 MLP step: a $k row (a ReLU not fused)"; }
done
[ -z "$(ecalls 'bias_act_kernel<uint32_t>')" ] ||
  { cat "$T/e.err"; fail "bf16 MLP step: $(ecalls 'bias_act_kernel<uint32_t>') passes adding the bias, expected none (the matmuls' epilogue)"; }
DDP_CUDA_MODEL=1 "$EMU" "$T/d.h5" $bf16mlp >"$T/e4.out" 2>"$T/e4.err" ||
  { cat "$T/e4.out" "$T/e4.err"; fail "DDP_CUDA_MODEL=1: the bf16 MLP (4 classes) failed"; }
n4=$(awk '$1 == "to_bf16_kernel" { print $2 }' "$T/e4.err")
[ "$n4" = 1 ] || { cat "$T/e4.err"; fail "bf16 MLP step, 4 classes: $n4 roundings, expected 1 (the weights aligned, the mirror kept)"; }
# ... with 1032 classes the loss keeps its gradient in bf16 for the last
# layer (xent_dense_k) and that layer's bias gradient adds the loss's
# column sums (cols_sum_kernel): no gradient pass of its own
"$DDPPREP" synthetic --classes 1032 --features 64 --samples 400 --val 0 --seed 3 -o "$T/wide.h5" \
  >/dev/null || fail "ddptrain-prep synthetic (1032 classes)"
DDP_CUDA_MODEL=1 "$EMU" "$T/wide.h5" $bf16mlp >"$T/w.out" 2>"$T/w.err" ||
  { cat "$T/w.out" "$T/w.err"; fail "DDP_CUDA_MODEL=1: the bf16 MLP (1032 classes) failed"; }
wcalls() { awk -v k="$1" '$1 == k { print $2 }' "$T/w.err"; }
[ "$(wcalls xent_dense_k)" = 1 ] && [ "$(wcalls cols_sum_kernel)" = 1 ] &&
  [ -z "$(wcalls 'dy_pass_kernel<kPassBf16>')" ] && [ -z "$(wcalls 'xent_k<true>')" ] ||
  { cat "$T/w.err"; fail "bf16 MLP step, 1032 classes: not the loss's bf16 gradient for the last layer"; }
echo "test_gpu_model.sh: passed"
