/* deck_internal.h -- what the rooms of the deck share beyond deck.h: the
 * direct-read tables that deck_open.c sets up and deck_read.c reads with,
 * the HDF5 row read of the scans, and the label scan of deck_open.  Only
 * deck_open.c, deck_read.c and deck_check.c include it; everyone else uses
 * deck.h. */
#ifndef DDP_DECK_INTERNAL_H
#define DDP_DECK_INTERNAL_H

#include "deck.h"

/* deck_read.c: set up direct reads of x and y for a shard where possible
 * (never fails: ineligible datasets are read through HDF5; see deck_io_t). */
void deck_direct_init(deck_shard_t *sh, const deck_t *d);
/* deck_read.c: free one direct-read table (NULL is fine). */
void deck_direct_free(struct deck_direct *dd);
/* deck_read.c: read local rows [first, first + cnt) of ds into buf through
 * HDF5, the memory space shaped like the file selection (HDF5's fast path).
 * The caller holds the HDF5 lock. */
herr_t deck_h5_read_rows(hid_t ds, hid_t memtype, hsize_t first, hsize_t cnt, void *buf);

/* deck_check.c: scan the labels of every shard (bounded memory, progress
 * after deck_set_progress_after's delay): range checks, the number of
 * classes, and the label statistics behind deck_classes_warning. */
ddp_status_t deck_scan_labels(deck_t *d);

#endif
