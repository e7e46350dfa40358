/* make_deck.c -- writes a small input deck for the end-to-end scripts that
 * need a shape ddptrain-prep synthetic does not make (tests/tools/test_decks.c's
 * writer, so the values are the same known functions of the sample index).
 *
 *   make_deck images OUT.h5 N
 *   make_deck slowio OUT.h5 N
 *
 * images: N float32 samples [N, 1, 8, 8] with labels index % 4 (4 classes,
 * the `classes` attribute written) and a /val split of 64 samples: a deck
 * for --augment and convolutional models.
 * slowio: N uint8 samples of 8192 pseudo-random features 0..15, labels
 * index % 4, in gzip'd chunks of 32 samples (256 KiB, about half that
 * stored): every sample of a shuffled batch costs the decompression of a
 * whole chunk, a deck that is slow to read on purpose (--diagnose's
 * input-bound verdict). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_decks.h"
#include "tests.h"

/* test_decks.c's tdeck_path names files under the Check binaries' temporary
 * directory; this program is given full paths and never calls it. */
const char *test_tmpdir(void)
{
    return ".";
}

/* slowio: /train/x rewritten with pseudo-random values 0..15, which gzip
 * halves but cannot remove (the formula's values repeat every 251 bytes and
 * compress to almost nothing: they inflate as fast as a copy). */
static int noisy_x_(const char *path, const tdeck_t *t)
{
    size_t bytes = (size_t)t->n * (size_t)t->c;
    unsigned char *v = malloc(bytes);
    if (!v) return -1;
    uint64_t state = 0x9e3779b97f4a7c15u;
    for (size_t i = 0; i < bytes; i++) {
        state = state * 6364136223846793005u + 1442695040888963407u;
        v[i] = (unsigned char)(state >> 60);
    }
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t x = f >= 0 ? H5Dopen2(f, "/train/x", H5P_DEFAULT) : -1;
    int rc = x < 0 || H5Dwrite(x, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0;
    if (x >= 0) H5Dclose(x);
    if (f >= 0 && H5Fclose(f) < 0) rc = 1;
    free(v);
    return rc ? -1 : 0;
}

int main(int argc, char **argv)
{
    int slow = argc == 4 && strcmp(argv[1], "slowio") == 0;
    if (argc != 4 || (strcmp(argv[1], "images") != 0 && !slow)) {
        fprintf(stderr, "usage: make_deck images|slowio OUT.h5 N\n");
        return 2;
    }
    long n = strtol(argv[3], NULL, 10);
    if (n < 1) {
        fprintf(stderr, "make_deck: N must be a positive number of samples\n");
        return 2;
    }
    tdeck_t t = {.n = n,
                 .xrank = 4,
                 .c = 1,
                 .h = 8,
                 .w = 8,
                 .classes = 4,
                 .classes_attr = 1,
                 .chunk_rows = 16,
                 .nval = 64};
    if (slow)
        t = (tdeck_t){.n = n,
                      .xrank = 2,
                      .c = 8192,
                      .u8 = 1,
                      .h = 1,
                      .w = 1,
                      .classes = 4,
                      .classes_attr = 1,
                      .chunk_rows = 32,
                      .deflate = 1};
    if (tdeck_write(argv[2], &t) != 0 || (slow && noisy_x_(argv[2], &t) != 0)) {
        fprintf(stderr, "make_deck: cannot write %s\n", argv[2]);
        return 1;
    }
    return 0;
}
