/* optim.h - local optimizers over a model's flat buffers: SGD (momentum,
 * weight decay, Nesterov) and Adam, learning-rate schedules (constant, step,
 * cosine, each after an optional linear warm-up), and FedProx's proximal
 * term as an option of the step. The state (moments, step count) is
 * exported as flat floats for checkpoints. A schedule is a pure function of
 * a step count (fed_optim_sched_lr): the optimizer counts its steps, a node
 * counts rounds (node/node.h), with the same code. */
#ifndef FED_MODEL_OPTIM_H
#define FED_MODEL_OPTIM_H

#include <stddef.h>

#include "core/err.h"
#include "model/model.h"

typedef enum fed_optim_kind { FED_OPTIM_SGD = 0, FED_OPTIM_ADAM = 1 } fed_optim_kind;
/* The rate at step s (0-based): with W = warmup_steps > 0, lr * (s + 1) /
 * (W + 1) while s < W (rising linearly towards lr), then the schedule below
 * at t = s - W, as if the run began after the warm-up. */
typedef enum fed_sched_kind {
    FED_SCHED_CONST = 0,
    FED_SCHED_STEP = 1,   /* lr * gamma^(floor(t / step_size)) */
    FED_SCHED_COSINE = 2, /* lr * (1 + cos(pi * t / (total - W))) / 2; 0 from
                             t = total - W on */
} fed_sched_kind;

typedef struct fed_optim_cfg {
    fed_optim_kind kind;
    float lr;
    float momentum;     /* SGD */
    float weight_decay;
    int nesterov;       /* SGD */
    float beta1, beta2, eps; /* Adam */
    fed_sched_kind sched;
    long step_size;     /* STEP: steps between decays */
    float gamma;        /* STEP: decay factor */
    long total_steps;   /* COSINE: steps over which lr falls to 0, the
                           warm-up included */
    long warmup_steps;  /* steps of linear warm-up before the schedule; 0: none */
    float prox_mu;      /* FedProx: > 0 adds mu (w - w0) to the gradient */
} fed_optim_cfg;

typedef struct fed_optim fed_optim;

/* The learning rate an optimizer trains at when none is given: fednode
 * train's, fednode run's and fedsim's --lr default, a node's (lr 0) and
 * fed_optim_cfg_default's. Measured on Fashion-MNIST, mlp:256,128, batch 64,
 * cosine, 10 epochs (docs/settings.md). The numbers are macros for help texts
 * (FED_OPTIM_LR_HELP); code asks fed_optim_default_lr. */
#define FED_OPTIM_SGD_LR 0.05
#define FED_OPTIM_ADAM_LR 0.002
#define FED_OPTIM_STR_(x) #x
#define FED_OPTIM_STR(x) FED_OPTIM_STR_(x)
#define FED_OPTIM_LR_HELP                                                      \
    "0: the optimizer's own, sgd " FED_OPTIM_STR(FED_OPTIM_SGD_LR) ", adam "   \
        FED_OPTIM_STR(FED_OPTIM_ADAM_LR)
float fed_optim_default_lr(fed_optim_kind kind);
/* An --lr as given: lr itself when > 0, kind's default when 0 (not given).
 * Negative or NaN stay as they are, for the caller's check to refuse. */
float fed_optim_resolve_lr(fed_optim_kind kind, double lr);

/* Sensible defaults for kind: fed_optim_default_lr, SGD momentum 0.9. */
void fed_optim_cfg_default(fed_optim_cfg *cfg, fed_optim_kind kind);
/* "sgd" or "adam" (case-sensitive). */
FED_WUR fed_err fed_optim_kind_parse(const char *name, fed_optim_kind *out);
/* "const", "step:STEPS,GAMMA", "cosine:TOTAL" into cfg; plain "cosine"
 * leaves total_steps 0 for the caller to fill in (the run's length; while
 * it is 0 the rate stays constant). Anything else: FED_ERR_BAD_VALUE. */
FED_WUR fed_err fed_optim_sched_parse(const char *text, fed_optim_cfg *cfg);
/* A schedule as a run's options give it, counted in the run's units
 * (fednode train's epochs, a node's rounds), into cfg's steps: "const",
 * "step:UNITS,GAMMA" (times GAMMA every UNITS units after the warm-up) or
 * "cosine" (down to 0 at the end of the run: over units units), after
 * warmup units of linear warm-up; per_unit steps make one unit. "cosine:N"
 * (a step count) is not a run's: FED_ERR_BAD_VALUE, as is cosine without a
 * run's length (units 0) or with no unit left after the warm-up, and a
 * warm-up below 0. */
FED_WUR fed_err fed_optim_sched_of_run(const char *text, long units, long warmup, long per_unit,
                                       fed_optim_cfg *cfg);
/* The rate cfg's schedule gives at step (0-based; see fed_sched_kind). */
float fed_optim_sched_lr(const fed_optim_cfg *cfg, long step);

FED_WUR fed_err fed_optim_new(const fed_optim_cfg *cfg, fed_model *m, fed_optim **out);
void fed_optim_free(fed_optim *o);
/* Bytes of the state fed_optim_new keeps for nparams parameters under cfg
 * (momentum or Adam's moments, FedProx's anchor). */
size_t fed_optim_state_bytes(const fed_optim_cfg *cfg, size_t nparams);

/* One step from the model's gradient buffer; counts steps for schedules. */
FED_WUR fed_err fed_optim_step(fed_optim *o, fed_model *m);
/* Forward, backward and this step on batch b in one pass over the pool
 * (see fed_model_train_step): the same result as forward_backward then
 * fed_optim_step, faster. The trainer uses it. */
FED_WUR fed_err fed_optim_train_step(fed_optim *o, fed_model *m, const fed_batch *b,
                                     fed_step_stats *st);
/* FedProx: remember the current parameters as w0 (call at round start). */
FED_WUR fed_err fed_optim_set_anchor(fed_optim *o, fed_model *m);
/* SCAFFOLD (Karimireddy et al. 2020): every later step adds corr (host,
 * n floats: c - c_i) to the gradient before the update, after FedProx's
 * term. */
FED_WUR fed_err fed_optim_set_correction(fed_optim *o, const float *corr);
float fed_optim_lr(const fed_optim *o); /* the rate the next step uses */
long fed_optim_steps(const fed_optim *o);

/* Checkpointing: the moments as (state_floats) host floats plus the step. */
size_t fed_optim_state_floats(const fed_optim *o);
FED_WUR fed_err fed_optim_get_state(const fed_optim *o, float *dst, long *step);
FED_WUR fed_err fed_optim_set_state(fed_optim *o, const float *src, long step);

#endif
