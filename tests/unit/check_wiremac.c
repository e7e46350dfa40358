/* check_wiremac.c -- the watchdog's sealed messages (wiremac.h) on made-up
 * bytes, where a script cannot arrange them deterministically: a sealed
 * message opens once and in order; replayed on its own connection, on a
 * new connection of the same job, or into another job it is refused; so
 * is a message with one byte changed, a message reflected back to its
 * sender, and a message sealed without the secret. */
#include <string.h>

#include "tests.h"
#include "wiremac.h"

typedef struct msg_ {
    wiremac_head_t h;
    unsigned char body[64];
    unsigned char tag[WIREMAC_TAG_BYTES];
} msg_t;

static unsigned char secret_[WIREMAC_SECRET_BYTES], nonce_[WIREMAC_NONCE_BYTES];

/* A connection: the hub's end and rank r's, keyed by the same challenge. */
static void pair_(wiremac_chan_t *hub, wiremac_chan_t *rank, const unsigned char *secret,
                  const unsigned char *nonce)
{
    wiremac_chan_init(hub, secret, nonce, 1);
    wiremac_chan_init(rank, secret, nonce, 0);
}

static msg_t msg_(int kind, int rank)
{
    msg_t m;
    memset(&m, 0, sizeof m);
    m.h.magic = 0x64647764u;
    m.h.kind = kind;
    m.h.rank = rank;
    for (size_t i = 0; i < sizeof m.body; i++) m.body[i] = (unsigned char)(i * 7 + kind);
    return m;
}

static void setup_(void)
{
    ck_assert_int_eq(wiremac_init(), 0);
    for (size_t i = 0; i < sizeof secret_; i++) secret_[i] = (unsigned char)(i + 1);
    for (size_t i = 0; i < sizeof nonce_; i++) nonce_[i] = (unsigned char)(0xa0 + i);
}

START_TEST(opens_in_order)
{
    setup_();
    wiremac_chan_t hub, rank;
    pair_(&hub, &rank, secret_, nonce_);
    for (int k = 0; k < 5; k++) {
        msg_t m = msg_(2, 1);
        wiremac_seal(&rank, &m, sizeof m);
        ck_assert_uint_eq(m.h.seq, (uint64_t)k);
        ck_assert_uint_eq(m.h.dir, WIREMAC_TO_HUB);
        ck_assert_int_eq(wiremac_open(&hub, &m, sizeof m), WIREMAC_OK);
        msg_t b = msg_(2, 0);
        wiremac_seal(&hub, &b, sizeof b);
        ck_assert_int_eq(wiremac_open(&rank, &b, sizeof b), WIREMAC_OK);
    }
}
END_TEST

START_TEST(replay_same_connection_refused)
{
    setup_();
    wiremac_chan_t hub, rank;
    pair_(&hub, &rank, secret_, nonce_);
    msg_t hello = msg_(1, 1), beat = msg_(2, 1);
    wiremac_seal(&rank, &hello, sizeof hello);
    wiremac_seal(&rank, &beat, sizeof beat);
    ck_assert_int_eq(wiremac_open(&hub, &hello, sizeof hello), WIREMAC_OK);
    ck_assert_int_eq(wiremac_open(&hub, &hello, sizeof hello), WIREMAC_BAD_SEQ);
    ck_assert_int_eq(wiremac_open(&hub, &beat, sizeof beat), WIREMAC_OK);
    ck_assert_int_eq(wiremac_open(&hub, &beat, sizeof beat), WIREMAC_BAD_SEQ);
    /* out of order: a later message before an earlier one */
    msg_t m2 = msg_(2, 1), m3 = msg_(2, 1);
    wiremac_seal(&rank, &m2, sizeof m2);
    wiremac_seal(&rank, &m3, sizeof m3);
    ck_assert_int_eq(wiremac_open(&hub, &m3, sizeof m3), WIREMAC_BAD_SEQ);
    ck_assert_int_eq(wiremac_open(&hub, &m2, sizeof m2), WIREMAC_OK);
}
END_TEST

