/* test_agg_input.c - the round's aggregate input (node/agg_input_impl.h) over a
 * segmented vector: the model delta beside a synthetic second and third
 * segment (a control-variate-like sum, statistics averaged unweighted),
 * reduced plainly to the exact values each rule gives, and through secure
 * aggregation's quantization (each segment at its own range, masks that
 * cancel mod 2^32) to within each segment's stated bound; the secure
 * segments of today quantize to the very words one range did; integer
 * segments (INT64) sum exactly modulo 2^64, plainly and as limbs under
 * masks, at every word size, values near 2^63 and negative ones among
 * them. A model's
 * tensor table, marked by hand as a norm layer would mark it (a running
 * statistic, a counter), splits into the paths of node/layout.h: trained
 * floats, statistics, local floats, packed and unpacked exactly. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/rng.h"
#include "model/model.h"
#include "node/agg_input_impl.h"
#include "node/layout.h"
#include "secagg/quant.h"

enum { M = 3, LEN = 9 };

/* delta (4, SAMPLES), cv (3, SUM), stats (2, MEAN) */
static const agg_segment SEGS[3] = {
    {.name = "delta", .len = 4, .rule = AGG_WEIGHT_SAMPLES, .range = 4},
    {.name = "cv", .len = 3, .rule = AGG_WEIGHT_SUM, .range = 8},
    {.name = "stats", .len = 2, .rule = AGG_WEIGHT_MEAN, .range = 2},
};

/* dyadic values: every sum and quotient below is exact in float */
static const float X[M][LEN] = {
    {0.5f, -1.0f, 2.0f, 0.25f, 1.5f, -3.0f, 0.0f, 1.0f, -0.5f},
    {1.5f, 0.5f, -2.0f, 0.75f, 2.5f, 1.0f, 4.0f, 0.5f, 0.25f},
    {-0.5f, 1.0f, 1.0f, -0.25f, -1.0f, 0.5f, -2.0f, 1.5f, 1.25f},
};
static const double W[M] = {1, 2, 5};

/* By hand: delta = (1 x0 + 2 x1 + 5 x2) / 8; cv = x0 + x1 + x2;
 * stats = (x0 + x1 + x2) / 3 (1 and the float nearest 1/3). */
static void expected(float *out)
{
    /* delta: (0.5 + 3 - 2.5)/8, (-1 + 1 + 5)/8, (2 - 4 + 5)/8, (0.25 + 1.5 - 1.25)/8 */
    out[0] = 0.125f;
    out[1] = 0.625f;
    out[2] = 0.375f;
    out[3] = 0.0625f;
    /* cv: sums */
    out[4] = 3.0f;
    out[5] = -1.5f;
    out[6] = 2.0f;
    /* stats: (1 + 0.5 + 1.5) / 3, (-0.5 + 0.25 + 1.25) / 3 */
    out[7] = 1.0f;
    out[8] = (float)(1.0 / 3.0);
}

static void test_plain_segments(void **state)
{
    const float *x[M] = {X[0], X[1], X[2]};
    float out[LEN], want[LEN];

    (void)state;
    assert_int_equal(fedi_agg_seg_len(SEGS, 3), LEN);
    expected(want);
    assert_int_equal(fedi_agg_seg_reduce(SEGS, 3, x, W, M, out), FED_OK);
    for (int j = 0; j < LEN; j++)
        assert_true(out[j] == want[j]);
    /* no contribution; a weighted segment whose weights sum to 0 */
    assert_int_equal(fedi_agg_seg_reduce(SEGS, 3, x, W, 0, out), FED_ERR_INVAL);
    {
        const double zero[M] = {0, 0, 0};

        assert_int_equal(fedi_agg_seg_reduce(SEGS, 3, x, zero, M, out), FED_ERR_INVAL);
        const float *tail[M] = {X[0] + 4, X[1] + 4, X[2] + 4};

        /* without a SAMPLES segment the weights are not read */
        assert_int_equal(fedi_agg_seg_reduce(SEGS + 1, 2, tail, zero, M, out), FED_OK);
        assert_true(out[0] == 3.0f && out[3] == 1.0f);
    }
}

/* Each client: the delta times f = w / Wcap, cv and stats as they are, f
 * in a weight segment (2 r f - r), quantized at each segment's range, then
 * masked with pair masks that cancel; the sum unmasked and dequantized. */
