/* compute_cpu.h -- what the CPU compute backend (src/compute/cpu/) offers
 * beyond the ops table: the phase timers of its convolution, for
 * bench/bench_cnn.c.  The table itself, compute_cpu_ops, is compute.h's. */
#ifndef DDP_COMPUTE_CPU_H
#define DDP_COMPUTE_CPU_H

/* Phase timers of the CPU convolution, for bench/bench_cnn.c: while
 * compute_cpu_prof is non-NULL, conv_fwd and conv_bwd of the "cpu" backend
 * add the seconds each phase took to it (NULL, the default, costs one test
 * per phase).  im2col and col2im include their zero fill (for a Winograd
 * convolution they are its input and output transforms); bias is the bias
 * add (forward) or the bias gradient (backward); copy is moving outputs and
 * output gradients between [n, oc, oh*ow] and the GEMM's [oc, n*oh*ow]. */
typedef struct compute_cpu_prof {
    double im2col, gemm, col2im, bias, copy;
} compute_cpu_prof_t;
extern compute_cpu_prof_t *compute_cpu_prof;

#endif
