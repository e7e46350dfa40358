/* test_decks.c -- writes the small input decks of the data tests (test_decks.h). */
#include "test_decks.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests.h"

const char *tdeck_path(const char *name)
{
    static char buf[8][1024];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", test_tmpdir(), name);
    return buf[k];
}

double tdeck_raw(const tdeck_t *t, int64_t g, size_t e)
{
    if (t->u8) return (double)((uint64_t)(g * 37 + (int64_t)e * 11 + 5) % 251);
    return sin(0.37 * (double)g + 0.11 * (double)e) * 3.0 + 0.001 * (double)g;
}

float tdeck_mean(int k)
{
    return 0.25f + 0.125f * (float)k;
}
float tdeck_std(int k)
{
    return 0.5f + 0.25f * (float)k;
}

static int write_split_(hid_t f, const tdeck_t *t, const char *split, int64_t n, int64_t first)
{
    size_t numel = (size_t)t->c * (size_t)t->h * (size_t)t->w;
    hsize_t xd[4] = {(hsize_t)n, 0, 0, 0}, ch[4];
    if (t->xrank == 2)
        xd[1] = (hsize_t)t->c;
    else if (t->xrank == 3) {
        xd[1] = (hsize_t)t->h;
        xd[2] = (hsize_t)t->w;
    } else {
        xd[1] = (hsize_t)t->c;
        xd[2] = (hsize_t)t->h;
        xd[3] = (hsize_t)t->w;
    }
    memcpy(ch, xd, sizeof ch);
    ch[0] = (hsize_t)(t->chunk_rows ? t->chunk_rows : 7);
    if (ch[0] > (hsize_t)n) ch[0] = (hsize_t)n;
    char name[64];
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, t->xrank, ch);
    if (t->deflate) H5Pset_deflate(dcpl, 4);
    hid_t sp = H5Screate_simple(t->xrank, xd, NULL);
    snprintf(name, sizeof name, "/%s/x", split);
    hid_t x =
        H5Dcreate2(f, name, t->u8 ? H5T_NATIVE_UINT8 : H5T_IEEE_F32LE, sp, lcpl, dcpl, H5P_DEFAULT);
    H5Sclose(sp);
    H5Pclose(dcpl);
    if (x < 0) return -1;
    int rc = 0;
    if (t->u8) {
        uint8_t *v = malloc((size_t)n * numel);
        for (int64_t i = 0; i < n; i++)
            for (size_t e = 0; e < numel; e++)
                v[(size_t)i * numel + e] = (uint8_t)tdeck_raw(t, first + i, e);
        rc |= H5Dwrite(x, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0;
        free(v);
    } else {
        float *v = malloc((size_t)n * numel * sizeof *v);
        for (int64_t i = 0; i < n; i++)
            for (size_t e = 0; e < numel; e++)
                v[(size_t)i * numel + e] = (float)tdeck_raw(t, first + i, e);
        rc |= H5Dwrite(x, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0;
        free(v);
    }
    if (t->nstat > 0 && (!strcmp(split, "train") || t->val_stats)) {
        float m[4096], s[4096];
        for (int k = 0; k < t->nstat; k++) {
            m[k] = tdeck_mean(k);
            s[k] = tdeck_std(k);
        }
        hsize_t na = (hsize_t)t->nstat;
        hid_t asp = H5Screate_simple(1, &na, NULL);
        hid_t a1 = H5Acreate2(x, "mean", H5T_NATIVE_FLOAT, asp, H5P_DEFAULT, H5P_DEFAULT);
        hid_t a2 = H5Acreate2(x, "std", H5T_NATIVE_FLOAT, asp, H5P_DEFAULT, H5P_DEFAULT);
        rc |= H5Awrite(a1, H5T_NATIVE_FLOAT, m) < 0;
        rc |= H5Awrite(a2, H5T_NATIVE_FLOAT, s) < 0;
        H5Aclose(a1);
        H5Aclose(a2);
        H5Sclose(asp);
    }
    H5Dclose(x);

    snprintf(name, sizeof name, "/%s/y", split);
    if (t->regression) {
        hsize_t yd[2] = {(hsize_t)n, (hsize_t)t->regression};
        float *v = malloc((size_t)n * (size_t)t->regression * sizeof *v);
        for (int64_t i = 0; i < n; i++)
            for (int k = 0; k < t->regression; k++)
                v[i * t->regression + k] = (float)(first + i) + 0.5f * (float)k;
        sp = H5Screate_simple(2, yd, NULL);
        hid_t y = H5Dcreate2(f, name, H5T_IEEE_F32LE, sp, lcpl, H5P_DEFAULT, H5P_DEFAULT);
        rc |= y < 0 || H5Dwrite(y, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0;
        if (y >= 0) H5Dclose(y);
        free(v);
    } else {
        hsize_t yd = (hsize_t)n;
        int64_t *v = malloc((size_t)n * sizeof *v);
        for (int64_t i = 0; i < n; i++) v[i] = (first + i) % t->classes;
        sp = H5Screate_simple(1, &yd, NULL);
        hid_t y = H5Dcreate2(f, name, t->ytype ? t->ytype : H5T_STD_I32LE, sp, lcpl, H5P_DEFAULT,
                             H5P_DEFAULT);
        rc |= y < 0 || H5Dwrite(y, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0;
        if (y >= 0 && t->classes_attr) {
            hid_t asp = H5Screate(H5S_SCALAR);
            hid_t a = H5Acreate2(y, "classes", H5T_NATIVE_INT, asp, H5P_DEFAULT, H5P_DEFAULT);
            rc |= H5Awrite(a, H5T_NATIVE_INT, &t->classes) < 0;
            H5Aclose(a);
            H5Sclose(asp);
        }
        if (y >= 0) H5Dclose(y);
        free(v);
    }
    H5Sclose(sp);
    H5Pclose(lcpl);
    return rc ? -1 : 0;
}

int tdeck_write(const char *path, const tdeck_t *t)
{
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) return -1;
    int rc = write_split_(f, t, "train", t->n, t->first);
    if (rc == 0 && t->nval > 0) rc = write_split_(f, t, "val", t->nval, 1000000);
    if (H5Fclose(f) < 0) rc = -1;
    return rc;
}