static void test_secure_segments(void **state)
{
    const double wcap = 8, rw = 1;
    const uint32_t bits = 16;
    agg_segment segs[4];
    uint32_t q[M][LEN + 1], sum[LEN + 1], mask[LEN + 1];
    float x[LEN + 1], deq[LEN + 1], want[LEN];
    fed_rng rng;

    (void)state;
    memcpy(segs, SEGS, sizeof SEGS);
    segs[3] = (agg_segment){.name = "weight", .len = 1, .rule = AGG_WEIGHT_SUM, .range = rw};
    fed_rng_seed(&rng, 42);
    for (int i = 0; i < M; i++) {
        double f = W[i] / wcap;

        for (int j = 0; j < LEN; j++)
            x[j] = j < 4 ? (float)(X[i][j] * f) : X[i][j];
        x[LEN] = (float)(2 * rw * f - rw);
        assert_int_equal(fedi_agg_seg_quantize(segs, 4, bits, x, NULL, &rng, q[i]), FED_OK);
    }
    /* masks: client 0 adds, client 1 subtracts a pair's stream; 1 and 2 too */
    for (int pair = 0; pair < 2; pair++) {
        for (int j = 0; j <= LEN; j++)
            mask[j] = (uint32_t)fed_rng_below(&rng, UINT64_C(1) << 32);
        for (int j = 0; j <= LEN; j++) {
            q[pair][j] += mask[j];
            q[pair + 1][j] -= mask[j];
        }
    }
    memset(sum, 0, sizeof sum);
    for (int i = 0; i < M; i++)
        for (int j = 0; j <= LEN; j++)
            sum[j] += q[i][j];
    assert_int_equal(fedi_agg_seg_dequantize(segs, 4, bits, sum, M, deq, NULL), FED_OK);
    expected(want);
    {
        fed_secagg_quant qd = {.range = segs[0].range, .bits = bits};
        fed_secagg_quant qc = {.range = segs[1].range, .bits = bits};
        fed_secagg_quant qs = {.range = segs[2].range, .bits = bits};
        fed_secagg_quant qw = {.range = rw, .bits = bits};
        double ew = fed_secagg_quant_bound(&qw, M) / (2 * rw); /* on the weight */
        double weight = ((double)deq[LEN] + M * rw) / (2 * rw);
        double wtrue = (W[0] + W[1] + W[2]) / wcap;

        float got[LEN];

        assert_true(fabs(weight - wtrue) <= ew + 1e-6);
        fedi_agg_seg_finish(segs, 3, deq, M, weight, got); /* each by its rule */
        for (int j = 0; j < 4; j++) { /* the weighted mean, by the summed weight */
            double err = (fed_secagg_quant_bound(&qd, M) + fabs(want[j]) * ew) / (wtrue - ew);

            assert_true(fabs((double)got[j] - want[j]) <= err + 1e-6);
        }
        for (int j = 4; j < 7; j++) /* the sum, at its own (wider) range */
            assert_true(fabs((double)got[j] - want[j]) <= fed_secagg_quant_bound(&qc, M) + 1e-6);
        for (int j = 7; j < 9; j++) /* the mean over m */
            assert_true(fabs((double)got[j] - want[j]) <=
                        fed_secagg_quant_bound(&qs, M) / M + 1e-6);
        /* the rules by themselves, on a sum with no rounding in it */
        {
            const float d[LEN] = {1, 2, 3, 4, 5, 6, 7, 9, 12};
            float f[LEN];

            fedi_agg_seg_finish(segs, 3, d, M, 0.5, f);
            assert_true(f[0] == 2 && f[3] == 8 && f[4] == 5 && f[6] == 7 && f[7] == 3 &&
                        f[8] == 4);
        }
        /* each segment at its own scale: cv's step is 4 times stats' step,
           and one word of cv dequantizes to what 4 words of stats do */
        assert_true(fed_secagg_quant_bound(&qc, 1) == 4 * fed_secagg_quant_bound(&qs, 1));
    }
}

/* The secure contribution of today (delta, weight at one range) is the
 * very words one fed_secagg_quantize over the vector gave before. */
