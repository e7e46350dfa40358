/* weights_cmp.c -- compare two weights files tensor by tensor (test helper).
 *
 *   weights_cmp A.h5 B.h5 [TOL [PREFIX]]
 *
 * For every dataset under /model of A: B must hold the same name and shape;
 * prints the largest relative difference ||a - b||_inf / max(||b||_inf, 1e-12)
 * per tensor and overall, and exits 1 when it exceeds TOL (default 1e-5),
 * 2 on a structural difference.  TOL = 0 demands bit-identical files.
 * A NaN or Inf where the other file holds another value is an infinite
 * difference.
 * With PREFIX, only tensors whose names start with it are compared. */
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ctx {
    hid_t a, b;
    double worst;
    char worst_name[256];
    int structural;
    int count;
    const char *prefix;
} ctx_t;

static double *read_(hid_t g, const char *name, size_t *n, int *nd, hsize_t *dims)
{
    hid_t ds = H5Dopen2(g, name, H5P_DEFAULT);
    if (ds < 0) return NULL;
    hid_t sp = H5Dget_space(ds);
    *nd = H5Sget_simple_extent_ndims(sp);
    H5Sget_simple_extent_dims(sp, dims, NULL);
    *n = (size_t)H5Sget_simple_extent_npoints(sp);
    double *v = malloc(*n * sizeof *v + 8);
    if (H5Dread(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0) {
        free(v);
        v = NULL;
    }
    H5Sclose(sp);
    H5Dclose(ds);
    return v;
}

#if H5_VERSION_GE(1, 12, 0)
typedef H5L_info2_t link_info_t;
#else
typedef H5L_info_t link_info_t;
#endif

static herr_t visit_(hid_t ga, const char *name, const link_info_t *info, void *arg)
{
    ctx_t *c = arg;
    if (c->prefix && strncmp(name, c->prefix, strlen(c->prefix)) != 0) return 0;
    size_t na, nb;
    int nda, ndb;
    hsize_t da[8], db[8];
    double *a = read_(ga, name, &na, &nda, da);
    double *b = H5Lexists(c->b, name, H5P_DEFAULT) > 0 ? read_(c->b, name, &nb, &ndb, db) : NULL;
    if (!a || !b || na != nb || nda != ndb) {
        printf("%-40s structural difference (missing or shape)\n", name);
        c->structural = 1;
    } else {
        double diff = 0, ref = 0;
        for (size_t i = 0; i < na; i++) {
            /* fmax drops NaNs: a NaN (or an Inf) that the other file does
             * not hold is an infinite difference */
            double d = a[i] == b[i] ? 0 : fabs(a[i] - b[i]);
            if (isnan(d)) d = isnan(a[i]) && isnan(b[i]) ? 0 : INFINITY;
            diff = fmax(diff, d);
            ref = fmax(ref, fabs(b[i]));
        }
        double rel = isinf(diff) ? INFINITY : diff / fmax(ref, 1e-12);
        if (diff == 0) rel = 0;
        printf("%-40s max|a-b| %.3e  max|b| %.3e  rel %.3e\n", name, diff, ref, rel);
        if (rel > c->worst || c->count == 0) {
            c->worst = rel;
            snprintf(c->worst_name, sizeof c->worst_name, "%s", name);
        }
        c->count++;
    }
    free(a);
    free(b);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: weights_cmp A.h5 B.h5 [TOL]\n");
        return 2;
    }
    double tol = argc > 3 ? atof(argv[3]) : 1e-5;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t fa = H5Fopen(argv[1], H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t fb = H5Fopen(argv[2], H5F_ACC_RDONLY, H5P_DEFAULT);
    if (fa < 0 || fb < 0) {
        fprintf(stderr, "weights_cmp: cannot open %s\n", fa < 0 ? argv[1] : argv[2]);
        return 2;
    }
    hid_t ga = H5Gopen2(fa, "/model", H5P_DEFAULT), gb = H5Gopen2(fb, "/model", H5P_DEFAULT);
    if (ga < 0 || gb < 0) {
        fprintf(stderr, "weights_cmp: no /model group\n");
        return 2;
    }
    ctx_t c = {.a = ga, .b = gb, .prefix = argc > 4 ? argv[4] : NULL};
    H5Literate(ga, H5_INDEX_NAME, H5_ITER_INC, NULL, visit_, &c);
    hsize_t nlinks_a = 0, nlinks_b = 0;
    H5G_info_t ia, ib;
    H5Gget_info(ga, &ia);
    H5Gget_info(gb, &ib);
    nlinks_a = ia.nlinks;
    nlinks_b = ib.nlinks;
    if (!c.prefix && nlinks_a != nlinks_b) {
        printf("different tensor counts: %llu vs %llu\n", (unsigned long long)nlinks_a,
               (unsigned long long)nlinks_b);
        c.structural = 1;
    }
    printf("worst relative difference %.3e (%s) over %d tensors; tolerance %g\n", c.worst,
           c.worst_name, c.count, tol);
    if (c.structural || c.count == 0) return 2;
    return c.worst <= tol ? 0 : 1;
}
