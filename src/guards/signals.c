/* signals.c -- stop requests by signal (see signals.h). */
#define _POSIX_C_SOURCE 200809L
#include "signals.h"

#include <signal.h>
#include <stdatomic.h>
#include <string.h>

static const int handled_[] = {SIGUSR1, SIGTERM, SIGINT};
#define NHANDLED ((int)(sizeof handled_ / sizeof handled_[0]))

/* Lock-free, so the handlers may use it: a process-directed signal goes to
 * any thread that does not block it (the loader's, MPI's and BLAS's threads
 * too), so two handlers can run at once, and the first signal must win. */
static atomic_int pending_;
static struct sigaction previous_[NHANDLED];
static int installed_;

static void on_signal_(int signo)
{
    int first = atomic_load(&pending_);
    if ((first == SIGTERM || first == SIGINT) && signo != SIGUSR1) {
        /* asked twice to end (not a SIGUSR1 then Slurm's SIGTERM): stop now,
         * the default way */
        signal(signo, SIG_DFL);
        raise(signo);
        return;
    }
    int none = 0;
    atomic_compare_exchange_strong(&pending_, &none, signo);
}

void signals_install(void)
{
    if (installed_) return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal_;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (int i = 0; i < NHANDLED; i++) sigaction(handled_[i], &sa, &previous_[i]);
    atomic_store(&pending_, 0);
    installed_ = 1;
}

void signals_restore(void)
{
    if (!installed_) return;
    for (int i = 0; i < NHANDLED; i++) sigaction(handled_[i], &previous_[i], NULL);
    installed_ = 0;
}

int signals_pending(void)
{
    return atomic_load(&pending_);
}

const char *signals_name(int signo)
{
    switch (signo) {
    case SIGUSR1: return "SIGUSR1";
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    default: return "a signal";
    }
}
