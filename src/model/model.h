/* model.h -- the model: a layer list built from a spec string (residual
 * blocks included: a block's layers, its projection and the add that joins
 * the two paths are layers of the list, each reading the output of the
 * layer its `src` names), with named tensor views over ONE flat parameter
 * buffer and ONE flat gradient buffer.
 *
 * Layout: trainable parameters are placed bucket by bucket (buckets follow
 * reverse layer order, so the last layers' gradients come first), then the
 * frozen parameters.  The parameter and gradient buffers share this layout,
 * so every bucket is one contiguous slice of both and the optimizer is one
 * loop over [0, ntrainable).  Every bucket and frozen parameter starts at a
 * multiple of 256 bytes, and inside a bucket the tensors whose sizes are
 * multiples of 64 and of 8 elements come first (256- and 32-byte aligned:
 * the GEMMs' operands as cuBLAS wants them); the elements between buckets
 * belong to no tensor and stay zero.  Running statistics of BatchNorm live in a
 * separate flat buffer.  Tensor names and shapes are those of PyTorch's
 * nn.Sequential state_dict (layers.<i>.weight ...), i counting every item
 * of the spec; a residual block's layers are layers.<i>.body.<j>, its
 * projection layers.<i>.downsample.0 and .1; a name given in the spec
 * (NAME=layer) replaces layers.<i>, and the named architectures (resnet18
 * ...) use torchvision's names (conv1, layer1.0.bn2, fc).
 */
#ifndef DDP_MODEL_H
#define DDP_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "comm.h"
#include "compute.h"
#include "shape.h"
#include "status.h"

typedef enum layer_kind {
    LAYER_LINEAR,
    LAYER_CONV,
    LAYER_MAXPOOL,
    LAYER_AVGPOOL,
    LAYER_GAP,
    LAYER_BN,
    LAYER_RELU,
    LAYER_GELU,
    LAYER_DROPOUT,
    LAYER_FLATTEN,
    LAYER_ADD /* the end of a residual block: its path's output + its input (or projection) */
} layer_kind_t;

#define TENSOR_NAME_MAX 64
#define LAYER_NAME_MAX  40 /* a layer's name, its tensors' prefix: "layer1.0.downsample.0" */

typedef enum tensor_kind {
    TENSOR_PARAM,  /* in params/grads */
    TENSOR_BUFFER, /* float, in bufs (running_mean, running_var) */
    TENSOR_COUNTER /* int64 num_batches_tracked, held in the layer */
} tensor_kind_t;

typedef struct tensor {
    char name[TENSOR_NAME_MAX]; /* "layers.3.weight" */
    tensor_kind_t kind;
    int ndim;
    int shape[4];
    size_t numel;
    size_t offset; /* floats into params/grads (PARAM) or bufs (BUFFER) */
    int layer;     /* index into model.layers */
    int frozen;    /* PARAM excluded by --freeze */
    int bucket;    /* bucket index; -1 for frozen params and buffers */
} tensor_t;

typedef struct bucket {
    size_t offset, count; /* floats: [offset, offset+count) of params/grads */
    int ntensors;
    int *tensors; /* tensor ids, in the order their gradients arrive */
} bucket_t;

typedef struct layer {
    layer_kind_t kind;
    int index;                 /* position in the layer list (unique; dropout keys, messages) */
    int item;                  /* position of its item (a layer or a block) in the spec */
    char token[40];            /* the spec token, for messages */
    char name[LAYER_NAME_MAX]; /* its tensors are <name>.weight ... */
    int src;                   /* the layer whose output is its input; -1: the model's input */
    int skip;                  /* LAYER_ADD: the layer whose output is added; -1: the input */
    int bwd;                   /* runs backward (it or a layer below has trainable parameters) */
    int gslot;                 /* backward's scratch: the buffer of its output's gradient */
    int gslot2;                /* RELU: a second one its backward adds inside its mask
                                * (relu_bwd's dy2), then writes dx over; -1: none */
    int fused_relu;            /* LINEAR, BN, ADD: the ReLU after it (its output's only
                                * reader) runs inside its kernels (a dense layer's and a BN's
                                * backward too), and its y is the ReLU's; RELU: it runs so
                                * (fuse_relus_) */
    int add_bn;                /* ADD: 1 + the BatchNorm whose output it reads and makes
                                * (bn_fwd's res: fuse_bn_adds_); 0: none */
    int bn_in_add;             /* BN: its only reader is a block's add, which applies it */
    int pool_bn;               /* MAXPOOL: 1 + the BatchNorm whose output (or its fused
                                * ReLU's) it pools in one pass with it, forward and backward
                                * (compute.h bn_maxpool: fuse_bn_pools_); 0: none */
    int pooled;                /* BN, RELU: 1 + that max pooling (this output is never
                                * written); 0: none */
    act_shape_t in, out;
    int k, stride, pad;                         /* conv / pools */
    float p;                                    /* dropout */
    int weight, bias;                           /* tensor ids or -1 */
    int running_mean, running_var, num_batches; /* BN tensor ids or -1 */
    int64_t num_batches_tracked;

    /* device memory, sized for the model's batch */
    float *y;             /* output [batch, out] (NULL for flatten: aliases input) */
    int32_t *argmax;      /* maxpool */
    float *mean, *invstd; /* BN [c] */
    double *stats;        /* BN [2c] statistics scratch */
} layer_t;

