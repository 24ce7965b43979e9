/* pool.c - fixed-size pthread pool: one FIFO of caller-owned tasks and of
 * parallel-for groups, one mutex, two condition variables. Allocates only
 * the worker array at creation; a task or group never allocates.
 * A thread waiting on its parallel-for runs pieces of queued groups itself.
 * The idle lane is one more thread, started on first use, that lowers
 * itself to SCHED_IDLE (nice 19 where that is refused) and runs only the
 * idle FIFO. */
#include "core/pool.h"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/alloc.h"

/* A parallel-for group lives on its caller's stack while it runs. */
typedef struct pool_group {
    void (*fn)(void *ctx, size_t i);
    void *ctx;
    size_t n;
    size_t next;      /* next index to hand out */
    size_t remaining; /* pieces not yet finished */
    struct pool_group *next_group;
} pool_group;

struct fed_pool {
    pthread_mutex_t mu;
    pthread_cond_t work; /* a task or group was queued, or stopping */
    pthread_cond_t done; /* a group piece finished */
    pthread_cond_t idle_work; /* an idle task was queued, or stopping */
    fed_pool_task *head, *tail;
    fed_pool_task *idle_head, *idle_tail;
    int idle_started;
    pthread_t idle_thread;
    pool_group *ghead, *gtail;
    int stopping;
    int nworkers;
    int started;
    pthread_t *threads;
};

/* Under the lock: take the next index of the first open group, unlinking
 * the group once its last index is handed out. */
static pool_group *take_piece(fed_pool *p, size_t *index)
{
    pool_group *g = p->ghead;

    if (!g)
        return NULL;
    *index = g->next++;
    if (g->next == g->n) {
        p->ghead = g->next_group;
        if (!p->ghead)
            p->gtail = NULL;
    }
    return g;
}

static void run_piece(fed_pool *p, pool_group *g, size_t index)
{
    pthread_mutex_unlock(&p->mu);
    g->fn(g->ctx, index);
    pthread_mutex_lock(&p->mu);
    if (--g->remaining == 0)
        pthread_cond_broadcast(&p->done);
}

/* Under the lock: task to the end of a FIFO. */
static void push_task(fed_pool_task **head, fed_pool_task **tail, fed_pool_task *task)
{
    task->next_ = NULL;
    if (*tail)
        (*tail)->next_ = task;
    else
        *head = task;
    *tail = task;
}

/* Under the lock: unlink the first task of a FIFO and run it unlocked. */
static void run_task(fed_pool *p, fed_pool_task **head, fed_pool_task **tail)
{
    fed_pool_task *t = *head;

    *head = t->next_;
    if (!*head)
        *tail = NULL;
    pthread_mutex_unlock(&p->mu);
    t->fn(t);
    pthread_mutex_lock(&p->mu);
}

static void *worker_main(void *arg)
{
    fed_pool *p = arg;

    pthread_mutex_lock(&p->mu);
    for (;;) {
        size_t index;
        pool_group *g = take_piece(p, &index);

        if (g) {
            run_piece(p, g, index);
            continue;
        }
        if (p->head) {
            run_task(p, &p->head, &p->tail);
            continue;
        }
        if (p->stopping)
            break;
        pthread_cond_wait(&p->work, &p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* The calling thread gives way to every other runnable thread: SCHED_IDLE,
 * or the largest nice where that policy is refused. Lowering a priority
 * needs no privilege; raising it again would, so the thread keeps it. */
static void lower_own_priority(void)
{
    struct sched_param sp = {0};

    if (pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp) != 0)
        (void)setpriority(PRIO_PROCESS, (id_t)gettid(), 19);
}

static void *idle_main(void *arg)
{
    fed_pool *p = arg;

    lower_own_priority();
    pthread_mutex_lock(&p->mu);
    for (;;) {
        if (p->idle_head) {
            run_task(p, &p->idle_head, &p->idle_tail);
            continue;
        }
        if (p->stopping)
            break;
        pthread_cond_wait(&p->idle_work, &p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

fed_err fed_pool_new(int workers, fed_pool **out)
{
    fed_pool *p;
    fed_err err = FED_ERR_NOMEM;

    *out = NULL;
    if (workers < 0 || workers > 1024)
        return FED_ERR_INVAL;
    p = fed_calloc(1, sizeof *p);
    if (!p)
        return FED_ERR_NOMEM;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->done, NULL);
    pthread_cond_init(&p->idle_work, NULL);
    if (workers > 0) {
        p->threads = fed_calloc((size_t)workers, sizeof *p->threads);
        if (!p->threads)
            goto out;
    }
    for (int i = 0; i < workers; i++) {
        if (pthread_create(&p->threads[i], NULL, worker_main, p) != 0) {
            err = FED_ERR_INTERNAL;
            goto out;
        }
        p->started++;
    }
    p->nworkers = workers;
    *out = p;
    return FED_OK;
out:
    fed_pool_free(p);
    return err;
}

void fed_pool_free(fed_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stopping = 1;
    pthread_cond_broadcast(&p->work);
    pthread_cond_broadcast(&p->idle_work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->started; i++)
        pthread_join(p->threads[i], NULL);
    if (p->idle_started)
        pthread_join(p->idle_thread, NULL);
    pthread_cond_destroy(&p->idle_work);
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->work);
    pthread_mutex_destroy(&p->mu);
    fed_free(p->threads);
    fed_free(p);
}

int fed_pool_workers(const fed_pool *p) { return p ? p->nworkers : 0; }

void fed_pool_submit(fed_pool *p, fed_pool_task *task)
{
    if (!p || p->nworkers == 0) {
        task->fn(task);
        return;
    }
    pthread_mutex_lock(&p->mu);
    push_task(&p->head, &p->tail, task);
    pthread_cond_signal(&p->work);
    pthread_mutex_unlock(&p->mu);
}

void fed_pool_submit_idle(fed_pool *p, fed_pool_task *task)
{
    if (!p || p->nworkers == 0) {
        task->fn(task);
        return;
    }
    pthread_mutex_lock(&p->mu);
    if (!p->idle_started) {
        if (pthread_create(&p->idle_thread, NULL, idle_main, p) != 0) {
            pthread_mutex_unlock(&p->mu);
            fed_pool_submit(p, task); /* no idle thread: a worker runs it */
            return;
        }
        p->idle_started = 1;
    }
    push_task(&p->idle_head, &p->idle_tail, task);
    pthread_cond_signal(&p->idle_work);
    pthread_mutex_unlock(&p->mu);
}

void fed_pool_parallel_for(fed_pool *p, size_t n, void (*fn)(void *ctx, size_t i), void *ctx)
{
    pool_group g = {fn, ctx, n, 0, n, NULL};

    if (n == 0)
        return;
    if (!p || p->nworkers == 0 || n == 1) {
        for (size_t i = 0; i < n; i++)
            fn(ctx, i);
        return;
    }
    pthread_mutex_lock(&p->mu);
    if (p->gtail)
        p->gtail->next_group = &g;
    else
        p->ghead = &g;
    p->gtail = &g;
    pthread_cond_broadcast(&p->work);
    while (g.remaining > 0) {
        size_t index;
        /* Take pieces (ours first, as ours is queued); never wait idle
         * while any group has pieces left. */
        pool_group *any = take_piece(p, &index);

        if (any)
            run_piece(p, any, index);
        else
            pthread_cond_wait(&p->done, &p->mu);
    }
    pthread_mutex_unlock(&p->mu);
}
