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
/* point-to-point tags: a stage's activations and gradients, its slice of
   the round's parameters out and of the trained ones back */
enum { SITE_TAG_PIPE = 1, SITE_TAG_SLICE = 2, SITE_TAG_TRAINED = 3 };

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

fed_err fedi_node_site_failed(const node_train_job *j, fed_err e)
{
    return site_fail(j->coll, "training", e);
}

int fedi_node_site_ranks(const node_train_job *j)
{
    return j->coll ? fed_coll_size(j->coll) : 1;
}

fed_err fedi_node_site_reduce(void *ctx, float *buf, size_t n)
{
    fed_coll *c = ctx;
    fed_err e = fed_coll_allreduce_sum(c, buf, n);

    return e == FED_OK ? FED_OK : site_fail(c, "the gradients' sum", e);
}

fed_err fedi_node_site_sum_stats(fed_coll *c, fed_step_stats *st)
{
    float v[3] = {(float)st->loss_sum, (float)st->correct, (float)st->samples};
    fed_err e = fedi_node_site_reduce(c, v, 3);

    if (e == FED_OK) {
        st->loss_sum = v[0];
        st->correct = (long)v[1];
        st->samples = (long)v[2];
    }
    return e;
}

int fedi_node_site_stage(const node_train_job *j)
{
    return j->pipe_stages > 1 ? fed_coll_rank(j->coll) % (int)j->pipe_stages : 0;
}

int fedi_node_site_replica(const node_train_job *j)
{
    return j->pipe_stages > 1 ? fed_coll_rank(j->coll) / (int)j->pipe_stages
                              : fed_coll_rank(j->coll);
}

/* The world rank of stage peer in this rank's replica. */
static int stage_rank(const node_train_job *j, int peer)
{
    return fedi_node_site_replica(j) * (int)j->pipe_stages + peer;
}

fed_err fedi_node_site_pipe_send(void *ctx, int peer, const float *buf, size_t n)
{
    const node_train_job *j = ctx;
    fed_err e = fed_coll_send(j->coll, stage_rank(j, peer), SITE_TAG_PIPE, buf, n);

    return e == FED_OK ? FED_OK : site_fail(j->coll, "sending to the next pipeline stage", e);
}

fed_err fedi_node_site_pipe_recv(void *ctx, int peer, float *buf, size_t n)
{
    const node_train_job *j = ctx;
    fed_err e = fed_coll_recv(j->coll, stage_rank(j, peer), SITE_TAG_PIPE, buf, n);

    return e == FED_OK ? FED_OK : site_fail(j->coll, "receiving from a pipeline stage", e);
}

fed_err fedi_node_site_pipe_gather(const node_train_job *j, fed_model *m, float *trained)
{
    int st = fedi_node_site_stage(j), R = fed_coll_size(j->coll);
    const fed_pipe_stage *sp = j->split;
    fed_err e;

    if (fedi_node_site_replica(j) != 0)
        return FED_OK; /* replica 0's parameters are every replica's */
    if (fed_coll_rank(j->coll) != 0) { /* trained is this stage's room */
        if ((e = fed_model_get_params(m, trained)) == FED_OK)
            e = fed_coll_send(j->coll, 0, SITE_TAG_TRAINED, trained, sp[st].p_hi - sp[st].p_lo);
        return e == FED_OK ? FED_OK : site_fail(j->coll, "sending the trained stage", e);
    }
    if ((e = fed_model_get_params(m, trained)) != FED_OK)
        return e;
    for (int s = 1; s < (int)j->pipe_stages && s < R; s++)
        if ((e = fed_coll_recv(j->coll, s, SITE_TAG_TRAINED, trained + sp[s].p_lo,
                               sp[s].p_hi - sp[s].p_lo)) != FED_OK)
            return site_fail(j->coll, "receiving the trained stages", e);
    return FED_OK;
}

fed_err fedi_node_site_announce(const node_train_job *j)
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
    h.set.graph = NULL; /* a pointer of this process: the text follows */
    if ((e = fed_coll_bcast(j->coll, &h, sizeof h)) != FED_OK)
        return site_fail(j->coll, "announcing the round", e);
    if (h.set.graph_len &&
        (e = fed_coll_bcast(j->coll, (void *)j->set.graph, h.set.graph_len)) != FED_OK)
        return site_fail(j->coll, "sending the model's graph", e);
    if (j->pipe_stages <= 1) {
        if ((e = fed_coll_bcast(j->coll, (void *)j->from, j->nparams * sizeof *j->from)) !=
            FED_OK)
            return site_fail(j->coll, "sending the round's parameters", e);
        return FED_OK;
    }
    /* a pipeline: each rank its stage's slice, no more */
    for (int r = 1; r < fed_coll_size(j->coll); r++) {
        const fed_pipe_stage *sp = &j->split[r % (int)j->pipe_stages];

        if ((e = fed_coll_send(j->coll, r, SITE_TAG_SLICE, j->from + sp->p_lo,
                               sp->p_hi - sp->p_lo)) != FED_OK)
            return site_fail(j->coll, "sending a stage its parameters", e);
    }
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

