/* make_bad_deck.c -- writes input decks with one defect each, for the
 * trainer's bad-input tests (test_badinput.sh).
 *
 *   make_bad_deck KIND OUT.h5
 *
 * KIND: good (200 x 8 float features, 4 classes), no-y (no /train/y),
 * short-y (y shorter than x), nan (one NaN feature), neg-label (a label -1),
 * wide (200 x 9 features: a shard that does not match `good`), corrupt
 * (gzip'd chunks of 10 samples, the chunk holding samples 100..109 overwritten
 * with garbage after writing), huge-n (a header of 10^12 samples, chunked, no
 * chunk written), huge-f (2 samples of 10^9 features, no chunk written),
 * classes-huge (attribute classes = 10^9), classes-frac (classes = 4.5),
 * stray-label (label 1000000 at sample 37, no classes attribute), u8-scale
 * (uint8 x with scale = -1), mean-a / mean-b (`good`'s data with attributes
 * mean 0.5 or 1.5 and std 2: shards normalised differently, and files that
 * differ in an attribute only), val-nan (a /val split of 40 samples, sample 13
 * holding a NaN), float-y (float32 labels [N]: regression), nan-target
 * (float-y with the target of sample 57 NaN), config-debug (`good` with a
 * /config group setting debug-collectives = "true").
 * Decks of `good`'s shape with other content, for the start-up content
 * check (test_fingerprint.sh; it samples chunks 0, 2, 5, 8, 10, 13, 16 and
 * 19 of these 20): mid-chunk (one value of row 105, in sampled chunk 10,
 * changed); mid-label (the label of row 105 changed to another class: only
 * /train/y differs); y-classes (`good` with the attribute classes = 4 on
 * /train/y: only an attribute of the labels differs); val-a / val-b (`good`
 * with a /val split of its first 40 samples; in val-b the label of /val
 * sample 7 differs: only /val differs); unsampled (one value of row 35, in chunk 3, changed); chunk20
 * (`good`'s values in chunks of 20 samples); corrupt-unsampled (as corrupt,
 * but the chunk of samples 30..39, outside that sample: found in training).
 * nan-weights (not a deck: a weights file for --model linear:16,relu,linear:auto
 * on `good`, as h5py would write it, without checksums, with a NaN at element 5
 * of /model/layers.2.weight). */
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N = 200, CHUNK = 10 };

/* A header that declares dims (rank 2 x, rank 1 y) with chunked layout and
 * no chunk written: a file of a few KiB. */
static int write_huge_(const char *path, hsize_t n, hsize_t f_)
{
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hsize_t dx[2] = {n, f_}, cx[2] = {1, f_ < 1000000 ? f_ : 1000000}, dy = n;
    hsize_t cy = n < 4096 ? n : 4096;
    if (f_ < 100) cx[0] = 1024;
    hid_t px = H5Pcreate(H5P_DATASET_CREATE), py = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(px, 2, cx);
    H5Pset_chunk(py, 1, &cy);
    hid_t sx = H5Screate_simple(2, dx, NULL), sy = H5Screate_simple(1, &dy, NULL);
    hid_t x = H5Dcreate2(f, "/train/x", H5T_IEEE_F32LE, sx, lcpl, px, H5P_DEFAULT);
    hid_t y = H5Dcreate2(f, "/train/y", H5T_STD_I32LE, sy, lcpl, py, H5P_DEFAULT);
    int bad = x < 0 || y < 0;
    H5Dclose(x);
    H5Dclose(y);
    H5Sclose(sx);
    H5Sclose(sy);
    H5Pclose(px);
    H5Pclose(py);
    H5Pclose(lcpl);
    return H5Fclose(f) < 0 || bad;
}

static int attr_f64_(hid_t obj, const char *name, const double *v, hsize_t n)
{
    hid_t sp = n == 1 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, NULL);
    hid_t a = H5Acreate2(obj, name, H5T_IEEE_F64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    int bad = a < 0 || H5Awrite(a, H5T_NATIVE_DOUBLE, v) < 0;
    H5Aclose(a);
    H5Sclose(sp);
    return bad;
}

