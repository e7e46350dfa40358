/* wiremac.h -- the watchdog's sealed messages: who may speak to rank 0's
 * hub, and how a message proves it.
 *
 * Rank 0 draws a fresh 32-byte secret per job (wiremac_secret) and hands it
 * to the other ranks over MPI; it never crosses the watchdog's TCP port.
 * When a rank connects, the hub sends a fresh random challenge; both ends
 * derive the connection's key from the secret and the challenge (keyed
 * BLAKE2b, wiremac_chan_init).  Every message then starts with a
 * wiremac_head_t (magic, kind, sender rank, direction, sequence number) and
 * ends with a tag: HMAC-SHA-512-256 (libsodium's crypto_auth) under the
 * connection's key over everything before it.  A receiver accepts a message
 * only if the tag verifies, the direction is the other end's, and the
 * sequence number is the next one expected (0, 1, 2, ... per direction).
 *
 * So: without the secret no message verifies; a captured message replayed
 * on its own connection has a used sequence number; replayed on a new
 * connection (or into another job) it was sealed under another key; a hub
 * message reflected back to the hub has the wrong direction.  Pure: no
 * sockets, no clock; tests/unit/check_wiremac.c runs it on made-up bytes. */
#ifndef DDP_WIREMAC_H
#define DDP_WIREMAC_H

#include <stddef.h>
#include <stdint.h>

#define WIREMAC_SECRET_BYTES 32
#define WIREMAC_NONCE_BYTES  32
#define WIREMAC_TAG_BYTES    32 /* crypto_auth_BYTES */

/* The directions of a connection. */
enum { WIREMAC_TO_HUB = 1, WIREMAC_FROM_HUB = 2 };

/* Why a message was refused (wiremac_open). */
typedef enum wiremac_verdict {
    WIREMAC_OK = 0,
    WIREMAC_BAD_SIZE, /* shorter than a head and a tag */
    WIREMAC_BAD_TAG,  /* not sealed under this connection's key, or altered */
    WIREMAC_BAD_DIR,  /* sealed by this end (reflected) */
    WIREMAC_BAD_SEQ   /* replayed, reordered or lost */
} wiremac_verdict_t;

/* The start of every message; the sealed part covers all of it. */
typedef struct wiremac_head {
    uint32_t magic;
    int32_t kind;
    int32_t rank; /* the sender */
    uint32_t dir; /* WIREMAC_TO_HUB or WIREMAC_FROM_HUB */
    uint64_t seq; /* per direction of a connection, from 0 */
} wiremac_head_t;

/* One end of one connection. */
typedef struct wiremac_chan {
    unsigned char key[32];
    uint32_t dir_out, dir_in;
    uint64_t next_out, next_in;
} wiremac_chan_t;

/* libsodium's start-up (any thread, more than once); 0 or -1. */
int wiremac_init(void);
/* Random bytes from the operating system's generator (secrets, challenges). */
void wiremac_random(unsigned char *buf, size_t n);
/* The end of a connection: the hub's (hub_side) or a rank's, its key from
 * the job's secret and the hub's challenge for this connection. */
void wiremac_chan_init(wiremac_chan_t *c, const unsigned char secret[WIREMAC_SECRET_BYTES],
                       const unsigned char nonce[WIREMAC_NONCE_BYTES], int hub_side);
/* Seal msg[0, len): sets its head's dir and seq (the next of this end) and
 * writes the tag over msg[len - WIREMAC_TAG_BYTES, len). */
void wiremac_seal(wiremac_chan_t *c, void *msg, size_t len);
/* Check a received msg[0, len); WIREMAC_OK counts it (the next sequence
 * number is then expected), anything else leaves c as it was. */
wiremac_verdict_t wiremac_open(wiremac_chan_t *c, const void *msg, size_t len);
/* Wipe a key or a secret. */
void wiremac_wipe(void *p, size_t n);

#endif
