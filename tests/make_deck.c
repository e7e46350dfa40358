/* make_deck.c -- writes a small input deck for the end-to-end scripts that
 * need a shape ddptrain-prep synthetic does not make (tests/test_decks.c's
 * writer, so the values are the same known functions of the sample index).
 *
 *   make_deck images OUT.h5 N
 *   make_deck slowio OUT.h5 N
 *
 * images: N float32 samples [N, 1, 8, 8] with labels index % 4 (4 classes,
 * the `classes` attribute written) and a /val split of 64 samples: a deck
 * for --augment and convolutional models.
 * slowio: N float32 samples of 2048 features, labels index % 4, in gzip'd
 * chunks of 32 samples (256 KiB): every sample of a shuffled batch costs
 * the decompression of a whole chunk, a deck that is slow to read on
 * purpose (--diagnose's input-bound verdict). */
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
                      .c = 2048,
                      .h = 1,
                      .w = 1,
                      .classes = 4,
                      .classes_attr = 1,
                      .chunk_rows = 32,
                      .deflate = 1};
    if (tdeck_write(argv[2], &t) != 0) {
        fprintf(stderr, "make_deck: cannot write %s\n", argv[2]);
        return 1;
    }
    return 0;
}