static void test_secure_as_one_range(void **state)
{
    enum { N = 1000 };
    static float x[N + 1];
    static uint32_t a[N + 1], b[N + 1];
    agg_segment segs[AGG_SEGMENTS_MAX];
    fed_secagg_quant q = {.range = 0.25, .bits = 20};
    agg_segment delta = {.name = "delta", .len = N, .rule = AGG_WEIGHT_SAMPLES, .range = q.range};
    fed_rng r1, r2;
    size_t nseg = fedi_agg_seg_secure(&delta, 1, q.range, 0, segs);

    (void)state;
    assert_int_equal(nseg, 2);
    assert_int_equal(fedi_agg_seg_len(segs, nseg), N + 1);
    fed_rng_seed(&r1, 7);
    for (int j = 0; j <= N; j++)
        x[j] = (float)(fed_rng_uniform(&r1) - 0.5) * 0.6f; /* some beyond the range */
    fed_rng_seed(&r1, 9);
    fed_rng_seed(&r2, 9);
    assert_int_equal(fedi_agg_seg_quantize(segs, nseg, q.bits, x, NULL, &r1, a), FED_OK);
    assert_int_equal(fed_secagg_quantize(&q, x, N + 1, &r2, b), FED_OK);
    assert_memory_equal(a, b, sizeof a);
    /* a value that is not finite: refused, nothing written */
    memset(a, 0xab, sizeof a);
    x[N] = NAN;
    assert_int_equal(fedi_agg_seg_quantize(segs, nseg, q.bits, x, NULL, &r1, a), FED_ERR_NAN);
    assert_int_equal(a[0], 0xababababu);
}

/* Integers that stress every limb and carry: both ends of int64, values
 * beside them, -1 (every bit set), small ones, and a pseudo-random spread.
 * The true sum modulo 2^64 is the sum of their two's complements. */
enum { IM = 7, IN = 6 };

static void int_inputs(int64_t v[IM][IN], uint64_t want[IN])
{
    fed_rng rng;

    fed_rng_seed(&rng, 35);
    for (int i = 0; i < IM; i++) {
        v[i][0] = INT64_MAX - i;       /* near 2^63: wraps when summed */
        v[i][1] = INT64_MIN + 3 * i;   /* near -2^63 */
        v[i][2] = -1 - i;              /* every high bit set */
        v[i][3] = (int64_t)(i * 1000003) - 3000000;
        v[i][4] = (int64_t)fed_rng_u64(&rng);
        v[i][5] = i % 2 ? (int64_t)1 << 62 : -((int64_t)1 << 61);
    }
    for (int j = 0; j < IN; j++) {
        uint64_t acc = 0;

        for (int i = 0; i < IM; i++)
            acc += (uint64_t)v[i][j];
        want[j] = acc;
    }
    /* a sum that fits int64 reads back as itself */
    assert_true((int64_t)want[3] == 7 * 0 - 21000000 + 1000003 * 21);
}

/* Plain: the sum modulo 2^64, in any order; an INT64 segment must SUM. */
static void test_int_plain(void **state)
{
    int64_t v[IM][IN];
    uint64_t want[IN], got[IN];
    const int64_t *ix[IM];
    agg_segment segs[2] = {
        {.name = "mean", .len = 2, .rule = AGG_WEIGHT_MEAN, .range = 1},
        {.name = "ints", .len = IN, .rule = AGG_WEIGHT_SUM, .enc = AGG_ENC_INT64},
    };

    (void)state;
    int_inputs(v, want);
    for (int i = 0; i < IM; i++)
        ix[i] = v[i];
    assert_int_equal(fedi_agg_seg_len(segs, 2), 2);
    assert_int_equal(fedi_agg_seg_ints(segs, 2), IN);
    assert_int_equal(fedi_agg_seg_reduce_ints(segs, 2, ix, IM, got), FED_OK);
    assert_memory_equal(got, want, sizeof want);
    assert_int_equal(fedi_agg_seg_reduce_ints(segs, 2, ix, 0, got), FED_ERR_INVAL);
    segs[1].rule = AGG_WEIGHT_MEAN;
    assert_int_equal(fedi_agg_seg_reduce_ints(segs, 2, ix, IM, got), FED_ERR_INVAL);
}

/* Secure: floats and integers in one contribution, at every word size
 * whose check passes for IM clients; the words masked with pair streams
 * that cancel mod 2^32; the integers come back exact, the floats as
 * before, and the limbs of each word are within the round's range check. */
