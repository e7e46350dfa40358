/* cpu_winograd_body.h -- the one body of the Winograd F(2x2, 3x3)
 * transforms of cpu_winograd.c (input, output, output gradient; one plane
 * each), written once over vectors of WV_N tiles and included there once
 * per vector width: AVX2 (8 lanes, picked at run time on CPUs that have
 * it), SSE2 (4 lanes) and portable C (4 lanes of a GNU C vector, in builds
 * without SSE2).  No include guard: it is meant to be included again.
 *
 * Before each #include the includer defines
 *   WV_N           lanes per vector, at most 8 (the padded planes, M's skew
 *                  and the mask table wino_keep_ are sized for 8)
 *   WV(op)         the vector type WV(t) of that width (WVEC here) and its
 *                  operations: load, store (unaligned), add, sub, neg (flips
 *                  the sign), set1, zero, keep(v, mask) (v where the int32
 *                  mask is -1, +0 elsewhere), even(a, b) and odd(a, b) (the
 *                  even and the odd elements of the 2 WV_N floats a, b),
 *                  zip(a, b, &lo, &hi) (a and b interleaved: a0 b0 a1 b1 ...)
 *   WINO_FN(name)  the name of this width's copy of a function
 *   WV_ATTR        the attributes of its functions (the target ISA)
 * and gets this width's functions and wino_kernels_t table, WINO_FN(kernels);
 * the body #undefs the four macros (and WVEC) at its end.
 *
 * Every width does the same IEEE operations in the same order for each
 * tile (additions and subtractions only: nothing to contract), so all give
 * the same results bit for bit.  A vector of the last, partial block of a
 * tile row is stored whole when its lanes past the row land on tiles or
 * pixels written later (the next tile row, plane or sample), and lane by
 * lane at the end of the buffer. */

#define WVEC WV(t) /* this width's vector type */

/* the first n lanes of v into dst (n == WV_N: the whole vector) */
WV_ATTR static inline void WINO_FN(put)(float *dst, WVEC v, int n)
{
    if (n == WV_N) {
        WV(store)(dst, v);
        return;
    }
    float t[WV_N];
    WV(store)(t, v);
    for (int k = 0; k < n; k++) dst[k] = t[k];
}

/* The row transform of one row r of column-transformed input tiles, their
 * columns 2k, 2k+1, 2k+2, 2k+3 in e0, o0, e1, o1: V[4r + q] at v + q plane */
WV_ATTR static inline void WINO_FN(in_row)(WVEC e0, WVEC o0, WVEC e1, WVEC o1, float *v,
                                           size_t plane, int n)
{
    WINO_FN(put)(v, WV(sub)(e0, e1), n);
    WINO_FN(put)(v + plane, WV(add)(o0, e1), n);
    WINO_FN(put)(v + 2 * plane, WV(sub)(e1, o0), n);
    WINO_FN(put)(v + 3 * plane, WV(sub)(o0, o1), n);
}

/* wino_input_ of one channel: xp its plane of x, vc V's row of the channel
 * (plane: V's plane stride; t0, ld: as wino_input_), pad the E and O planes
 * (wino_pad_floats_), zeroed by the caller: only their interior is written,
 * so the border stays zero (an odd h or w leaves a zero row/column inside
 * the border too).  The plane is first split into the even and odd columns
 * of its zero-bordered copy ([2 th + 2, 2 tw + 2]: pad column 2k is x column
 * 2k - 1), so that the tiles of a tile row read unit-stride vectors; per
 * block of WV_N tiles: the column transform over four rows, then the row
 * transform. */
