/* merge_impl.h - internals shared by model/merge*.c: the merge object, its
 * parsed parameters and scratch, and the hooks each strategy file exports.
 * Not a public header: only model/merge*.c include it. */
#ifndef FED_MODEL_MERGE_IMPL_H
#define FED_MODEL_MERGE_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "model/merge.h"

typedef enum merge_kind {
    MK_FEDAVG = 0,
    MK_FEDAVGM,
    MK_FEDPROX,
    MK_FEDADAM,
    MK_FEDYOGI,
    MK_FEDADAGRAD,
    MK_MEDIAN,
    MK_TRIMMED,
    MK_KRUM,
    MK_MULTIKRUM,
    MK_BULYAN,
    MK_FEDNOVA,   /* FedAvg's sum of normalized deltas, x += tau_eff D */
    MK_SCAFFOLD,  /* FedAvg's sum, x += ETA D; the control variates are the node's */
} merge_kind;

/* A parsed spec. */
typedef struct merge_params {
    merge_kind kind;
    double clip;       /* 0: no clipping */
    double beta;       /* fedavgm momentum, trimmed fraction */
    double eta;        /* server learning rate (fedavgm, adaptive) */
    double b1, b2, tau; /* adaptive */
    double mu;         /* fedprox */
    int f;             /* krum, multikrum, bulyan */
    int mm;            /* multikrum M */
} merge_params;

/* Per-client working row, in key order. */
typedef struct merge_row {
    const float *delta; /* (nparams) device */
    const uint8_t *key; /* (FED_MERGE_KEY_BYTES) */
    double weight;      /* claimed */
    double sq;          /* ||delta||^2, or -1 when not computed */
    double share;       /* as in fed_merge_result */
    double score;
    float scale;        /* clip factor */
    int index;          /* the caller's index */
    int used;           /* 0 rejected, 1 valid */
    fed_merge_verdict verdict;
    fed_err err;
} merge_row;

/* The pool splits a weighted sum of at most this many inputs (a slice's
 * pointers live on the stack). */
#define FED_MERGE_SLICE_MAX_INPUTS 256

struct fed_merge {
    merge_params p;
    char spec[FED_MERGE_SPEC_MAX];
    size_t nparams;
    fed_backend *be;
    int host;           /* be's pointers are host memory (FED_BACKEND_CAP_HOST_MEMORY) */
    int max_clients;
    double weight_cap;
    fed_pool *pool;     /* the weighted sum's slices (host), or NULL */
    double step_scale;  /* the next apply's x += step_scale D (FedNova's tau_eff); 1 after */

    float *delta;       /* (nparams) device: the merged delta D */
    /* fedavgm */
    float *mom;         /* (nparams) device */
    /* adaptive: state on the host; hx, hd stage x and D when !host */
    float *am, *av;     /* (nparams) host */
    float *hx, *hd;     /* (nparams) host, !host only */

    /* per client (max_clients) */
    merge_row *rows;    /* in key order */
    int *order, *otmp;  /* sort scratch */
    merge_row **valid;  /* the valid rows in key order */
    const float **ptrs;
    double *w;

    /* coordinate-wise (median, trimmed, bulyan) */
    size_t tcap;        /* floats in tbuf and stage: r clients x blk coordinates */
    float *tbuf;        /* (tcap) host: a block's values, rows or transposed */
    float *stage;       /* (tcap) host, !host only: the block as downloaded */
    float *hout;        /* (BLK_MAX) host, !host only */
    float *lo, *hi;     /* (BLK_MAX) host: kept range per coordinate */
    double *acc;        /* (BLK_MAX) host: trimmed sums */
    size_t *kept;       /* (max_clients) coordinates kept per client */

    /* krum, multikrum, bulyan */
    size_t kblk;        /* coordinates per gemm block */
    float *kstage;      /* (max_clients, kblk) device */
    float *gdev;        /* (max_clients, max_clients) device */
    float *ghost;       /* (max_clients, max_clients) host */
    double *gram;       /* (max_clients, max_clients) host */
    double *dist;       /* (max_clients, max_clients) host */
    double *tmp;        /* (max_clients) host */
    double *score;      /* (max_clients) host: Krum scores */
    int *sel;           /* (max_clients) */
    int *alive;         /* (max_clients) */
};

/* merge_robust.c: D from the valid rows (nv of them, in key order). */
fed_err fedi_merge_robust_alloc(fed_merge *m);
void fedi_merge_robust_free(fed_merge *m);
fed_err fedi_merge_robust_run(fed_merge *m, int nv);

/* merge_adaptive.c: the server step x += f(D) for fedavgm and the adaptive
 * strategies, and their state. */
fed_err fedi_merge_adaptive_alloc(fed_merge *m);
void fedi_merge_adaptive_free(fed_merge *m);
fed_err fedi_merge_adaptive_step(fed_merge *m, float *global);
size_t fedi_merge_adaptive_state_floats(const fed_merge *m);
fed_err fedi_merge_adaptive_get_state(const fed_merge *m, float *dst);
fed_err fedi_merge_adaptive_set_state(fed_merge *m, const float *src);

#endif
