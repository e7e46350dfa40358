/* watchdog.c -- the collective watchdog (see watchdog.h).  One thread per
 * rank: on rank 0 the hub, which accepts a TCP connection from every other
 * rank, keeps each rank's latest activity record and decides; on the other
 * ranks a client, which sends its record and watches the hub.  Messages are
 * fixed-size records (every rank runs the same binary), sealed with the
 * job's secret (wiremac.h): the hub opens a connection with a challenge, the
 * rank answers with a sealed hello, and from then on every message in either
 * direction carries its sender, direction and sequence number under a MAC.
 * A connection whose message does not open is dropped and counted; it
 * changes nothing the hub knows of any rank. */
#define _GNU_SOURCE
#include "watchdog.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "comm.h"
#include "jobreport.h"
#include "log.h"
#include "activity.h"
#include "verdict.h"
#include "wiremac.h"

#define WD_MAGIC          0x64647764u /* "ddwd" */
#define WD_CONNECT_S      3.0         /* connect timeout */
#define WD_HELLO_S        10.0        /* a connection not authenticated by then is dropped */
#define WD_SPARE          16          /* connections beyond one per rank (strangers, briefly) */
#define WD_VANISH_GRACE_S 3.0 /* a connection closed without goodbye is reported after this */
#define WD_DEPUTY_DELAY_S 5.0 /* ranks other than 1 report a silent hub this much later */
#define WD_LOCAL_GRACE_S  5.0 /* a rank's own view, after the hub had its turn */
#define WD_LIST_MAX       8   /* ranks described one by one in a report */

/* CHALLENGE: the hub's first message on a connection (not sealed: its
 * nonce keys the connection); HELLO: a rank's first sealed message;
 * BYE: the rank finished normally; ENDING: it is ending the job (its report
 * is out): no more reports from anyone */
enum { MSG_HELLO = 1, MSG_BEAT, MSG_BYE, MSG_ENDING, MSG_CHALLENGE };

typedef struct wd_msg {
    wiremac_head_t h;              /* magic, kind, sender rank, direction, sequence */
    double blocked_for, phase_for; /* seconds, measured by the sender as it sends */
    double device_for;             /* in a wait for its device, no collective pending */
    activity_record_t rec;
    unsigned char nonce[WIREMAC_NONCE_BYTES]; /* MSG_CHALLENGE: the connection's */
    unsigned char tag[WIREMAC_TAG_BYTES];     /* the MAC of all of the above */
} wd_msg_t;
_Static_assert(offsetof(wd_msg_t, tag) + WIREMAC_TAG_BYTES == sizeof(wd_msg_t),
               "the tag ends the message");

/* A connection and its partly received message. */
typedef struct wd_conn {
    int fd;       /* -1: none */
    int rank;     /* -1 until its authenticated hello (a client: the hub's challenge) */
    double since; /* accepted at (the hub): the deadline of its hello */
    wiremac_chan_t chan;
    size_t have;
    unsigned char buf[sizeof(wd_msg_t)];
} wd_conn_t;

/* What the hub (or a client, of the hub) knows of a rank. */
typedef struct wd_peer {
    int hello, bye, ending;
    double heard;     /* clock of its last message */
    double closed_at; /* its connection closed without a goodbye (0: no) */
    wd_msg_t msg;     /* its last message */
} wd_peer_t;

static struct {
    int rank, size;
    double timeout, beat;                       /* seconds: the limit, the heartbeat period */
    const control_t *ctl;                       /* its host names (read-only: any thread) */
    unsigned char secret[WIREMAC_SECRET_BYTES]; /* the job's, from rank 0 over MPI */
    pthread_mutex_t lock; /* sending (sequence numbers) and the hub's connection slots */
    pthread_t thread;
    int running;
    atomic_int stop;
    /* hub (rank 0) */
    int listen_fd, port;
    atomic_int dropped; /* connections dropped unauthenticated */
    wd_conn_t *conns;   /* [size + WD_SPARE] accepted connections */
    int nconns;
    wd_peer_t *peers;      /* [size] */
    struct wd_view *views; /* [size]: hub_check_'s picture */
    atomic_int ending;     /* a report is out, or the job is being ended: stand down */
    /* client (rank > 0) */
    int hub_connected; /* the connection to the hub was made */
    wd_conn_t hub;
    wd_peer_t hub_peer;
} wd_ = {.listen_fd = -1, .hub = {.fd = -1, .rank = -1}, .lock = PTHREAD_MUTEX_INITIALIZER};