static void test_int_secure(void **state)
{
    int64_t v[IM][IN];
    uint64_t want[IN], got[IN];
    agg_segment segs[AGG_SEGMENTS_MAX];
    const agg_segment two = {.name = "delta", .len = 2, .rule = AGG_WEIGHT_SAMPLES, .range = 1.0};
    float x[3] = {0.5f, -0.25f, 0.75f}, deq[3];
    fed_rng rng;

    (void)state;
    int_inputs(v, want);
    assert_int_equal(fedi_agg_int_limbs(32), 2);
    assert_int_equal(fedi_agg_int_limbs(20), 4);
    assert_int_equal(fedi_agg_int_limbs(16), 4);
    assert_int_equal(fedi_agg_int_limbs(1), 64);
    fed_rng_seed(&rng, 36);
    for (uint32_t bits = 1; bits <= 29; bits++) { /* 7 (2^bits - 1) < 2^32 */
        size_t nseg = fedi_agg_seg_secure(&two, 1, 1.0, IN, segs);
        size_t words = fedi_agg_seg_words(segs, nseg, bits);
        uint32_t q[IM][2 + 1 + IN * 64], sum[2 + 1 + IN * 64];
        fed_secagg_quant qc = {.range = 1.0, .bits = bits};
        uint64_t top = (uint64_t)IM * ((UINT64_C(1) << bits) - 1);

        assert_int_equal(nseg, 3);
        assert_int_equal(words, 3 + IN * fedi_agg_int_limbs(bits));
        assert_int_equal(fed_secagg_quant_check(&qc, IM, NULL, 0), FED_OK);
        for (int i = 0; i < IM; i++)
            assert_int_equal(fedi_agg_seg_quantize(segs, nseg, bits, x, v[i], &rng, q[i]),
                             FED_OK);
        for (int i = 0; i + 1 < IM; i++) /* pair masks: i adds, i + 1 subtracts */
            for (size_t w = 0; w < words; w++) {
                uint32_t mk = (uint32_t)fed_rng_below(&rng, UINT64_C(1) << 32);

                q[i][w] += mk;
                q[i + 1][w] -= mk;
            }
        memset(sum, 0, sizeof sum);
        for (int i = 0; i < IM; i++)
            for (size_t w = 0; w < words; w++)
                sum[w] += q[i][w];
        for (size_t w = 0; w < words; w++) /* the aggregator's range check holds */
            assert_true(sum[w] <= top);
        memset(got, 0, sizeof got);
        assert_int_equal(fedi_agg_seg_dequantize(segs, nseg, bits, sum, IM, deq, got), FED_OK);
        assert_memory_equal(got, want, sizeof want);
        for (int j = 0; j < 2; j++) /* the floats beside them: within their bound */
            assert_true(fabs((double)deq[j] - IM * (double)x[j]) <=
                        fed_secagg_quant_bound(&qc, IM) + 1e-6);
    }
    /* integers without their array; an integer segment that does not sum */
    {
        size_t nseg = fedi_agg_seg_secure(&two, 1, 1.0, IN, segs);
        uint32_t q[3 + IN * 4];

        assert_int_equal(fedi_agg_seg_quantize(segs, nseg, 20, x, NULL, &rng, q), FED_ERR_INVAL);
        segs[2].rule = AGG_WEIGHT_SAMPLES;
        assert_int_equal(fedi_agg_seg_quantize(segs, nseg, 20, x, v[0], &rng, q), FED_ERR_INVAL);
    }
}

/* mlp:4 over 5 features, 3 classes: 0.weight (20 floats at 0), 0.bias (4
 * at 20), 2.weight (12 at 24), 2.bias (3 at 36). 0.bias marked a norm
 * layer's running statistic (NORM, not TRAINED), 2.bias a counter. */
static fed_model *marked_model(fed_backend *be)
{
    fed_model_shape in = {.c = 1, .h = 1, .w = 5, .classes = 3};
    fed_model *m = NULL;

    assert_int_equal(fed_model_new("mlp:4", in, be, NULL, 1, 8, &m), FED_OK);
    assert_int_equal(fed_model_nparams(m), 39);
    assert_int_equal(fed_model_tensor_flags(m, "0.bias", FED_TENSOR_NORM, FED_TENSOR_TRAINED), 1);
    assert_int_equal(fed_model_tensor_flags(m, "nothing.*,2.bias", FED_TENSOR_INT64, 0), 1);
    return m;
}

static void layout_of(const fed_model *m, const layout_rules *r, fed_node_layout *l)
{
    int nt;
    const fed_tensor_info *t = fed_model_tensors(m, &nt);

    assert_int_equal(nt, 4);
    assert_int_equal(fed_node_layout_of(t, nt, fed_model_nparams(m), r, l), FED_OK);
}

