/* signals.c -- stop requests by signal (see signals.h). */
#define _POSIX_C_SOURCE 200809L
#include "signals.h"

#include <signal.h>
#include <string.h>

static const int handled_[] = {SIGUSR1, SIGTERM, SIGINT};
#define NHANDLED ((int)(sizeof handled_ / sizeof handled_[0]))

static volatile sig_atomic_t pending_;
static struct sigaction previous_[NHANDLED];
static int installed_;

static void on_signal_(int signo)
{
    if ((pending_ == SIGTERM || pending_ == SIGINT) && signo != SIGUSR1) {
        /* asked twice to end (not a SIGUSR1 then Slurm's SIGTERM): stop now,
         * the default way */
        signal(signo, SIG_DFL);
        raise(signo);
        return;
    }
    if (!pending_) pending_ = signo;
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
    pending_ = 0;
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
    return pending_;
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
