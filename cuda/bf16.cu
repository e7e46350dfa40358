// bf16.cu -- the bf16 operands of the GEMMs (bf16.h): the rounding kernel,
// the scratch buffers, and the memo of the copies a forward rounded for
// its backward.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bf16.h"
#include "ddp_cuda_rt.h"
#include "half.h"

namespace
{

// h[i] = bf16(x[i]), round to nearest even, NaN stays a (quiet) NaN
__global__ void to_bf16_kernel(size_t count, const float *x, uint16_t *h)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x)
        h[i] = ddp_f32_to_bf16(x[i]);
}

struct Scratch {
    void *p = nullptr;
    size_t bytes = 0;
};
Scratch g_scratch[DDP_BF16_NSCRATCH];

// One layer's copies: w16 at buf, x16 after it (256-byte aligned).
struct MemoEntry {
    const float *w = nullptr, *x = nullptr;
    size_t wcount = 0, xcount = 0;
    bool valid = false; // the copies are those of w and x as recorded
    Scratch buf;        // exactly as large as the largest need (the plan counts it so)
};
std::vector<MemoEntry> g_memo;

size_t aligned_(size_t count)
{
    return (count + 127) / 128 * 128; // 256 bytes of bf16
}

MemoEntry *memo_find_(const float *w)
{
    for (MemoEntry &e : g_memo)
        if (e.w == w) return &e;
    return nullptr;
}

#ifdef DDP_CUDA_EMU
// The emulation's check of a copy handed out: when the stream reaches it,
// h[count] must be the rounding of src[count] as it is then.
void memo_check_(const char *what, const float *src, const uint16_t *h, size_t count)
{
    ddp_emu_stream_check(ddp_cuda_state_.stream, [=]() {
        for (size_t i = 0; i < count; i++) {
            if (h[i] == ddp_f32_to_bf16(src[i])) continue;
            fprintf(stderr,
                    "ddptrain: internal error: the bf16 copy of a layer's %s kept from its forward "
                    "(%p, %zu elements) differs from it at its backward (element %zu): the %s "
                    "changed between the two (cuda/bf16.cu)\n",
                    what, (const void *)src, count, i, what);
            abort();
        }
    });
}
#endif

} // namespace

int ddp_bf16_convert_(size_t count, const float *x, uint16_t *h)
{
    if (count == 0) return 0;
    DDP_COST(4.0 * count, 2.0 * count, 0);
    DDP_LAUNCH(to_bf16_kernel, ddp_blocks_for(count), kDdpThreads, ddp_cuda_state_.stream, count, x,
               h);
    DDP_CU_LAUNCHED();
    return 0;
}

// s holds at least `need` bytes: when it must grow, `alloc` (>= need) of them.
static int grow_(Scratch *s, size_t need, size_t alloc)
{
    if (need <= s->bytes) return 0;
    if (s->p) {
        // cudaFree waits for the device: GEMMs queued on the old buffer are done.
        DDP_CU(cudaFree(s->p));
        s->p = nullptr;
        s->bytes = 0;
    }
    DDP_CU(cudaMalloc(&s->p, alloc));
    s->bytes = alloc;
    return 0;
}

void *ddp_bf16_scratch_(enum ddp_bf16_scratch which, size_t bytes)
{
    Scratch *s = &g_scratch[which];
    // room to grow a little without reallocating
    return grow_(s, bytes, bytes + bytes / 4) == 0 ? s->p : nullptr;
}

int ddp_bf16_memo_put_(const float *w, size_t wcount, const float *x, size_t xcount,
                       const uint16_t **w16, const uint16_t **x16)
{
    MemoEntry *e = memo_find_(w);
    if (!e) {
        g_memo.emplace_back();
        e = &g_memo.back();
        e->w = w;
    }
    e->valid = false;
    size_t xoff = aligned_(wcount), need = (xoff + (x ? xcount : 0)) * sizeof(uint16_t);
    if (grow_(&e->buf, need, need) != 0) return -1;
    uint16_t *buf = (uint16_t *)e->buf.p;
    if (ddp_bf16_convert_(wcount, w, buf) != 0) return -1;
    if (x && ddp_bf16_convert_(xcount, x, buf + xoff) != 0) return -1;
    e->x = x;
    e->wcount = wcount;
    e->xcount = x ? xcount : 0;
    e->valid = true;
    *w16 = buf;
    *x16 = x ? buf + xoff : nullptr;
    return 0;
}

void ddp_bf16_memo_get_(const float *w, size_t wcount, const float *x, size_t xcount,
                        const uint16_t **w16, const uint16_t **x16)
{
    *w16 = nullptr;
    *x16 = nullptr;
    const MemoEntry *e = memo_find_(w);
    if (!e || !e->valid || e->wcount != wcount || e->x != x || (x && e->xcount != xcount)) return;
    *w16 = (const uint16_t *)e->buf.p;
    if (x) *x16 = *w16 + aligned_(wcount);
#ifdef DDP_CUDA_EMU
    memo_check_("weight", w, *w16, wcount);
    if (x) memo_check_("input", x, *x16, xcount);
#endif
}

void ddp_bf16_memo_forget_(void)
{
    for (MemoEntry &e : g_memo) e.valid = false;
}

void ddp_bf16_release_(void)
{
    for (Scratch &s : g_scratch) {
        if (s.p) cudaFree(s.p);
        s = Scratch{};
    }
    for (MemoEntry &e : g_memo)
        if (e.buf.p) cudaFree(e.buf.p);
    g_memo.clear();
    g_memo.shrink_to_fit();
}