static void test_layout_paths(void **state)
{
    fed_backend *be = NULL;
    fed_model *m;
    fed_node_layout l;
    layout_rules none = {0}, head = {.local_layers = "2.*"}, bn = {.local_bn = 1},
                 dp = {.local_bn = 1, .stats_local = 1};
    agg_segment segs[AGG_SEGMENTS_MAX];
    float full[39], sent[39], back[39];
    int nt;

    (void)state;
    assert_int_equal(fed_backend_cpu_new(1, &be), FED_OK);
    m = marked_model(be);
    assert_true(fed_model_tensors(m, &nt)[1].flags == (FED_TENSOR_SHARED | FED_TENSOR_NORM));
    for (int i = 0; i < 39; i++)
        full[i] = (float)(i + 1);
    /* no rule: the weights trained, the statistic its own segment, the
       counter at the site */
    layout_of(m, &none, &l);
    assert_int_equal(l.len[LAYOUT_TRAINED], 32);
    assert_int_equal(l.len[LAYOUT_STATS], 4);
    assert_int_equal(l.len[LAYOUT_LOCAL], 3);
    assert_false(fed_node_layout_trivial(&l));
    assert_int_equal(fed_node_layout_sent(&l), 36);
    assert_int_equal(fed_node_layout_segments(&l, 4, 64, segs), 2);
    assert_int_equal(segs[0].len, 32);
    assert_int_equal(segs[0].rule, AGG_WEIGHT_SAMPLES);
    assert_true(segs[0].range == 4);
    assert_int_equal(segs[1].len, 4);
    assert_int_equal(segs[1].rule, AGG_WEIGHT_SAMPLES);
    assert_true(segs[1].range == 64);
    fed_node_layout_pack(&l, full, sent);
    for (int i = 0; i < 20; i++) /* 0.weight, then 2.weight, then 0.bias */
        assert_true(sent[i] == (float)(i + 1));
    for (int i = 0; i < 12; i++)
        assert_true(sent[20 + i] == (float)(25 + i));
    for (int i = 0; i < 4; i++)
        assert_true(sent[32 + i] == (float)(21 + i));
    { /* in place: the same floats, the statistics (before 2.weight) kept aside */
        float in[39], st[4];

        memcpy(in, full, sizeof in);
        fed_node_layout_pack_inplace(&l, in, st);
        assert_memory_equal(in, sent, 36 * sizeof(float));
    }
    memset(back, 0xff, sizeof back);
    fed_node_layout_unpack(&l, sent, back);
    assert_memory_equal(back, full, 36 * sizeof(float));
    for (int i = 36; i < 39; i++) /* the counter: nothing of it came */
        assert_true(back[i] == 0.0f);
    fed_node_layout_fini(&l);
    /* --local-layers 2.*: the head stays, 0.weight alone is trained */
    layout_of(m, &head, &l);
    assert_int_equal(l.len[LAYOUT_TRAINED], 20);
    assert_int_equal(l.len[LAYOUT_STATS], 4);
    assert_int_equal(l.len[LAYOUT_LOCAL], 15);
    fed_node_layout_pack(&l, full, sent);
    for (int i = 0; i < 24; i++) /* 0.weight, 0.bias: no float of the head */
        assert_true(sent[i] == (float)(i + 1));
    fed_node_layout_fini(&l);
    /* --local-bn: the norm tensor stays; DP: so would every statistic */
    layout_of(m, &bn, &l);
    assert_int_equal(l.len[LAYOUT_TRAINED], 32);
    assert_int_equal(l.len[LAYOUT_STATS], 0);
    assert_int_equal(l.len[LAYOUT_LOCAL], 7);
    assert_int_equal(fed_node_layout_segments(&l, 4, 64, segs), 1);
    fed_node_layout_fini(&l);
    assert_int_equal(fed_model_tensor_flags(m, "0.bias", 0, FED_TENSOR_NORM), 1);
    layout_of(m, &dp, &l);
    assert_int_equal(l.len[LAYOUT_STATS], 0);
    assert_int_equal(l.len[LAYOUT_LOCAL], 7);
    fed_node_layout_fini(&l);
    /* an unmarked model: the whole flat buffer, as before */
    assert_int_equal(fed_model_tensor_flags(m, "*", FED_TENSOR_TRAINED, FED_TENSOR_INT64), 4);
    layout_of(m, &none, &l);
    assert_true(fed_node_layout_trivial(&l));
    assert_int_equal(fed_node_layout_sent(&l), 39);
    fed_node_layout_fini(&l);
    fed_model_free(m);
    fed_backend_free(be);
}