/* Where the parameter and gradient buffers come from: the comm backend may
 * provide memory it can reduce and update faster (shared memory on one
 * node).  alloc must zero-fill. */
typedef struct model_mem {
    ddp_status_t (*alloc)(void *arg, size_t bytes, void **p);
    void (*free)(void *arg, void *p);
    void *arg;
} model_mem_t;

typedef struct model_opts {
    const char *spec;          /* --model */
    act_shape_t input;         /* per-sample input shape from the data */
    int outputs;               /* classes or regression targets: resolves linear:auto */
    int batch;                 /* activations are allocated for this many samples */
    size_t bucket_cap_bytes;   /* --bucket-cap-mb */
    size_t first_bucket_bytes; /* cap of the first bucket reduced (the last layers) */
    const char *freeze;        /* --freeze: comma-separated tensor names or layers.<i> */
    int unfused;               /* tests: every layer runs its own kernels (no fused ReLU) */
} model_opts_t;

typedef struct model {
    const compute_ops_t *compute;
    int nlayers;
    layer_t *layers;
    int ntensors;
    tensor_t *tensors;
    int nbuckets;
    bucket_t *buckets;
    size_t nparams;               /* floats in params (and grads) */
    size_t ntrainable;            /* [0, ntrainable): the buckets and the gaps between them */
    /* the parameters' values (trainable ones, and all): nparams and
     * ntrainable less the alignment gaps between buckets (layout_) */
    size_t ntrainable_values, nvalues;
    size_t nbufs;                 /* floats in bufs */
    float *params, *grads, *bufs; /* device */
    act_shape_t input;
    int outputs; /* features of the last layer */
    int batch;
    int ndact;        /* 2, or 3 with residual blocks (a path's gradient waits for the other) */
    int unfused;      /* model_opts_t.unfused: no layer runs inside another */
    /* Set before model_alloc (--precision bf16 on a backend with act_bf16):
     * a dense layer's output (or its fused ReLU's) that only a dense layer
     * reads is kept in bf16 (compute.h act_bf16: model_out_bf16). */
    int bf16_acts;
    /* ... and with it (compute.h conv_acts_bf16): a convolution's output
     * (no bias) that only a BatchNorm reads, and a BatchNorm's (or its
     * fused ReLU's) or a max pooling's that only a convolution reads. */
    int bf16_conv_acts;
    float *dact[3];   /* activation-gradient buffers [batch, max act] */
    char *expanded;   /* the spec the layers were built from (a named architecture expanded) */
    void *ws;         /* shared workspace: the convolutions', a fused dense layer's */
    model_mem_t mem;  /* how params and grads were allocated (alloc == NULL: backend) */
    /* Where the gradients are written (model_bucket_grads): by default the
     * gradient buffer in the parameters' layout; with grad_slots K > 0 (set
     * before model_alloc: --zero 2) grads holds K slots of slot_count floats
     * that the buckets cycle through (bucket b in slot b % K), then the
     * frozen parameters' gradients, and grads + offset means nothing:
     * whoever writes a slot must be done with the bucket that used it
     * before (reducer.c). */
    int grad_slots;
    size_t slot_count;
    size_t grad_bytes; /* of the gradient buffer */
    float **gbase;     /* [nbuckets + 1]: bucket b's first gradient; [nbuckets]: the frozen ones' */
    size_t act_bytes; /* activation memory (for the start-up table) */
    /* for model_ops_wait */
    compute_event_t *ops_done;
} model_t;

/* Parse the spec (a named architecture is expanded first: model_expand),
 * check it against the input shape, lay out tensors and buckets; no memory
 * yet.  Errors name the offending layer token or block. */
ddp_status_t model_layout(model_t *m, const model_opts_t *o, const compute_ops_t *compute);
/* Allocate parameters, buffers, activations (device memory of the backend);
 * the parameter and gradient buffers from `mem` when given. */
ddp_status_t model_alloc(model_t *m, const model_mem_t *mem);
/* The activation memory model_alloc takes (layer outputs, pooling indices,
 * the activation-gradient buffers, the convolution workspace): known
 * from the layout alone, before model_alloc. */
size_t model_act_bytes(const model_t *m);
/* The same for a batch of `batch` samples (what another --batch would take). */
size_t model_act_bytes_at(const model_t *m, int batch);
/* The largest activation of any layer, the input included (elements per
 * sample). */