/* A pipeline rank's slice of the round's parameters: the split planned as
 * rank 0 planned it (the same spec, input and stages), then its stage's
 * floats from rank 0 into *global (grown to them), their offset in *off. */
static fed_err pipe_slice(const fed_node_site_rank_cfg *cfg, node_train_job *j, float **global,
                          float **params, size_t *cap)
{
    int st = fed_coll_rank(cfg->coll) % (int)cfg->pipe_stages;
    fed_model_shape in;
    char why[320];
    size_t n;
    fed_err e;

    if ((e = fedi_node_model_input(&j->set, cfg->train->shape, 0, &in, why, sizeof why)) !=
            FED_OK ||
        (e = fed_pipe_plan(j->set.graph ? j->set.graph : j->set.spec, in,
                           (int)cfg->pipe_stages, j->split, why, sizeof why)) != FED_OK) {
        fed_log(FED_LOG_ERROR, "site: rank %d: %s", fed_coll_rank(cfg->coll), why);
        return site_fail(cfg->coll, "planning the pipeline's stages", e);
    }
    n = j->split[st].p_hi - j->split[st].p_lo;
    if (n > *cap) {
        fed_free(*global);
        fed_free(*params);
        *global = fed_malloc(n * sizeof **global);
        *params = fed_malloc(n * sizeof **params);
        *cap = n;
        if (!*global || !*params)
            return site_fail(cfg->coll, "making room for the stage", FED_ERR_NOMEM);
    }
    if ((e = fed_coll_recv(cfg->coll, 0, SITE_TAG_SLICE, *global, n)) != FED_OK)
        return site_fail(cfg->coll, "receiving the stage's parameters", e);
    j->global_off = j->split[st].p_lo;
    return FED_OK;
}

fed_err fed_node_site_rank_run(const fed_node_site_rank_cfg *cfg)
{
    node_train_job j;
    site_hdr h;
    float *global = NULL, *params = NULL;
    char *graph = NULL;
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
        fed_free(graph);
        graph = NULL;
        h.set.graph = NULL;
        if (h.set.graph_len > FED_WIRE_GRAPH_MAX ||
            (h.set.graph_len && !(graph = fed_malloc(h.set.graph_len + 1)))) {
            e = site_fail(cfg->coll, "making room for the model's graph", FED_ERR_NOMEM);
            break;
        }
        if (h.set.graph_len) {
            if ((e = fed_coll_bcast(cfg->coll, graph, h.set.graph_len)) != FED_OK) {
                e = site_fail(cfg->coll, "receiving the model's graph", e);
                break;
            }
            graph[h.set.graph_len] = '\0';
            h.set.graph = graph;
        }
        j.set = h.set;
        j.set.spec[sizeof j.set.spec - 1] = '\0';
        if (cfg->pipe_stages > 1) {
            if ((e = pipe_slice(cfg, &j, &global, &params, &cap)) != FED_OK)
                break;
        } else if (h.nparams > cap) {
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
        if (cfg->pipe_stages <= 1 &&
            (e = fed_coll_bcast(cfg->coll, global, h.nparams * sizeof *global)) != FED_OK) {
            e = site_fail(cfg->coll, "receiving the round's parameters", e);
            break;
        }
        j.round = h.round;
        j.seed = h.seed;
        j.be = cfg->be;
        j.pool = cfg->pool;
        j.shards = cfg->shards;
        j.accumulate = cfg->accumulate;
        j.recompute = cfg->recompute;
        j.precision = cfg->precision;
        j.pipe_stages = cfg->pipe_stages;
        j.stage_coll = cfg->stage_coll;
        j.gpipe = cfg->gpipe;
        j.data = cfg->train;
        j.shard = cfg->shard;
        j.shard_n = cfg->shard_n;
        j.global = global;
        j.nparams = h.nparams;
        j.params = params; /* the trained parameters stay here, unused */
        j.coll = cfg->coll;
        fedi_node_train_job_run(&j.job); /* a failure there ended the job */
        if ((e = j.err) != FED_OK)
            break;
        fed_log(FED_LOG_DEBUG, "site: rank %d: round %llu trained", fed_coll_rank(cfg->coll),
                (unsigned long long)h.round);
    }
    fedi_node_train_job_release(&j);
    fed_free(global);
    fed_free(params);
    fed_free(graph);
    return e;
}
