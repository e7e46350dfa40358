// bf16.cu -- the bf16 operands of the GEMMs (bf16.h): the rounding kernel,
// the scratch buffers, and the memo of the copies a forward rounded for
// its backward.
#include <cstdio>
#include <cstdlib>
#include <unordered_map>
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

// One layer's copies: w16 at buf, x16 after it (256-byte aligned); or,
// where the weight is a parameter of the mirror, w16 there and x16 at buf.
struct MemoEntry {
    const float *w = nullptr, *x = nullptr;
    size_t wcount = 0, xcount = 0;
    bool valid = false;           // the copies are those of w and x as recorded
    const uint16_t *w16 = nullptr; // in buf or in the mirror
    Scratch buf;                  // exactly as large as the largest need (the plan counts it so)
};
std::vector<MemoEntry> g_memo;

// The parameters' mirror (bf16.h): h[i] is the rounding of base[i] over the
// ranges of `fresh` (element offsets [first, end), sorted, disjoint, not
// touching).
struct Mirror {
    const float *base = nullptr;
    size_t count = 0;
    uint16_t *h = nullptr;
    std::vector<std::pair<size_t, size_t>> fresh;
};
Mirror g_mirror;

// The loss's gradient kept for the next dense backward (dy NULL: none).
ddp_bf16_dy g_dy = {};

// Layer outputs kept in bf16 only, and the gradient buffers holding bf16
// gradients now: their addresses, counts and carried biases (looked up by
// the layers' launchers, several times a layer).
struct Act {
    size_t count;
    const float *bias; // ddp_cuda_act_bias: its readers add it; NULL: none
};
std::unordered_map<const void *, Act> g_acts;

// fp32 outputs with a bf16 copy (ddp_bf16_copy_set_): the copy, its
// count, and whether a writer wrote it since.
struct Copy {
    uint16_t *h;
    size_t count;
    bool written;
};
std::unordered_map<const void *, Copy> g_copies;

// The plane sums of a gradient kept in bf16 (ddp_bf16_bias_sums_put_; dy
// NULL: none).
struct BiasSums {
    const void *dy;
    int n, oc;
    double *part;
};
BiasSums g_sums = {};

// [a, b) into fresh, merged with what it meets.
void fresh_add_(size_t a, size_t b)
{
    auto &f = g_mirror.fresh;
    std::vector<std::pair<size_t, size_t>> out;
    out.reserve(f.size() + 1);
    size_t i = 0;
    while (i < f.size() && f[i].second < a) out.push_back(f[i++]);
    while (i < f.size() && f[i].first <= b) {
        a = f[i].first < a ? f[i].first : a;
        b = f[i].second > b ? f[i].second : b;
        i++;
    }
    out.emplace_back(a, b);
    while (i < f.size()) out.push_back(f[i++]);
    f.swap(out);
}

// [a, b) out of fresh.
void fresh_remove_(size_t a, size_t b)
{
    auto &f = g_mirror.fresh;
    std::vector<std::pair<size_t, size_t>> out;
    out.reserve(f.size() + 1);
    for (const auto &r : f) {
        if (r.second <= a || r.first >= b) {
            out.push_back(r);
            continue;
        }
        if (r.first < a) out.emplace_back(r.first, a);
        if (r.second > b) out.emplace_back(b, r.second);
    }
    f.swap(out);
}

bool fresh_has_(size_t a, size_t b)
{
    for (const auto &r : g_mirror.fresh)
        if (r.first <= a && b <= r.second) return true;
    return false;
}

