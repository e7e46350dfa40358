/* wiremac.c -- the watchdog's sealed messages (see wiremac.h): the
 * connection's key, the tag and the sequence check, over libsodium. */
#include "wiremac.h"

#include <sodium.h>
#include <string.h>

_Static_assert(WIREMAC_TAG_BYTES == crypto_auth_BYTES, "tag size");
_Static_assert(sizeof(((wiremac_chan_t *)0)->key) == crypto_auth_KEYBYTES, "key size");
_Static_assert(WIREMAC_SECRET_BYTES >= crypto_generichash_KEYBYTES_MIN &&
                   WIREMAC_SECRET_BYTES <= crypto_generichash_KEYBYTES_MAX,
               "secret size");

/* what the key of a connection is derived for (a change of the format is a
 * change of this string) */
static const char context_[] = "ddptrain watchdog connection v1";

int wiremac_init(void)
{
    return sodium_init() < 0 ? -1 : 0;
}

void wiremac_random(unsigned char *buf, size_t n)
{
    randombytes_buf(buf, n);
}

void wiremac_chan_init(wiremac_chan_t *c, const unsigned char secret[WIREMAC_SECRET_BYTES],
                       const unsigned char nonce[WIREMAC_NONCE_BYTES], int hub_side)
{
    memset(c, 0, sizeof *c);
    crypto_generichash_state st;
    crypto_generichash_init(&st, secret, WIREMAC_SECRET_BYTES, sizeof c->key);
    crypto_generichash_update(&st, (const unsigned char *)context_, sizeof context_);
    crypto_generichash_update(&st, nonce, WIREMAC_NONCE_BYTES);
    crypto_generichash_final(&st, c->key, sizeof c->key);
    sodium_memzero(&st, sizeof st);
    c->dir_out = hub_side ? WIREMAC_FROM_HUB : WIREMAC_TO_HUB;
    c->dir_in = hub_side ? WIREMAC_TO_HUB : WIREMAC_FROM_HUB;
}

void wiremac_seal(wiremac_chan_t *c, void *msg, size_t len)
{
    unsigned char *m = msg;
    wiremac_head_t h;
    memcpy(&h, m, sizeof h);
    h.dir = c->dir_out;
    h.seq = c->next_out++;
    memcpy(m, &h, sizeof h);
    crypto_auth(m + len - WIREMAC_TAG_BYTES, m, len - WIREMAC_TAG_BYTES, c->key);
}

wiremac_verdict_t wiremac_open(wiremac_chan_t *c, const void *msg, size_t len)
{
    const unsigned char *m = msg;
    if (len < sizeof(wiremac_head_t) + WIREMAC_TAG_BYTES) return WIREMAC_BAD_SIZE;
    if (crypto_auth_verify(m + len - WIREMAC_TAG_BYTES, m, len - WIREMAC_TAG_BYTES, c->key) != 0)
        return WIREMAC_BAD_TAG;
    wiremac_head_t h;
    memcpy(&h, m, sizeof h);
    if (h.dir != c->dir_in) return WIREMAC_BAD_DIR;
    if (h.seq != c->next_in) return WIREMAC_BAD_SEQ;
    c->next_in++;
    return WIREMAC_OK;
}

void wiremac_wipe(void *p, size_t n)
{
    sodium_memzero(p, n);
}