static const char *host_(int r)
{
    return wd_.ctl ? control_host(wd_.ctl, r) : "?";
}

/* What the verdict needs of the settings (verdict.h). */
static verdict_ctx_t ctx_(void)
{
    return (verdict_ctx_t){.size = wd_.size,
                           .timeout = wd_.timeout,
                           .beat = wd_.beat,
                           .vanish_grace = WD_VANISH_GRACE_S,
                           .list_max = WD_LIST_MAX,
                           .host = host_};
}

/* ---- reports -------------------------------------------------------------- */

static void send_all_(int kind);

/* Print the report and end the job (watchdog.h). */
_Noreturn void watchdog_end_job(const jobreport_t *t, int code)
{
    atomic_store(&wd_.ending, 1);
    send_all_(MSG_ENDING); /* the others stand down */
    comm_abort_all();      /* an NCCL communicator: cancel its work, do not wait */
    fflush(stdout);
    int dropped = atomic_load(&wd_.dropped);
    if (wd_.rank == 0 && dropped)
        fprintf(stderr,
                "ddptrain: warning: watchdog: dropped %d unauthenticated connection(s) "
                "to port %d; they changed nothing\n",
                dropped, wd_.port);
    if (wd_.rank == 0)
        fprintf(stderr, "ddptrain: error: %s", t->buf);
    else
        fprintf(stderr, "ddptrain: rank %d (%s): error: %s", wd_.rank, log_host(), t->buf);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    _exit(code); /* not reached */
}

/* ---- messages ------------------------------------------------------------- */

/* This rank's own record as a view at `now` (the waits measured here). */
static wd_view_t self_view_(const activity_record_t *self, double now)
{
    return (wd_view_t){.known = 1,
                       .rec = *self,
                       .blocked_for = self->blocked.number ? now - self->blocked_since : 0,
                       .phase_for = now - self->phase_since,
                       .device_for = self->device_since > 0 ? now - self->device_since : 0};
}

static void msg_fill_(wd_msg_t *m, int kind)
{
    memset(m, 0, sizeof *m);
    m->h.magic = WD_MAGIC;
    m->h.kind = kind;
    m->h.rank = wd_.rank;
    activity_snapshot(&m->rec);
    wd_view_t v = self_view_(&m->rec, clock_seconds());
    m->blocked_for = v.blocked_for;
    m->phase_for = v.phase_for;
    m->device_for = v.device_for;
}

/* A sealed message on an authenticated connection (the caller holds the
 * lock: one sequence per direction). */
static void send_locked_(wd_conn_t *c, int kind)
{
    if (c->fd < 0 || c->rank < 0) return;
    wd_msg_t m;
    msg_fill_(&m, kind);
    wiremac_seal(&c->chan, &m, sizeof m);
    /* never block: a peer that does not read loses beats, not us; a beat
     * that did not go out leaves its sequence number to the next one */
    ssize_t n = send(c->fd, &m, sizeof m, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n <= 0) c->chan.next_out--;
}

static void send_(wd_conn_t *c, int kind)
{
    pthread_mutex_lock(&wd_.lock);
    send_locked_(c, kind);
    pthread_mutex_unlock(&wd_.lock);
}

/* To every connection: the hub's clients, or a client's hub. */
static void send_all_(int kind)
{
    pthread_mutex_lock(&wd_.lock);
    if (wd_.rank > 0)
        send_locked_(&wd_.hub, kind);
    else
        for (int i = 0; i < wd_.nconns; i++) send_locked_(&wd_.conns[i], kind);
    pthread_mutex_unlock(&wd_.lock);
}