size_t model_max_act(const model_t *m);
/* The shared workspace in them: the largest any conv layer needs at
 * `batch` samples (compute_ops_t.conv_ws_bytes) or a dense layer with a
 * fused ReLU (its masked output gradient: linear_bwd's ws); 0 without
 * either. */
size_t model_ws_bytes(const model_t *m, int batch);
/* Wait until the ops called so far have written their outputs, before the
 * comm backend or the host reads them (compute.h, "Ordering"): the BN
 * statistics before their all-reduce. */
void model_ops_wait(model_t *m);
/* Whether layer i's output buffer holds bf16 values (m->bf16_acts): a
 * dense layer's output, or the ReLU's fused into it, whose only reader is
 * a dense layer; with m->bf16_conv_acts also a convolution's (without bias,
 * or with one the backend carries to the reader: compute.h act_bias) whose
 * only reader is a BatchNorm, and a BatchNorm's (not one an add
 * applies), or the ReLU's fused into it, or a max pooling's, whose only
 * reader is a convolution (a max pooling's: or a dense layer, through
 * flattens; a flatten's is its input's).  Its buffer then takes half the
 * bytes. */
int model_out_bf16(const model_t *m, int i);
/* Whether layer i's output, kept in fp32, has a bf16 copy beside it
 * (compute.h act_copy16; m->bf16_conv_acts with the backend keeping its
 * convolutions' inputs rounded): a convolution reads it, beside other
 * layers, and a BatchNorm (alone, with its fused ReLU, in its max pooling
 * or in a block's add), a max pooling or an add writes it. */
int model_out_copy16(const model_t *m, int i);

/* model_layout + model_alloc(NULL). */
ddp_status_t model_build(model_t *m, const model_opts_t *o, const compute_ops_t *compute);
void model_free(model_t *m);

/* PyTorch-default initialisation from (seed, tensor index): kaiming-uniform
 * (a = sqrt(5)) weights, uniform(+-1/sqrt(fan_in)) biases, BN weight 1, bias
 * 0, running mean 0, var 1. */
ddp_status_t model_init_params(model_t *m, uint64_t seed);

int model_find_tensor(const model_t *m, const char *name); /* -1 if absent */
/* Where bucket b's gradients are: element e of the bucket (from its first)
 * at model_bucket_grads(m, b)[e]. */
float *model_bucket_grads(const model_t *m, int b);
/* Parameter tensor id's gradient (NULL when id < 0). */
float *model_tensor_grad(const model_t *m, int id);
/* The largest bucket, in elements. */
size_t model_max_bucket(const model_t *m);
int model_has_layer(const model_t *m, layer_kind_t kind);
/* 1 when the weight of every dense and convolution layer starts at an
 * offset of the parameters that is a multiple of `elems` (the parameters are
 * packed: a tensor of odd size shifts every one after it). */
int model_weights_aligned(const model_t *m, size_t elems);
/* The spec item (a layer, or a residual block with its projection) whose
 * first layer is `first`, for the start-up table: its name, its layers'
 * tokens ("res(conv:64:3:1:1:nobias,bn,...) + downsample(conv:...,bn)"),
 * its parameters; returns the first layer of the next item. */
int model_item_text(const model_t *m, int first, char *name, size_t nn, char *text, size_t n,
                    size_t *params);

/* Everything a forward/backward pass needs to know about the step. */
typedef struct step_ctx {
    int n;                     /* local samples (may be 0 on a rank without data) */
    int64_t global_n;          /* samples in the union batch of all ranks */
    const int64_t *sample_idx; /* device [n]: global sample indices (dropout keys) */
    int64_t step;              /* optimizer step (dropout key) */
    uint64_t seed;
    int train;       /* 1: batch statistics, dropout; 0: eval mode */
    comm_t *sync_bn; /* non-NULL: SyncBatchNorm over this communicator */
    float grad_beta; /* 0: overwrite parameter gradients, 1: accumulate */
    /* Called before layer l writes its parameter gradients (reducer hook;
     * NULL: none). */
    ddp_status_t (*grads_needed)(void *arg, int layer);
    /* Called after layer l's parameter gradients are final (reducer hook). */
    ddp_status_t (*grads_ready)(void *arg, int layer);
    void *grads_ready_arg;
} step_ctx_t;

/* Forward x [n, input] through all layers; returns the output [n, outputs]. */
ddp_status_t model_forward(model_t *m, const float *x, const step_ctx_t *ctx, const float **out);
/* Backward from dout [n, outputs] (written by the loss into model_dout()). */
ddp_status_t model_backward(model_t *m, const float *x, const step_ctx_t *ctx);
/* The buffer the loss writes d(loss)/d(output) into before model_backward. */
float *model_dout(model_t *m);
/* Whether the last layer is a dense one without a ReLU fused into it and
 * its outputs kept per bf16_acts: its backward reads dout next and nothing
 * else does (loss_apply's dense). */
int model_dout_dense(const model_t *m);

#endif
