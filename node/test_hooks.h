/* test_hooks.h - the one seam through which the simulator and the tests
 * make a node misbehave: a Byzantine client's delta, a cheating
 * aggregator's secure-aggregation messages, a faulty all-reduce member's
 * sums, a model's tensors marked as a layer not built yet would mark them;
 * and the simulator's economies for its peers. A node reaches it only
 * through fed_node_config.hooks, which is NULL
 * in every real node: no option or INI key sets it, and
 * fed_node_daemon_run refuses a config that carries one. */
#ifndef FED_NODE_TEST_HOOKS_H
#define FED_NODE_TEST_HOOKS_H

#include <stddef.h>
#include <stdint.h>

struct fed_model;

typedef struct fed_node_test_hooks {
    void *ctx; /* passed to every hook below */
    /* client: called with the round and the delta (trained - global, n
       floats) before it is encoded, in the training job (off the loop): it
       may change the delta in place (fedsim's --byzantine, sim/attack.h) */
    void (*tamper_delta)(void *ctx, uint64_t round, float *delta, size_t n);
    /* aggregator with secagg: called on the loop for each stage request it
       takes (inbound 1: the request's vector, to look at or to change in
       place, as a client sending a bad input would) and each answer it is
       about to send (inbound 0: a copy, which it may change or shorten,
       *len and *count with it), with the client's key and the frame type */
    void (*sa_tamper)(void *ctx, int inbound, uint8_t type, const uint8_t key[32], uint8_t *vec,
                      size_t *len, uint32_t *count);
    /* peer with --mixing allreduce: called when this member's run of
       (round, attempt) is done, on its sums (n doubles, the total weight
       last) before it hashes them: it may change them, and the member then
       holds (and, if the round's check passes, takes) what it left */
    void (*ar_tamper)(void *ctx, uint64_t round, uint32_t attempt, double *sums, size_t n);
    /* aggregator, client: called with each model the node builds for its
       rounds (the aggregator's global when the role is made, a client's
       training model in the job), before its tensor table is read: it may
       mark tensors (fed_model_tensor_flags, model/model.h) as a norm
       layer marks its statistics, so a test has non-trained tensors
       before any layer makes them */
    void (*mark_model)(void *ctx, struct fed_model *m);
    /* The simulator's economies for the peers it runs one event at a time
       (none changes a result; every real node has none): */
    struct fed_model *eval_model; /* borrowed, for evaluating on data.test (its
                                     spec's, batch 256) instead of one of the
                                     peer's own: one lent to all; NULL: its own */
    int train_model_per_job;      /* the training model made for each round's job
                                     and freed at its end, so no more exist than
                                     jobs run at once on the pool (the same bits: a
                                     step reads nothing a model kept) */
    int no_final_mix_eval;        /* the final mixing rounds not evaluated on
                                     data.test (fedsim prints no row for them) */
    int no_checkpoints;           /* for a peer nothing can crash (its in-memory
                                     database would hold each checkpoint, that
                                     nobody reads): rounds recorded, checkpoints
                                     never written */
} fed_node_test_hooks;

#endif