/* Read what is there; returns 1 for each complete message (in *out), 0 for
 * nothing more now, -1 when the connection closed or failed. */
static int recv_(wd_conn_t *c, wd_msg_t *out)
{
    for (;;) {
        ssize_t n = recv(c->fd, c->buf + c->have, sizeof c->buf - c->have, MSG_DONTWAIT);
        if (n == 0) return -1;
        if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
        c->have += (size_t)n;
        if (c->have == sizeof c->buf) {
            c->have = 0;
            memcpy(out, c->buf, sizeof *out);
            return 1;
        }
    }
}

/* Whether message m may be believed on connection c: sealed under c's key,
 * from the other end, the next in sequence, from the rank c speaks for
 * (hub_side: any rank but 0 until the hello, which must come first). */
static int authentic_(wd_conn_t *c, const wd_msg_t *m, int hub_side)
{
    if (m->h.magic != WD_MAGIC || wiremac_open(&c->chan, m, sizeof *m) != WIREMAC_OK) return 0;
    if (!hub_side) return m->h.rank == 0;
    if (c->rank >= 0) return m->h.rank == c->rank && m->h.kind != MSG_HELLO;
    return m->h.kind == MSG_HELLO && m->h.rank > 0 && m->h.rank < wd_.size &&
           !wd_.peers[m->h.rank].hello;
}

static void note_msg_(wd_peer_t *p, const wd_msg_t *m, double now)
{
    p->heard = now;
    p->msg = *m;
    if (m->h.kind == MSG_HELLO) p->hello = 1;
    if (m->h.kind == MSG_BYE) p->bye = 1;
    if (m->h.kind == MSG_ENDING) {
        p->ending = 1;
        atomic_store(&wd_.ending, 1);
    }
}

/* ---- the hub (rank 0) ---------------------------------------------------- */

/* Close connection i; one that never authenticated is counted. */
static void hub_drop_(wd_conn_t *c)
{
    if (c->rank < 0) atomic_fetch_add(&wd_.dropped, 1);
    pthread_mutex_lock(&wd_.lock);
    close(c->fd);
    c->fd = -1;
    wiremac_wipe(&c->chan, sizeof c->chan);
    pthread_mutex_unlock(&wd_.lock);
}

/* Accept what is waiting; each connection gets its challenge (a fresh nonce
 * that keys it) and WD_HELLO_S to answer with a sealed hello. */