// The elements of the mirror's buffer the bytes [p, p + bytes) touch, as
// [*off, *end), when they touch it.
bool mirror_off_(const void *p, size_t bytes, size_t *off, size_t *end)
{
    const Mirror &m = g_mirror;
    if (!m.h || !p) return false;
    uintptr_t a = (uintptr_t)p, lo = (uintptr_t)m.base, hi = lo + m.count * sizeof(float);
    if (a + bytes <= lo || a >= hi) return false;
    // the elements it touches, clipped to the buffer
    *off = a <= lo ? 0 : (a - lo) / sizeof(float);
    uintptr_t e = a + bytes >= hi ? hi : a + bytes;
    *end = (e - lo + sizeof(float) - 1) / sizeof(float);
    return true;
}

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
    uint16_t *mw = ddp_bf16_mirror_at_(w, wcount);
    // a copy not 16-byte aligned would keep cuBLAS off its tensor-core
    // kernels: such a weight (an offset in the parameters not a multiple of
    // 8) is rounded into the memo's own buffer as before
    if ((uintptr_t)mw % 16 != 0) mw = nullptr;
    size_t xoff = mw ? 0 : aligned_(wcount), need = (xoff + (x ? xcount : 0)) * sizeof(uint16_t);
    if (grow_(&e->buf, need, need) != 0) return -1;
    uint16_t *buf = (uint16_t *)e->buf.p;
    if (mw) {
        size_t off = (size_t)(w - g_mirror.base);
        if (!fresh_has_(off, off + wcount)) {
            if (ddp_bf16_convert_(wcount, w, mw) != 0) return -1;
            fresh_add_(off, off + wcount);
        }
#ifdef DDP_CUDA_EMU
        else {
            memo_check_("weight (from the parameters' mirror)", w, mw, wcount);
        }
#endif
        e->w16 = mw;
    } else {
        if (ddp_bf16_convert_(wcount, w, buf) != 0) return -1;
        e->w16 = buf;
    }
    if (x && ddp_bf16_convert_(xcount, x, buf + xoff) != 0) return -1;
    e->x = x;
    e->wcount = wcount;
    e->xcount = x ? xcount : 0;
    e->valid = true;
    *w16 = e->w16;
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
    *w16 = e->w16;
    if (x) *x16 = (const uint16_t *)e->buf.p + (e->w16 == e->buf.p ? aligned_(wcount) : 0);
#ifdef DDP_CUDA_EMU
    memo_check_("weight", w, *w16, wcount);
    if (x) memo_check_("input", x, *x16, xcount);
#endif
}

void ddp_bf16_dy_set_(const float *dy, int n, int out, int blocks, const uint16_t *d16,
                      const float *cols)
{
    g_dy = ddp_bf16_dy{dy, n, out, blocks, d16, cols};
}

int ddp_bf16_dy_take_(const float *dy, int n, int out, ddp_bf16_dy *got)
{
    if (!g_dy.dy || g_dy.dy != dy || g_dy.n != n || g_dy.out != out) return 0;
    *got = g_dy;
    g_dy = ddp_bf16_dy{};
    return 1;
}

void ddp_bf16_act_set_(const void *y, size_t count)
{
    g_acts.erase(y);
    if (y && count) g_acts[y] = Act{count, nullptr};
}

int ddp_bf16_act_carry_(const void *y, const float *bias)
{
    auto it = y ? g_acts.find(y) : g_acts.end();
    if (it == g_acts.end()) return -1;
    it->second.bias = bias;
    return 0;
}

const uint16_t *ddp_bf16_act_at_(const void *p)
{
    if (!p || !ddp_cuda_state_.bf16_gemm) return nullptr;
    return g_acts.count(p) ? (const uint16_t *)p : nullptr;
}

const float *ddp_bf16_act_bias_(const void *p)
{
    if (!p || !ddp_cuda_state_.bf16_gemm) return nullptr;
    auto it = g_acts.find(p);
    return it == g_acts.end() ? nullptr : it->second.bias;
}

double *ddp_bf16_bias_sums_put_(const void *dy, int n, int oc)
{
    g_sums = BiasSums{};
    double *part = (double *)ddp_bf16_scratch_(DDP_BF16_BIAS_SUMS,
                                               (size_t)n * (size_t)oc * sizeof(double));
    if (part) g_sums = BiasSums{dy, n, oc, part};
    return part;
}

