/* site.c - a site run as several processes (node/site.h): rank 0's
 * announcement of a round's training (a header, then the round's starting
 * parameters, broadcast), the other ranks' loop that trains it, the
 * trainer's gradient sum through the collective, and the one way a failed
 * collective ends: a line that says why, then the whole job aborted (Open
 * MPI 4.1 has no recovery; the supervisor restarts the site from its
 * checkpoint). The header goes between ranks of one mpirun job, the same
 * program on each: fields in host order, checked by magic and version. */
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "node/node_impl.h"
#include "node/site.h"

#define SITE_MAGIC 0x53495445u /* "SITE" */
#define SITE_VERSION 1u
#define SITE_ABORT_CODE 70     /* EX_SOFTWARE: the job ends, the supervisor restarts it */
#define SITE_WAIT_MS UINT32_MAX /* a rank waits for the next round this long */

enum { SITE_TRAIN = 1, SITE_STOP = 2 };

typedef struct site_hdr {
    uint32_t magic, version, cmd, size; /* size: sizeof(site_hdr) on rank 0 */
    uint64_t round, seed, nparams;
    fed_wire_settings set;
} site_hdr;

/* A collective failed: say so, then end the job (every rank). Returns e
 * only with the one-rank collective, whose abort returns. */
static fed_err site_fail(fed_coll *c, const char *what, fed_err e)
{
    fed_log(FED_LOG_ERROR, "site: rank %d of %d: %s failed (%s; deadline %u ms): a rank "
            "died, stalls or failed; ending the whole job so its supervisor restarts it "
            "from the checkpoint", fed_coll_rank(c), fed_coll_size(c), what, fed_strerror(e),
            fed_coll_timeout(c));
    fed_coll_abort(c, SITE_ABORT_CODE);
    return e;
}

fed_err fed_node_site_failed(const node_train_job *j, fed_err e)
{
    return site_fail(j->coll, "training", e);
}

int fed_node_site_ranks(const node_train_job *j)
{
    return j->coll ? fed_coll_size(j->coll) : 1;
}

fed_err fed_node_site_reduce(void *ctx, float *buf, size_t n)
{
    fed_coll *c = ctx;
    fed_err e = fed_coll_allreduce_sum(c, buf, n);

    return e == FED_OK ? FED_OK : site_fail(c, "the gradients' sum", e);
}

fed_err fed_node_site_sum_stats(fed_coll *c, fed_step_stats *st)
{
    float v[3] = {(float)st->loss_sum, (float)st->correct, (float)st->samples};
    fed_err e = fed_node_site_reduce(c, v, 3);

    if (e == FED_OK) {
        st->loss_sum = v[0];
        st->correct = (long)v[1];
        st->samples = (long)v[2];
    }
    return e;
}

fed_err fed_node_site_announce(const node_train_job *j)
{
    site_hdr h;
    fed_err e;

    memset(&h, 0, sizeof h);
    h.magic = SITE_MAGIC;
    h.version = SITE_VERSION;
    h.cmd = SITE_TRAIN;
    h.size = (uint32_t)sizeof h;
    h.round = j->round;
    h.seed = j->seed;
    h.nparams = j->nparams;
    h.set = j->set;
    if ((e = fed_coll_bcast(j->coll, &h, sizeof h)) != FED_OK)
        return site_fail(j->coll, "announcing the round", e);
    if ((e = fed_coll_bcast(j->coll, (void *)j->from, j->nparams * sizeof *j->from)) != FED_OK)
        return site_fail(j->coll, "sending the round's parameters", e);
    return FED_OK;
}

fed_err fed_node_site_stop(fed_coll *c)
{
    site_hdr h;
    fed_err e;

    memset(&h, 0, sizeof h);
    h.magic = SITE_MAGIC;
    h.version = SITE_VERSION;
    h.cmd = SITE_STOP;
    h.size = (uint32_t)sizeof h;
    if ((e = fed_coll_bcast(c, &h, sizeof h)) != FED_OK)
        return site_fail(c, "telling the ranks to stop", e);
    return FED_OK;
}

/* The next header from rank 0, however long the wait between rounds. */
static fed_err next_header(const fed_node_site_rank_cfg *cfg, site_hdr *h)
{
    fed_err e;

    fed_coll_set_timeout(cfg->coll, SITE_WAIT_MS);
    e = fed_coll_bcast(cfg->coll, h, sizeof *h);
    fed_coll_set_timeout(cfg->coll, cfg->timeout_ms);
    if (e != FED_OK)
        return site_fail(cfg->coll, "waiting for the next round", e);
    if (h->magic != SITE_MAGIC || h->version != SITE_VERSION || h->size != sizeof *h ||
        (h->cmd != SITE_TRAIN && h->cmd != SITE_STOP)) {
        fed_log(FED_LOG_ERROR, "site: rank %d: rank 0's header is not this program's (another "
                "fednode build on some host?)", fed_coll_rank(cfg->coll));
        return site_fail(cfg->coll, "reading the round's header", FED_ERR_VERSION);
    }
    return FED_OK;
}

fed_err fed_node_site_rank_run(const fed_node_site_rank_cfg *cfg)
{
    node_train_job j;
    site_hdr h;
    float *global = NULL, *params = NULL;
    size_t cap = 0;
    fed_err e;

    memset(&j, 0, sizeof j);
    fed_coll_set_timeout(cfg->coll, cfg->timeout_ms);
    for (;;) {
        if ((e = next_header(cfg, &h)) != FED_OK)
            break;
        if (h.cmd == SITE_STOP) {
            fed_log(FED_LOG_INFO, "site: rank %d: rank 0 says the site is done",
                    fed_coll_rank(cfg->coll));
            break;
        }
        if (h.nparams > cap) {
            fed_free(global);
            fed_free(params);
            global = fed_malloc(h.nparams * sizeof *global);
            params = fed_malloc(h.nparams * sizeof *params);
            cap = h.nparams;
            if (!global || !params) {
                e = site_fail(cfg->coll, "making room for the parameters", FED_ERR_NOMEM);
                break;
            }
        }
        if ((e = fed_coll_bcast(cfg->coll, global, h.nparams * sizeof *global)) != FED_OK) {
            e = site_fail(cfg->coll, "receiving the round's parameters", e);
            break;
        }
        j.set = h.set;
        j.set.spec[sizeof j.set.spec - 1] = '\0';
        j.round = h.round;
        j.seed = h.seed;
        j.be = cfg->be;
        j.pool = cfg->pool;
        j.shards = cfg->shards;
        j.accumulate = cfg->accumulate;
        j.recompute = cfg->recompute;
        j.precision = cfg->precision;
        j.data = cfg->train;
        j.shard = cfg->shard;
        j.shard_n = cfg->shard_n;
        j.global = global;
        j.nparams = h.nparams;
        j.params = params; /* the trained parameters stay here, unused */
        j.coll = cfg->coll;
        fed_node_train_job_run(&j.job); /* a failure there ended the job */
        if ((e = j.err) != FED_OK)
            break;
        fed_log(FED_LOG_DEBUG, "site: rank %d: round %llu trained", fed_coll_rank(cfg->coll),
                (unsigned long long)h.round);
    }
    fed_node_train_job_release(&j);
    fed_free(global);
    fed_free(params);
    return e;
}