static void hub_accept_(double now)
{
    for (;;) {
        int fd = accept4(wd_.listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return;
        int i = 0; /* a free slot: one never used, or a stranger's, closed */
        while (i < wd_.nconns && !(wd_.conns[i].fd < 0 && wd_.conns[i].rank < 0)) i++;
        wd_msg_t ch;
        memset(&ch, 0, sizeof ch);
        ch.h = (wiremac_head_t){.magic = WD_MAGIC, .kind = MSG_CHALLENGE, .dir = WIREMAC_FROM_HUB};
        wiremac_random(ch.nonce, sizeof ch.nonce);
        if (i == wd_.size + WD_SPARE ||
            send(fd, &ch, sizeof ch, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)sizeof ch) {
            atomic_fetch_add(&wd_.dropped, 1);
            close(fd);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        pthread_mutex_lock(&wd_.lock);
        wd_conn_t *c = &wd_.conns[i];
        *c = (wd_conn_t){.fd = fd, .rank = -1, .since = now};
        wiremac_chan_init(&c->chan, wd_.secret, ch.nonce, 1);
        if (i == wd_.nconns) wd_.nconns++;
        pthread_mutex_unlock(&wd_.lock);
    }
}

static int standing_down_(const activity_record_t *self)
{
    return atomic_load(&wd_.ending) || self->phase == PHASE_ABORTING;
}

static void hub_check_(double now)
{
    int W = wd_.size;
    wd_view_t *v = wd_.views;
    activity_record_t self;
    activity_snapshot(&self);
    if (standing_down_(&self)) return;
    v[0] = self_view_(&self, now);
    for (int r = 1; r < W; r++) {
        wd_peer_t *p = &wd_.peers[r];
        memset(&v[r], 0, sizeof v[r]);
        if (!p->hello) continue;
        /* a closed connection: what it said last, as of its closing */
        double age = (p->closed_at ? p->closed_at : now) - p->heard;
        v[r].closed_for = p->closed_at ? now - p->closed_at : 0;
        v[r].known = 1;
        v[r].bye = p->bye;
        v[r].rec = p->msg.rec;
        v[r].blocked_for = p->msg.rec.blocked.number ? p->msg.blocked_for + age : 0;
        v[r].phase_for = p->msg.phase_for + age;
        v[r].device_for = p->msg.device_for > 0 ? p->msg.device_for + age : 0;
        v[r].silent_for = age;
    }
    verdict_ctx_t c = ctx_();
    verdict_t d = verdict_decide(&c, v);
    if (d.kind == VERDICT_NONE) return;
    static jobreport_t t;
    if (verdict_report(&c, v, d, &t) != 0) {
        t.len = 0;
        jobreport_add(&t, "watchdog: a collective did not complete within --timeout (out of "
                          "memory writing the report)\n");
    }
    watchdog_end_job(&t, 10);
}

static void hub_loop_(void)
{
    int W = wd_.size;
    struct pollfd *pfd = calloc((size_t)W + WD_SPARE + 1, sizeof *pfd);
    if (!pfd) return;
    double next_beat = 0, next_check = 0;
    while (!atomic_load(&wd_.stop)) {
        pfd[0] = (struct pollfd){.fd = wd_.listen_fd, .events = POLLIN};
        for (int i = 0; i < wd_.nconns; i++)
            pfd[1 + i] = (struct pollfd){.fd = wd_.conns[i].fd, .events = POLLIN};
        poll(pfd, (nfds_t)wd_.nconns + 1, (int)(1000 * wd_.beat / 2));
        double now = clock_seconds();
        int polled = wd_.nconns; /* accepting may add some */
        if (pfd[0].revents) hub_accept_(now);
        for (int i = 0; i < wd_.nconns; i++) {
            wd_conn_t *c = &wd_.conns[i];
            if (c->fd < 0) continue;
            wd_msg_t m;
            int got = 0, forged = 0;
            if (i >= polled || pfd[1 + i].revents) {
                while ((got = recv_(c, &m)) == 1) {
                    if (!authentic_(c, &m, 1)) {
                        forged = 1; /* dropped: it changes nothing of any rank */
                        break;
                    }
                    if (c->rank < 0) c->rank = m.h.rank;
                    note_msg_(&wd_.peers[m.h.rank], &m, now);
                }
            }
            if (forged || (c->rank < 0 && now - c->since > WD_HELLO_S)) {
                if (c->rank >= 0) atomic_fetch_add(&wd_.dropped, 1);
                hub_drop_(c);
            } else if (got < 0) {
                if (c->rank >= 0 && !wd_.peers[c->rank].bye) wd_.peers[c->rank].closed_at = now;
                hub_drop_(c);
            }
        }
        if (now >= next_beat) {
            send_all_(MSG_BEAT);
            next_beat = now + wd_.beat;
        }
        /* a check looks at every rank: twice per heartbeat period at most,
         * not once per message */
        if (now >= next_check) {
            hub_check_(now);
            next_check = now + wd_.beat / 2;
        }
    }
    send_all_(MSG_BYE);
    pthread_mutex_lock(&wd_.lock);
    for (int i = 0; i < wd_.nconns; i++)
        if (wd_.conns[i].fd >= 0) close(wd_.conns[i].fd);
    wd_.nconns = 0;
    pthread_mutex_unlock(&wd_.lock);
    free(pfd);
}

/* ---- a client (rank > 0) ------------------------------------------------- */

static _Noreturn void report_hub_(const wd_peer_t *hub, int gone, double quiet_for)
{
    static jobreport_t t;
    if (gone)
        jobreport_add(
            &t,
            "watchdog: rank 0 (%s) vanished: its connection closed %.1f s ago without a goodbye "
            "(the process exited or was killed)\n",
            host_(0), quiet_for);
    else
        jobreport_add(
            &t,
            "watchdog: nothing heard from rank 0 (%s) for %.1f s (--timeout %g): its process is "
            "stopped or its node is unreachable\n",
            host_(0), quiet_for, wd_.timeout);
    wd_view_t v0 = {.known = 1,
                    .rec = hub->msg.rec,
                    .blocked_for = hub->msg.blocked_for,
                    .phase_for = hub->msg.phase_for,
                    .device_for = hub->msg.device_for};
    verdict_ctx_t c = ctx_();
    verdict_add_rank(&c, &t, 0, &v0, 1);
    activity_record_t self;
    activity_snapshot(&self);
    double now = clock_seconds();
    wd_view_t me = self_view_(&self, now);
    verdict_add_rank(&c, &t, wd_.rank, &me, 0);
    jobreport_add(&t,
                  "ddptrain:   what to do: look at rank 0's host (is the process stopped, the node "
                  "down, the network partitioned?)\n");
    watchdog_end_job(&t, 10);
}

/* This rank's own wait (its collective, or for its GPU when blocked_for is
 * the device wait's) beyond the timeout, reported alone. */
static _Noreturn void report_local_(const activity_record_t *self, double blocked_for)
{
    static jobreport_t t;
    char what[192];
    if (self->blocked.number)
        activity_coll_format(&self->blocked, what, sizeof what);
    else
        snprintf(what, sizeof what, "rank %d's wait for its GPU (no collective pending)",
                 wd_.rank);
    jobreport_add(&t,
                  "watchdog: %s has not completed in %.1f s (--timeout %g); the watchdog of rank 0 "
                  "cannot be reached, so what the other ranks are doing is unknown\n",
                  what, blocked_for, wd_.timeout);
    jobreport_add(&t,
                  "ddptrain:   what to do: look at rank 0's host, and at the network between the "
                  "hosts\n");
    watchdog_end_job(&t, 10);
}

static void client_check_(double now)
{
    wd_peer_t *hub = &wd_.hub_peer;
    activity_record_t self;
    activity_snapshot(&self);
    if (standing_down_(&self)) return;
    double delay = wd_.rank == 1 ? 0 : WD_DEPUTY_DELAY_S;
    int hub_ok = wd_.hub.fd >= 0 && !hub->bye && hub->msg.rec.phase != PHASE_ABORTING;
    if (hub_ok && hub->hello && now - hub->heard >= wd_.timeout + delay)
        report_hub_(hub, 0, now - hub->heard);
    if (hub->closed_at && !hub->bye && hub->msg.rec.phase != PHASE_ABORTING &&
        now - hub->closed_at >= WD_VANISH_GRACE_S + delay)
        report_hub_(hub, 1, now - hub->closed_at);
    /* its own view only: at once when the hub was never reached, else after
     * the hub (and rank 1) had their turn */
    wd_view_t me = self_view_(&self, now);
    double blocked_for = self.blocked.number ? me.blocked_for : me.device_for;
    if (blocked_for >= wd_.timeout + (wd_.hub_connected ? WD_LOCAL_GRACE_S + delay : 0))
        report_local_(&self, blocked_for);
}

static void client_loop_(void)
{
    double next_beat = 0;
    while (!atomic_load(&wd_.stop)) {
        struct pollfd pfd = {.fd = wd_.hub.fd, .events = POLLIN};
        poll(&pfd, wd_.hub.fd >= 0 ? 1 : 0, (int)(1000 * wd_.beat / 2));
        double now = clock_seconds();
        if (wd_.hub.fd >= 0) {
            wd_msg_t m;
            int got;
            while ((got = recv_(&wd_.hub, &m)) == 1) {
                if (wd_.hub.rank < 0) {
                    /* the hub's challenge keys the connection; the hello answers it */
                    if (m.h.magic != WD_MAGIC || m.h.kind != MSG_CHALLENGE) {
                        got = -1;
                        break;
                    }
                    pthread_mutex_lock(&wd_.lock);
                    wiremac_chan_init(&wd_.hub.chan, wd_.secret, m.nonce, 0);
                    wd_.hub.rank = 0;
                    send_locked_(&wd_.hub, MSG_HELLO);
                    pthread_mutex_unlock(&wd_.lock);
                    continue;
                }
                if (!authentic_(&wd_.hub, &m, 0)) {
                    got = -1;
                    break;
                }
                note_msg_(&wd_.hub_peer, &m, now);
                wd_.hub_peer.hello = 1;
            }
            if (got < 0) {
                if (!wd_.hub_peer.bye) wd_.hub_peer.closed_at = now;
                pthread_mutex_lock(&wd_.lock);
                close(wd_.hub.fd);
                wd_.hub.fd = -1;
                pthread_mutex_unlock(&wd_.lock);
            }
        }
        if (now >= next_beat) {
            send_(&wd_.hub, MSG_BEAT);
            next_beat = now + wd_.beat;
        }
        client_check_(now);
    }
    send_(&wd_.hub, MSG_BYE);
    pthread_mutex_lock(&wd_.lock);
    if (wd_.hub.fd >= 0) close(wd_.hub.fd);
    wd_.hub.fd = -1;
    pthread_mutex_unlock(&wd_.lock);
}

static void *thread_main_(void *arg)
{
    (void)arg;
    if (wd_.rank == 0)
        hub_loop_();
    else
        client_loop_();
    return NULL;
}

/* ---- setup ---------------------------------------------------------------- */

/* Where the other ranks can reach rank 0's hub, and the job's secret. */
typedef struct wd_addr {
    int32_t port;
    uint32_t addr; /* IPv4, network order */
    unsigned char secret[WIREMAC_SECRET_BYTES];
} wd_addr_t;

/* The address of the interface the job uses on rank 0's host: the loopback
 * when every rank runs there; else the address rank 0's host name resolves
 * to, if it is one of this host's; else this host's first address that is
 * up and not the loopback (the one MPI's host names lead to on a cluster
 * whose names do not resolve to one of its own). */
static uint32_t hub_address_(void)
{
    int local = 1;
    for (int r = 1; r < wd_.size; r++)
        if (strcmp(host_(r), host_(0)) != 0) local = 0;
    if (local) return htonl(INADDR_LOOPBACK);
    uint32_t mine[16];
    int n = 0;
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) == 0) {
        for (struct ifaddrs *i = ifs; i && n < 16; i = i->ifa_next)
            if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) &&
                !(i->ifa_flags & IFF_LOOPBACK))
                mine[n++] = ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
        freeifaddrs(ifs);
    }
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(host_(0), NULL, &hints, &res) == 0) {
        for (struct addrinfo *a = res; a; a = a->ai_next) {
            uint32_t x = ((struct sockaddr_in *)a->ai_addr)->sin_addr.s_addr;
            for (int k = 0; k < n; k++)
                if (mine[k] == x) {
                    freeaddrinfo(res);
                    return x;
                }
        }
        freeaddrinfo(res);
    }
    return n ? mine[0] : htonl(INADDR_LOOPBACK);
}

