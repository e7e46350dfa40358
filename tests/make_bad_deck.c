/* make_bad_deck.c -- writes input decks with one defect each, for the
 * trainer's bad-input tests (test_badinput.sh).
 *
 *   make_bad_deck KIND OUT.h5
 *
 * KIND: good (200 x 8 float features, 4 classes), no-y (no /train/y),
 * short-y (y shorter than x), nan (one NaN feature), neg-label (a label -1),
 * wide (200 x 9 features: a shard that does not match `good`), corrupt
 * (gzip'd chunks of 10 samples, the chunk holding samples 100..109 overwritten
 * with garbage after writing); nan-weights (not a deck: a weights file for
 * --model linear:16,relu,linear:auto on `good`, as h5py would write it,
 * without checksums, with a NaN at element 5 of /model/layers.2.weight). */
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N = 200, CHUNK = 10 };

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
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hsize_t dx[2] = {N, (hsize_t)f_}, cx[2] = {CHUNK, (hsize_t)f_}, dy[1] = {(hsize_t)ny};
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 2, cx);
    if (strcmp(kind, "corrupt") == 0) H5Pset_deflate(dcpl, 4);
    hid_t sx = H5Screate_simple(2, dx, NULL), sy = H5Screate_simple(1, dy, NULL);
    hid_t ds = H5Dcreate2(f, "/train/x", H5T_IEEE_F32LE, sx, lcpl, dcpl, H5P_DEFAULT);
    H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x);
    H5Dclose(ds);
    if (strcmp(kind, "no-y") != 0) {
        ds = H5Dcreate2(f, "/train/y", H5T_STD_I32LE, sy, lcpl, H5P_DEFAULT, H5P_DEFAULT);
        H5Dwrite(ds, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, y);
        H5Dclose(ds);
    }
    H5Sclose(sx);
    H5Sclose(sy);
    H5Pclose(dcpl);
    H5Pclose(lcpl);
    free(x);
    if (H5Fclose(f) < 0) return 1;
    if (strcmp(kind, "corrupt") != 0) return 0;

    f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    ds = H5Dopen2(f, "/train/x", H5P_DEFAULT);
    hsize_t coord[2] = {100, 0}, size;
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
    static const char *kinds[] = {"good",      "no-y", "short-y", "nan",
                                  "neg-label", "wide", "corrupt", "nan-weights"};
    if (argc != 3) {
        fprintf(stderr, "usage: make_bad_deck KIND OUT.h5\n");
        return 2;
    }
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        if (strcmp(argv[1], kinds[k]) == 0) return write_(argv[2], argv[1]);
    fprintf(stderr, "make_bad_deck: unknown kind %s\n", argv[1]);
    return 2;
}