WV_ATTR static void WINO_FN(input_plane)(int h, int w, const float *xp, float *pad, float *vc,
                                         size_t plane, size_t t0, size_t ld)
{
    const int th = (h + 1) / 2, tw = (w + 1) / 2, ew = wino_pad_row_(w);
    const size_t half = (size_t)(2 * th + 2) * ew;
    float *E = pad, *O = pad + half;
    for (int iy = 0; iy < h; iy++) {
        /* x column 2k -> O[k], 2k + 1 -> E[k + 1] */
        const float *xr = xp + (size_t)iy * w;
        float *er = E + (size_t)(iy + 1) * ew + 1, *od = O + (size_t)(iy + 1) * ew;
        int k = 0;
        for (; 2 * k + 2 * WV_N <= w; k += WV_N) {
            const WVEC a = WV(load)(xr + 2 * k), b = WV(load)(xr + 2 * k + WV_N);
            WV(store)(od + k, WV(even)(a, b));
            WV(store)(er + k, WV(odd)(a, b));
        }
        for (; 2 * k + 1 < w; k++) od[k] = xr[2 * k], er[k] = xr[2 * k + 1];
        if (2 * k < w) od[k] = xr[2 * k];
    }
    for (int ty = 0; ty < th; ty++)
        for (int tx0 = 0; tx0 < tw; tx0 += WV_N) {
            const size_t tile = t0 + (size_t)ty * tw + tx0;
            const int n = tile + WV_N <= ld ? WV_N : tw - tx0;
            const float *pe = E + (size_t)2 * ty * ew + tx0, *po = pe + half;
            float *v = vc + tile;
#define WINO_LD_(p, row) WV(load)((p) + (size_t)(row)*ew)
#define WINO_COL_(op, ra, rb)                                                                      \
    op(WINO_LD_(pe, ra), WINO_LD_(pe, rb)), op(WINO_LD_(po, ra), WINO_LD_(po, rb)),                \
        op(WINO_LD_(pe + 1, ra), WINO_LD_(pe + 1, rb)),                                            \
        op(WINO_LD_(po + 1, ra), WINO_LD_(po + 1, rb))
            WINO_FN(in_row)(WINO_COL_(WV(sub), 0, 2), v, plane, n);
            WINO_FN(in_row)(WINO_COL_(WV(add), 1, 2), v + 4 * plane, plane, n);
            WINO_FN(in_row)(WINO_COL_(WV(sub), 2, 1), v + 8 * plane, plane, n);
            WINO_FN(in_row)(WINO_COL_(WV(sub), 1, 3), v + 12 * plane, plane, n);
#undef WINO_COL_
#undef WINO_LD_
        }
}

/* wino_output_ of one output channel: mo M's row of the channel + t0
 * (plane: M's plane stride), yp its plane of y, y_end the end of y (nothing
 * at or past it is written).  Per output row r of a tile row, per block of
 * WV_N tiles left to right (a partial one spills onto the next row, written
 * after this one): the column transform, the row transform, the two
 * columns interleaved into the row.  M is read up to WV_N - 1 floats past a
 * tile row (within M's planes). */
WV_ATTR static void WINO_FN(output_plane)(int h, int w, const float *mo, size_t plane, float bias,
                                          float *yp, const float *y_end)
{
    const int th = (h + 1) / 2, tw = (w + 1) / 2;
    const WVEC b = WV(set1)(bias);
    for (int ty = 0; ty < th; ty++)
        for (int r = 0, rows = MIN(2, h - 2 * ty); r < rows; r++) {
            const float *mr = mo + (size_t)ty * tw + (size_t)(4 * r) * plane;
            float *yr = yp + (size_t)(2 * ty + r) * w;
            for (int tx0 = 0; tx0 < tw; tx0 += WV_N) {
                WVEC t[4];
                for (int q = 0; q < 4; q++) {
                    const float *m = mr + tx0 + (size_t)q * plane;
                    const WVEC m0 = WV(load)(m), m1 = WV(load)(m + 4 * plane);
                    const WVEC m2 = WV(load)(m + 8 * plane);
                    /* r = 0: m0 + m1 + m2 of rows 0-2; r = 1: m1 - m2 - m3 of rows 1-3 */
                    t[q] = r == 0 ? WV(add)(WV(add)(m0, m1), m2) : WV(sub)(WV(sub)(m0, m1), m2);
                }
                const WVEC c0 = WV(add)(WV(add)(WV(add)(t[0], t[1]), t[2]), b);
                const WVEC c1 = WV(add)(WV(sub)(WV(sub)(t[1], t[2]), t[3]), b);
                float *dst = yr + 2 * tx0;
                const int ncol = MIN(2 * WV_N, w - 2 * tx0);
                WVEC lo, hi;
                WV(zip)(c0, c1, &lo, &hi);
                if (ncol == 2 * WV_N || y_end - dst >= 2 * WV_N) {
                    WV(store)(dst, lo);
                    WV(store)(dst + WV_N, hi);
                } else {
                    float t2[2 * WV_N];
                    WV(store)(t2, lo);
                    WV(store)(t2 + WV_N, hi);
                    for (int j = 0; j < ncol; j++) dst[j] = t2[j];
                }
            }
        }
}