/* --local-layers values: globs, no empty one, no spaces, at most 255 bytes. */
/* A strategy's extra segment after the tensors': SCAFFOLD's control change
 * (the 32 trained floats, rule MEAN, the delta's range), FedNova's steps
 * (one float, SAMPLES, FED_NODE_STEPS_RANGE); a full buffer carries it
 * after its 39 floats, a sent delta after segment 1. */
static void test_layout_extra(void **state)
{
    fed_backend *be = NULL;
    fed_model *m;
    fed_node_layout l;
    layout_rules scaffold = {.scaffold = 1}, nova = {.fednova = 1};
    agg_segment segs[AGG_SEGMENTS_MAX];
    float full[39 + 32], sent[39 + 32], in[39 + 32], st[4];

    (void)state;
    assert_int_equal(fed_backend_cpu_new(1, &be), FED_OK);
    m = marked_model(be);
    for (int i = 0; i < 39 + 32; i++)
        full[i] = (float)(i + 1);
    layout_of(m, &scaffold, &l);
    assert_int_equal(l.extra, 32);
    assert_false(fed_node_layout_trivial(&l));
    assert_int_equal(fed_node_layout_sent(&l), 36 + 32);
    assert_int_equal(fed_node_layout_segments(&l, 4, 64, segs), 3);
    assert_int_equal(segs[2].len, 32);
    assert_int_equal(segs[2].rule, AGG_WEIGHT_MEAN);
    assert_true(segs[2].range == 4);
    fed_node_layout_pack(&l, full, sent);
    for (int i = 0; i < 32; i++) /* the tail of the full buffer, after segment 1 */
        assert_true(sent[36 + i] == (float)(40 + i));
    assert_true(fed_node_layout_extra(&l, sent) == sent + 36);
    memcpy(in, full, sizeof in);
    fed_node_layout_pack_inplace(&l, in, st);
    assert_memory_equal(in, sent, 68 * sizeof(float));
    fed_node_layout_fini(&l);
    layout_of(m, &nova, &l);
    assert_int_equal(fed_node_layout_sent(&l), 37);
    assert_int_equal(fed_node_layout_segments(&l, 4, 64, segs), 3);
    assert_int_equal(segs[2].len, 1);
    assert_int_equal(segs[2].rule, AGG_WEIGHT_SAMPLES);
    assert_true(segs[2].range == FED_NODE_STEPS_RANGE);
    fed_node_layout_pack(&l, full, sent);
    assert_true(sent[36] == 40.0f);
    fed_node_layout_fini(&l);
    /* an unmarked model with a strategy's segment is no longer trivial */
    assert_int_equal(fed_model_tensor_flags(m, "*", FED_TENSOR_TRAINED, FED_TENSOR_INT64), 4);
    layout_of(m, &nova, &l);
    assert_false(fed_node_layout_trivial(&l));
    assert_int_equal(fed_node_layout_sent(&l), 40);
    fed_node_layout_fini(&l);
    fed_model_free(m);
    fed_backend_free(be);
}

static void test_layout_patterns(void **state)
{
    char longest[300];

    (void)state;
    assert_true(fed_node_layout_patterns_ok(""));
    assert_true(fed_node_layout_patterns_ok("fc3.*"));
    assert_true(fed_node_layout_patterns_ok("fc3.*,conv1.bias"));
    assert_false(fed_node_layout_patterns_ok(","));
    assert_false(fed_node_layout_patterns_ok("fc3.*,"));
    assert_false(fed_node_layout_patterns_ok("a,,b"));
    assert_false(fed_node_layout_patterns_ok("fc3 .*"));
    memset(longest, 'a', sizeof longest);
    longest[255] = '\0';
    assert_true(fed_node_layout_patterns_ok(longest));
    longest[255] = 'a';
    longest[256] = '\0';
    assert_false(fed_node_layout_patterns_ok(longest));
    assert_true(fed_model_tensor_match("fc?.weight,x", "fc3.weight"));
    assert_false(fed_model_tensor_match("fc?.weight,x", "fc3.bias"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout_paths),
        cmocka_unit_test(test_layout_patterns),
        cmocka_unit_test(test_layout_extra),
        cmocka_unit_test(test_plain_segments),
        cmocka_unit_test(test_secure_segments),
        cmocka_unit_test(test_secure_as_one_range),
        cmocka_unit_test(test_int_plain),
        cmocka_unit_test(test_int_secure),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
