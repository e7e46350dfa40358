/* comm_mpi_thread.h -- inside the MPI comm backend: the progress thread
 * (comm_mpi_thread.c) and the lock that every entry of the backend takes
 * around the in-flight list and the algorithms' state.  Private to
 * comm_mpi.c.
 *
 * Without a thread the lock is a no-op and the backend is as before:
 * collectives advance only inside comm calls.  With one, the thread wakes
 * when a collective that moves messages (every algorithm but shared memory)
 * is in flight, drives those collectives' algorithms under the lock, drops
 * the lock and sleeps the polling interval, and goes back to sleep on a
 * condition variable when none is left.  It never runs an update (apply):
 * the main thread's next comm call does, so the optimizer and the compute
 * backend stay on the main thread.  A failure on the thread stays in the
 * request (q->err) and its message is handed to the main thread, whose next
 * comm call returns it. */
#ifndef DDP_COMM_MPI_THREAD_H
#define DDP_COMM_MPI_THREAD_H

#include <stdint.h>

#include "comm_mpi_algo.h"

/* Start the thread (thread level MPI_THREAD_MULTIPLE checked by the
 * caller); sleep_us between polls (0: sched_yield only). */
ddp_status_t mpi_thread_start(comm_t *c, int sleep_us);
/* Stop and join it (no-op without one).  Main thread, lock not held. */
void mpi_thread_stop(comm_t *c);
/* From any thread (the watchdog's abort): the thread stops working at once
 * and makes no more MPI calls; mpi_thread_stop still joins it. */
void mpi_thread_abort(comm_t *c);
int mpi_thread_running(const comm_t *c);

/* The backend's lock (no-op without a thread). */
void mpi_lock(comm_t *c);
void mpi_unlock(comm_t *c);
/* Lock held: a collective was linked; wake the thread if it has messages. */
void mpi_thread_wake(comm_t *c);
/* Lock held, main thread: the thread's first failure, reported here once
 * (its message becomes this thread's ddp_error_message); DDP_OK if none. */
ddp_status_t mpi_thread_error(comm_t *c);
/* 1 on the progress thread (the engine then leaves updates alone). */
int mpi_thread_self(void);

/* CPU seconds the thread has used and the polling passes it made (0 when
 * there is none). */
void mpi_thread_usage(const comm_t *c, double *cpu_s, uint64_t *passes);
/* How often the thread went to wait for work (its lock released, only a
 * signal wakes it): a test knows the thread sleeps before it starts a
 * collective. */
uint64_t mpi_thread_sleeps(const comm_t *c);

#endif