/* wino_dy_ of one channel: gp its plane of dy, wo Wd's row of the channel
 * (plane, t0, ld: as in input_plane), dy_end the end of dy (nothing at or
 * past it is read).  Per block of WV_N tiles of a tile row: the two rows'
 * 2 WV_N pixels split into left and right columns. */
WV_ATTR static void WINO_FN(dy_plane)(int h, int w, const float *gp, float *wo, size_t plane,
                                      size_t t0, size_t ld, const float *dy_end)
{
    const int th = (h + 1) / 2, tw = (w + 1) / 2;
    for (int ty = 0; ty < th; ty++)
        for (int tx0 = 0; tx0 < tw; tx0 += WV_N) {
            const size_t tile = t0 + (size_t)ty * tw + tx0;
            const int n = tile + WV_N > ld ? tw - tx0 : WV_N; /* as in input_plane */
            const int ncol = MIN(2 * WV_N, w - 2 * tx0);      /* pixels of dy's row */
            WVEC lc[2], rc[2];                                /* [row]: left, right columns */
            for (int r = 0; r < 2; r++) {
                WVEC a = WV(zero)(), b = a;
                const float *row = gp + (size_t)MIN(2 * ty + r, h - 1) * w + 2 * tx0;
                if (2 * ty + r >= h) {
                    /* past an odd edge: zero */
                } else if (ncol == 2 * WV_N) {
                    a = WV(load)(row), b = WV(load)(row + WV_N);
                } else if (dy_end - row >= 2 * WV_N) {
                    /* the pixels past the row masked off */
                    const int32_t *mk = wino_keep_ + 16 - ncol;
                    a = WV(keep)(WV(load)(row), mk);
                    b = WV(keep)(WV(load)(row + WV_N), mk + WV_N);
                } else {
                    float t2[2 * WV_N] = {0};
                    for (int j = 0; j < ncol; j++) t2[j] = row[j];
                    a = WV(load)(t2), b = WV(load)(t2 + WV_N);
                }
                lc[r] = WV(even)(a, b);
                rc[r] = WV(odd)(a, b);
            }
            /* A g: rows g0, g0 + g1, g0 - g1, -g1; then times A^T from
             * the right: (a, b) -> a, a + b, a - b, -b */
            const WVEC a[4] = {lc[0], WV(add)(lc[0], lc[1]), WV(sub)(lc[0], lc[1]), WV(neg)(lc[1])};
            const WVEC b[4] = {rc[0], WV(add)(rc[0], rc[1]), WV(sub)(rc[0], rc[1]), WV(neg)(rc[1])};
            float *v = wo + tile;
            for (int r = 0; r < 4; r++) {
                float *vr = v + (size_t)(4 * r) * plane;
                WINO_FN(put)(vr, a[r], n);
                WINO_FN(put)(vr + plane, WV(add)(a[r], b[r]), n);
                WINO_FN(put)(vr + 2 * plane, WV(sub)(a[r], b[r]), n);
                WINO_FN(put)(vr + 3 * plane, WV(neg)(b[r]), n);
            }
        }
}

static const wino_kernels_t WINO_FN(kernels) = {
    .input_plane = WINO_FN(input_plane),
    .output_plane = WINO_FN(output_plane),
    .dy_plane = WINO_FN(dy_plane),
};

#undef WVEC
#undef WV_N
#undef WV
#undef WINO_FN
#undef WV_ATTR
