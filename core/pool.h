/* pool.h - the process's one fixed-size thread pool.
 * main() makes it once and passes it down; nothing else starts threads that
 * compute (OpenBLAS is held to one thread while the pool splits the work).
 * Two uses: fed_pool_submit runs a caller-owned task on a worker (jobs of the
 * daemon and simulator; fed_pool_submit_idle on the idle lane); fed_pool_parallel_for splits work into n pieces and
 * the calling thread takes pieces too, so a pool thread that waits never
 * blocks on work queued behind it. Neither allocates. */
#ifndef FED_CORE_POOL_H
#define FED_CORE_POOL_H

#include <stddef.h>

#include "core/err.h"

typedef struct fed_pool fed_pool;

/* A caller-owned task; the pool links it while queued. */
typedef struct fed_pool_task {
    void (*fn)(struct fed_pool_task *task);
    struct fed_pool_task *next_; /* pool's */
} fed_pool_task;

/* workers >= 0 threads (0: everything runs on the calling thread). */
FED_WUR fed_err fed_pool_new(int workers, fed_pool **out);
/* Waits for queued tasks to finish, then joins the workers. NULL is fine. */
void fed_pool_free(fed_pool *p);
int fed_pool_workers(const fed_pool *p);

/* Queue task; task->fn(task) later runs on a worker (at once, inline, when
 * the pool has no workers). The caller keeps ownership of task. */
void fed_pool_submit(fed_pool *p, fed_pool_task *task);

/* Queue task on the idle lane: one more thread, started on first use, at
 * the lowest priority (SCHED_IDLE), so the task takes only CPU time nothing
 * else in the machine wants (an evaluation beside training, say). Tasks run
 * one at a time in order; fed_pool_free waits for them. Inline when the pool
 * has no workers; on a worker when the thread cannot start. */
void fed_pool_submit_idle(fed_pool *p, fed_pool_task *task);

/* Run fn(ctx, i) for i in [0, n) across the workers and the caller; returns
 * when all n are done. p may be NULL (runs inline). */
void fed_pool_parallel_for(fed_pool *p, size_t n, void (*fn)(void *ctx, size_t i), void *ctx);

#endif