START_TEST(replay_new_connection_refused)
{
    setup_();
    wiremac_chan_t hub, rank;
    pair_(&hub, &rank, secret_, nonce_);
    msg_t hello = msg_(1, 1);
    wiremac_seal(&rank, &hello, sizeof hello);
    /* the same job, a new connection: another challenge */
    unsigned char nonce2[WIREMAC_NONCE_BYTES];
    memcpy(nonce2, nonce_, sizeof nonce2);
    nonce2[31] ^= 1;
    wiremac_chan_t hub2;
    wiremac_chan_init(&hub2, secret_, nonce2, 1);
    ck_assert_int_eq(wiremac_open(&hub2, &hello, sizeof hello), WIREMAC_BAD_TAG);
    /* another job (another secret), even with the same challenge */
    unsigned char secret2[WIREMAC_SECRET_BYTES];
    memcpy(secret2, secret_, sizeof secret2);
    secret2[0] ^= 0x80;
    wiremac_chan_t hub3;
    wiremac_chan_init(&hub3, secret2, nonce_, 1);
    ck_assert_int_eq(wiremac_open(&hub3, &hello, sizeof hello), WIREMAC_BAD_TAG);
    ck_assert_int_eq(wiremac_open(&hub, &hello, sizeof hello), WIREMAC_OK);
}
END_TEST

START_TEST(tampered_byte_refused)
{
    setup_();
    for (size_t at = 0; at < sizeof(msg_t); at += 5) {
        wiremac_chan_t hub, rank;
        pair_(&hub, &rank, secret_, nonce_);
        msg_t m = msg_(4, 1);
        wiremac_seal(&rank, &m, sizeof m);
        ((unsigned char *)&m)[at] ^= 0x01;
        ck_assert_int_eq(wiremac_open(&hub, &m, sizeof m), WIREMAC_BAD_TAG);
        ck_assert_uint_eq(hub.next_in, 0); /* a refusal counts nothing */
    }
}
END_TEST

START_TEST(reflected_and_unsealed_refused)
{
    setup_();
    wiremac_chan_t hub, rank;
    pair_(&hub, &rank, secret_, nonce_);
    /* the hub's own message sent back to it */
    msg_t b = msg_(4, 0);
    wiremac_seal(&hub, &b, sizeof b);
    ck_assert_int_eq(wiremac_open(&hub, &b, sizeof b), WIREMAC_BAD_DIR);
    /* a stranger's: right head, right sequence, a tag of zeros or its own key */
    msg_t f = msg_(4, 1);
    f.h.dir = WIREMAC_TO_HUB;
    ck_assert_int_eq(wiremac_open(&hub, &f, sizeof f), WIREMAC_BAD_TAG);
    unsigned char guess[WIREMAC_SECRET_BYTES] = {0};
    wiremac_chan_t h0, r0;
    pair_(&h0, &r0, guess, nonce_);
    wiremac_seal(&r0, &f, sizeof f);
    ck_assert_int_eq(wiremac_open(&hub, &f, sizeof f), WIREMAC_BAD_TAG);
    ck_assert_int_eq(wiremac_open(&hub, &f, 8), WIREMAC_BAD_SIZE);
}
END_TEST

START_TEST(random_differs)
{
    setup_();
    unsigned char a[32], b[32];
    wiremac_random(a, sizeof a);
    wiremac_random(b, sizeof b);
    ck_assert(memcmp(a, b, sizeof a) != 0);
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("wiremac");
    TCase *t = tcase_create("wiremac");
    tcase_add_test(t, opens_in_order);
    tcase_add_test(t, replay_same_connection_refused);
    tcase_add_test(t, replay_new_connection_refused);
    tcase_add_test(t, tampered_byte_refused);
    tcase_add_test(t, reflected_and_unsealed_refused);
    tcase_add_test(t, random_differs);
    suite_add_tcase(s, t);
    return s;
}