static int hub_listen_(wd_addr_t *a)
{
    a->port = -1;
    a->addr = hub_address_();
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = a->addr};
    socklen_t len = sizeof sa;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, SOMAXCONN) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
        close(fd);
        return -1;
    }
    a->port = ntohs(sa.sin_port);
    return fd;
}

static int client_connect_(const wd_addr_t *a)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in sa = {
        .sin_family = AF_INET, .sin_port = htons((uint16_t)a->port), .sin_addr.s_addr = a->addr};
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0 && errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int err = 0;
    socklen_t len = sizeof err;
    if (poll(&p, 1, (int)(1000 * WD_CONNECT_S)) != 1 ||
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* The hub's socket and tables (rank 0). */
static void hub_free_(void)
{
    if (wd_.listen_fd >= 0) close(wd_.listen_fd);
    wd_.listen_fd = -1;
    free(wd_.peers);
    free(wd_.conns);
    free(wd_.views);
    wd_.peers = NULL;
    wd_.conns = NULL;
    wd_.views = NULL;
}

ddp_status_t watchdog_start(control_t *ctl, double timeout)
{
    wd_.rank = ctl->rank;
    wd_.size = ctl->size;
    wd_.timeout = timeout;
    wd_.ctl = ctl;
    if (ctl->size == 1) return DDP_OK;
    if (timeout <= 0) return DDP_OK;
    /* a heartbeat several times per timeout, at most one a second */
    wd_.beat = timeout / 5 < 1.0 ? timeout / 5 : 1.0;
    if (wd_.beat < 0.05) wd_.beat = 0.05;

    wd_addr_t addr;
    memset(&addr, 0, sizeof addr);
    addr.port = -1;
    int sodium = wiremac_init() == 0;
    int64_t unreachable = 0;
    if (ctl->rank == 0) {
        /* a fresh secret per job: it goes to the ranks over MPI, never over TCP */
        if (sodium) wiremac_random(addr.secret, sizeof addr.secret);
        if (sodium) wd_.listen_fd = hub_listen_(&addr);
        wd_.peers = calloc((size_t)ctl->size, sizeof *wd_.peers);
        wd_.conns = calloc((size_t)ctl->size + WD_SPARE, sizeof *wd_.conns);
        wd_.views = calloc((size_t)ctl->size, sizeof *wd_.views);
        if (wd_.listen_fd < 0 || !wd_.peers || !wd_.conns || !wd_.views) addr.port = -1;
        wd_.port = addr.port;
    }
    comm_desc_t d = {"watchdog-address", -1, -1};
    ddp_status_t s = control_bcast(ctl, &addr, sizeof addr, 0, &d);
    memcpy(wd_.secret, addr.secret, sizeof wd_.secret);
    wiremac_wipe(addr.secret, sizeof addr.secret);
    DDP_TRY(s);
    /* the hello answers the hub's challenge, from the watchdog thread */
    if (ctl->rank > 0 && addr.port > 0 && sodium) {
        wd_.hub.fd = client_connect_(&addr);
        wd_.hub_peer.heard = clock_seconds();
        wd_.hub_connected = wd_.hub.fd >= 0;
    }
    int64_t counts[1] = {ctl->rank > 0 && wd_.hub.fd < 0};
    d = (comm_desc_t){"watchdog-connect", -1, -1};
    DDP_TRY(control_allreduce(ctl, counts, 1, COMM_INT64, &d));
    unreachable = counts[0];
    if (ctl->rank == 0 && addr.port <= 0)
        log_warn("watchdog: rank 0 cannot listen on a TCP port%s; each rank watches only its own "
                 "collectives (--timeout still ends a hang, with less detail)",
                 sodium ? "" : " (libsodium did not start)");
    else if (ctl->rank == 0 && unreachable)
        log_warn("watchdog: %lld rank(s) cannot reach rank 0's watchdog on TCP port %d; they watch "
                 "only their own collectives (--timeout still ends a hang, with less detail)",
                 (long long)unreachable, (int)addr.port);
    if (ctl->rank == 0 && addr.port <= 0) {
        hub_free_();
        return DDP_OK; /* rank 0 has no hub; clients fall back on their own view */
    }

    /* the thread takes no signals: they stay with the main thread */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&wd_.thread, NULL, thread_main_, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        return ddp_fail(DDP_ERR_INTERNAL, "cannot start the watchdog thread: %s", strerror(rc));
    wd_.running = 1;
    return DDP_OK;
}

void watchdog_stop(void)
{
    if (wd_.running) {
        atomic_store(&wd_.stop, 1);
        pthread_join(wd_.thread, NULL);
        wd_.running = 0;
    }
    int dropped = atomic_load(&wd_.dropped);
    if (wd_.rank == 0 && dropped)
        log_warn("watchdog: dropped %d unauthenticated connection(s) to port %d; they changed "
                 "nothing",
                 dropped, wd_.port);
    atomic_store(&wd_.dropped, 0);
    wiremac_wipe(wd_.secret, sizeof wd_.secret);
    hub_free_();
    wd_.ctl = NULL;
}