int ddp_bf16_bias_sums_take_(const void *dy, int n, int oc, const double **part)
{
    const BiasSums got = g_sums;
    g_sums = BiasSums{};
    if (!got.dy || got.dy != dy || got.n != n || got.oc != oc) return 0;
    *part = got.part;
    return 1;
}

void ddp_bf16_act_drop_(const void *p)
{
    if (g_sums.dy == p) g_sums = BiasSums{};
    if (g_dy.dy == p) g_dy = ddp_bf16_dy{};
    g_acts.erase(p);
    ddp_bf16_copy_set_(p, 0);
}

int ddp_bf16_copy_set_(const void *y, size_t count)
{
    auto it = y ? g_copies.find(y) : g_copies.end();
    if (it != g_copies.end()) {
        cudaFree(it->second.h); // waits for the device: no kernel still writes it
        g_copies.erase(it);
    }
    if (!y || !count) return 0;
    void *h = nullptr;
    DDP_CU(cudaMalloc(&h, count * sizeof(uint16_t)));
    g_copies[y] = Copy{(uint16_t *)h, count, false};
    return 0;
}

uint16_t *ddp_bf16_copy_out_(const void *y)
{
    if (!y || g_copies.empty()) return nullptr;
    auto it = g_copies.find(y);
    if (it == g_copies.end()) return nullptr;
    it->second.written = true;
    return it->second.h;
}

const uint16_t *ddp_bf16_copy_at_(const void *x, size_t count)
{
    if (!x || !ddp_cuda_state_.bf16_gemm || g_copies.empty()) return nullptr;
    auto it = g_copies.find(x);
    if (it == g_copies.end() || !it->second.written || count > it->second.count) return nullptr;
#ifdef DDP_CUDA_EMU
    memo_check_("input (its writer's copy)", (const float *)x, it->second.h, count);
#endif
    return it->second.h;
}

const uint16_t *ddp_bf16_input_at_(const void *x, size_t count)
{
    const uint16_t *h = ddp_bf16_act_at_(x);
    return h ? h : ddp_bf16_copy_at_(x, count);
}

void ddp_bf16_memo_forget_(void)
{
    for (MemoEntry &e : g_memo) e.valid = false;
}

void ddp_bf16_mirror_forget_(void)
{
    g_mirror.fresh.clear();
}

int ddp_bf16_mirror_set_(const float *base, size_t count)
{
    if (g_mirror.h) DDP_CU(cudaFree(g_mirror.h)); // waits for the work using it
    g_mirror = Mirror{};
    ddp_bf16_memo_forget_(); // entries may point into the old mirror
    if (!base || count == 0) return 0;
    void *h = nullptr;
    DDP_CU(cudaMalloc(&h, count * sizeof(uint16_t)));
    g_mirror.base = base;
    g_mirror.count = count;
    g_mirror.h = (uint16_t *)h;
    return 0;
}

const float *ddp_bf16_mirror_base_(void)
{
    return g_mirror.base;
}

uint16_t *ddp_bf16_mirror_at_(const float *p, size_t count)
{
    const Mirror &m = g_mirror;
    if (!m.h || !ddp_cuda_state_.bf16_gemm || p < m.base || count > m.count ||
        (size_t)(p - m.base) > m.count - count)
        return nullptr;
    return m.h + (p - m.base);
}

void ddp_bf16_mirror_wrote_(const float *p, size_t count)
{
    if (ddp_bf16_mirror_at_(p, count) && count) fresh_add_(p - g_mirror.base, p - g_mirror.base + count);
}

void ddp_bf16_mirror_stale_(const void *p, size_t bytes)
{
    size_t off, end;
    if (bytes && mirror_off_(p, bytes, &off, &end)) fresh_remove_(off, end);
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
    if (g_mirror.h) cudaFree(g_mirror.h);
    g_mirror = Mirror{};
    g_dy = ddp_bf16_dy{};
    g_sums = BiasSums{};
    g_acts.clear();
    for (auto &c : g_copies) cudaFree(c.second.h);
    g_copies.clear();
}