/* /model/layers.{0,2}.{weight,bias} of linear:16,relu,linear:4 over 8 features */
static int write_weights_(const char *path)
{
    static const struct {
        const char *name;
        int ndim;
        hsize_t dims[2];
    } t[] = {{"/model/layers.0.weight", 2, {16, 8}},
             {"/model/layers.0.bias", 1, {16, 0}},
             {"/model/layers.2.weight", 2, {4, 16}},
             {"/model/layers.2.bias", 1, {4, 0}}};
    float v[128];
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    for (int k = 0; k < 4; k++) {
        for (int i = 0; i < 128; i++) v[i] = 0.01f * (float)((i * 13 + k) % 17 - 8);
        if (k == 2) v[5] = NAN;
        hid_t sp = H5Screate_simple(t[k].ndim, t[k].dims, NULL);
        hid_t ds = H5Dcreate2(f, t[k].name, H5T_IEEE_F32LE, sp, lcpl, H5P_DEFAULT, H5P_DEFAULT);
        H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
        H5Dclose(ds);
        H5Sclose(sp);
    }
    H5Pclose(lcpl);
    return H5Fclose(f) < 0;
}

static int write_(const char *path, const char *kind)
{
    if (strcmp(kind, "huge-n") == 0) return write_huge_(path, (hsize_t)1000000000000ULL, 8);
    if (strcmp(kind, "huge-f") == 0) return write_huge_(path, 2, 1000000000);
    if (strcmp(kind, "nan-weights") == 0) return write_weights_(path);
    int f_ = strcmp(kind, "wide") == 0 ? 9 : 8;
    int ny = strcmp(kind, "short-y") == 0 ? N - 10 : N;
    float *x = malloc(sizeof(float) * N * (size_t)f_);
    int32_t y[N];
    for (int i = 0; i < N; i++) {
        y[i] = i % 4;
        for (int j = 0; j < f_; j++)
            x[i * f_ + j] = (float)((i * 7 + j * 3) % 11) / 11.0f + (float)y[i];
    }
    if (strcmp(kind, "nan") == 0) x[57 * f_ + 3] = NAN;
    if (strcmp(kind, "neg-label") == 0) y[31] = -1;
    if (strcmp(kind, "mid-chunk") == 0) x[105 * f_ + 2] += 1.0f;
    if (strcmp(kind, "unsampled") == 0) x[35 * f_ + 2] += 1.0f;
    if (strcmp(kind, "mid-label") == 0) y[105] = (y[105] + 1) % 4;
    if (strcmp(kind, "stray-label") == 0) y[37] = 1000000;
    int u8 = strcmp(kind, "u8-scale") == 0;
    unsigned char *xu = malloc((size_t)N * (size_t)f_);
    for (int i = 0; i < N * f_; i++) xu[i] = (unsigned char)(x[i] * 50);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hsize_t chunk = strcmp(kind, "chunk20") == 0 ? 2 * CHUNK : CHUNK;
    hsize_t dx[2] = {N, (hsize_t)f_}, cx[2] = {chunk, (hsize_t)f_}, dy[1] = {(hsize_t)ny};
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 2, cx);
    int corrupt = strncmp(kind, "corrupt", 7) == 0;
    if (corrupt) H5Pset_deflate(dcpl, 4);
    hid_t sx = H5Screate_simple(2, dx, NULL), sy = H5Screate_simple(1, dy, NULL);
    hid_t ds = u8 ? H5Dcreate2(f, "/train/x", H5T_STD_U8LE, sx, lcpl, dcpl, H5P_DEFAULT)
                  : H5Dcreate2(f, "/train/x", H5T_IEEE_F32LE, sx, lcpl, dcpl, H5P_DEFAULT);
    if (u8)
        H5Dwrite(ds, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, xu);
    else
        H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x);
    double minus1 = -1, mean[2] = {0.5, 1.5}, sd[2] = {2.0, 2.0};
    if (u8) attr_f64_(ds, "scale", &minus1, 1);
    if (strcmp(kind, "mean-a") == 0 || strcmp(kind, "mean-b") == 0) {
        attr_f64_(ds, "mean", &mean[kind[5] == 'b'], 1);
        attr_f64_(ds, "std", &sd[0], 1);
    }
    H5Dclose(ds);
    if (strcmp(kind, "float-y") == 0 || strcmp(kind, "nan-target") == 0) {
        float yf[N];
        for (int i = 0; i < N; i++) yf[i] = (float)y[i] * 0.5f;
        if (kind[0] == 'n') yf[57] = NAN;
        ds = H5Dcreate2(f, "/train/y", H5T_IEEE_F32LE, sy, lcpl, H5P_DEFAULT, H5P_DEFAULT);
        H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, yf);
        H5Dclose(ds);
    } else if (strcmp(kind, "no-y") != 0) {
        ds = H5Dcreate2(f, "/train/y", H5T_STD_I32LE, sy, lcpl, H5P_DEFAULT, H5P_DEFAULT);
        H5Dwrite(ds, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, y);
        double huge = 1e9, frac = 4.5;
        if (strcmp(kind, "classes-huge") == 0) attr_f64_(ds, "classes", &huge, 1);
        if (strcmp(kind, "classes-frac") == 0) attr_f64_(ds, "classes", &frac, 1);
        double four = 4;
        if (strcmp(kind, "y-classes") == 0) attr_f64_(ds, "classes", &four, 1);
        H5Dclose(ds);
    }
    int val = strcmp(kind, "val-nan") == 0 || strcmp(kind, "val-a") == 0 ||
              strcmp(kind, "val-b") == 0;
    if (val) {
        /* /val: the first 40 training samples; val-nan: sample 13 with a
         * NaN; val-b: sample 7 with another label */
        hsize_t dv[2] = {40, (hsize_t)f_}, dvy = 40;
        if (strcmp(kind, "val-nan") == 0) x[13 * f_ + 5] = NAN;
        if (strcmp(kind, "val-b") == 0) y[7] = (y[7] + 1) % 4;
        hid_t sv = H5Screate_simple(2, dv, NULL), svy = H5Screate_simple(1, &dvy, NULL);
        ds = H5Dcreate2(f, "/val/x", H5T_IEEE_F32LE, sv, lcpl, H5P_DEFAULT, H5P_DEFAULT);
        H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x);
        H5Dclose(ds);
        ds = H5Dcreate2(f, "/val/y", H5T_STD_I32LE, svy, lcpl, H5P_DEFAULT, H5P_DEFAULT);
        H5Dwrite(ds, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, y);
        H5Dclose(ds);
        H5Sclose(sv);
        H5Sclose(svy);
    }
    if (strcmp(kind, "config-debug") == 0) {
        /* `good` whose /config turns on --debug-collectives (a stale copy) */
        hid_t g = H5Gcreate2(f, "/config", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        hid_t st = H5Tcopy(H5T_C_S1), sp = H5Screate(H5S_SCALAR);
        H5Tset_size(st, 5);
        hid_t a = H5Acreate2(g, "debug-collectives", st, sp, H5P_DEFAULT, H5P_DEFAULT);
        if (a < 0 || H5Awrite(a, st, "true") < 0) return 1;
        H5Aclose(a);
        H5Sclose(sp);
        H5Tclose(st);
        H5Gclose(g);
    }
    H5Sclose(sx);
    H5Sclose(sy);
    H5Pclose(dcpl);
    H5Pclose(lcpl);
    free(x);
    free(xu);
    if (H5Fclose(f) < 0) return 1;
    if (!corrupt) return 0;

    f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    ds = H5Dopen2(f, "/train/x", H5P_DEFAULT);
    hsize_t coord[2] = {strcmp(kind, "corrupt") == 0 ? 100 : 30, 0}, size;
    haddr_t addr;
    unsigned mask;
    herr_t rc = H5Dget_chunk_info_by_coord(ds, coord, &mask, &addr, &size);
    H5Dclose(ds);
    H5Fclose(f);
    if (rc < 0) return 1;
    FILE *fp = fopen(path, "r+b");
    if (!fp || fseek(fp, (long)addr, SEEK_SET) != 0) return 1;
    for (hsize_t i = 0; i < size; i++) fputc((int)((i * 151 + 7) & 0xff), fp);
    return fclose(fp) != 0;
}

int main(int argc, char **argv)
{
    static const char *kinds[] = {
        "good",     "no-y",      "short-y",      "nan",          "neg-label",
        "wide",     "corrupt",   "huge-n",       "huge-f",       "classes-huge",
        "classes-frac", "stray-label", "u8-scale", "mean-a",     "mean-b",
        "val-nan",  "float-y",   "mid-chunk",    "unsampled",    "chunk20",
        "corrupt-unsampled", "nan-weights", "mid-label", "y-classes", "val-a", "val-b",
        "nan-target", "config-debug"};
    if (argc != 3) {
        fprintf(stderr, "usage: make_bad_deck KIND OUT.h5\n");
        return 2;
    }
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        if (strcmp(argv[1], kinds[k]) == 0) return write_(argv[2], argv[1]);
    fprintf(stderr, "make_bad_deck: unknown kind %s\n", argv[1]);
    return 2;
}
