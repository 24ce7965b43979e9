/* test_coll.c - the collective's shell and one-rank transport (mpi/coll.h):
 * slices cover [0, n) in rank order, as equal as can be; the bytes one
 * allreduce sends; the local transport leaves buffers as they are; a bad
 * table is refused and its transport closed. With MPI built and mpirun
 * present, the binary runs itself as 3 ranks (--mpi-child): every rank's sum
 * of buffers of sizes 0..100003 (uneven slices) is bit for bit the rank-order
 * sum, with values whose sum depends on the order; a broadcast of 3 MB
 * arrives whole. (A site over the transport: tests/test_mpi_site.sh.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "mpi/coll.h"

static void test_slices(void **state)
{
    (void)state;
    for (size_t n = 0; n < 40; n++)
        for (int r = 1; r <= 7; r++) {
            size_t prev = 0, lo, hi;

            for (int k = 0; k < r; k++) {
                fed_coll_slice(n, k, r, &lo, &hi);
                assert_int_equal(lo, prev);
                assert_true(hi - lo == n / (size_t)r || hi - lo == n / (size_t)r + 1);
                prev = hi;
            }
            assert_int_equal(prev, n);
        }
    size_t lo, hi;
    fed_coll_slice(10, 2, 3, &lo, &hi); /* 4, 3, 3 */
    assert_int_equal(lo, 7);
    assert_int_equal(hi, 10);
}

static void test_bytes(void **state)
{
    (void)state;
    assert_int_equal(fed_coll_allreduce_bytes(1000, 1), 0);
    /* two ranks: send the other half, then own half: n floats in all */
    assert_int_equal(fed_coll_allreduce_bytes(1000, 2), 4000);
    /* four: 3/4 n out in the scatter, 3/4 n in the gather */
    assert_int_equal(fed_coll_allreduce_bytes(1000, 4), 4 * (750 + 750));
}

static void test_local(void **state)
{
    fed_coll *c = NULL;
    float buf[5] = {1.5f, -2, 3, 0, 1e-30f}, want[5];
    uint8_t b[3] = {7, 8, 9};

    (void)state;
    memcpy(want, buf, sizeof buf);
    assert_int_equal(fed_coll_local_new(&c), FED_OK);
    assert_int_equal(fed_coll_rank(c), 0);
    assert_int_equal(fed_coll_size(c), 1);
    assert_string_equal(fed_coll_name(c), "local");
    assert_int_equal(fed_coll_timeout(c), 60000);
    fed_coll_set_timeout(c, 0);
    assert_int_equal(fed_coll_timeout(c), 1);
    assert_int_equal(fed_coll_allreduce_sum(c, buf, 5), FED_OK);
    assert_memory_equal(buf, want, sizeof buf);
    assert_int_equal(fed_coll_bcast(c, b, 3), FED_OK);
    assert_int_equal(b[2], 9);
    assert_int_equal(fed_coll_allreduce_sum(c, NULL, 5), FED_ERR_INVAL);
    { /* no point to point, no split: refused, not faked */
        fed_coll *sub = (fed_coll *)1;

        assert_int_equal(fed_coll_send(c, 0, 1, buf, 5), FED_ERR_UNSUPPORTED);
        assert_int_equal(fed_coll_recv(c, 0, 1, buf, 5), FED_ERR_UNSUPPORTED);
        assert_int_equal(fed_coll_split(c, 0, 0, &sub), FED_ERR_UNSUPPORTED);
        assert_null(sub);
    }
    fed_coll_abort(c, 3); /* returns: one rank has no job to end */
    fed_coll_free(c);
    fed_coll_free(NULL);
}

static int closed;
static void close_count(void *self)
{
    (void)self;
    closed++;
}

static void test_bad_table(void **state)
{
    static const fed_coll_ops half = {.name = "half", .close = close_count};
    fed_coll *c = (fed_coll *)&closed;

    (void)state;
    assert_int_equal(fed_coll_new(&half, NULL, 0, 1, &c), FED_ERR_INVAL);
    assert_null(c);
    assert_int_equal(closed, 1);
}

/* rank r's value at i: rank 0 near 1e8 (a float step of 8 there), the
 * others 3: in rank order each 3 rounds away (1e8), in any other order two
 * 3s meet first and their 6 shows (1e8 + 8) */
static float part(int r, size_t i)
{
    return r == 0 ? 1e8f + 8.0f * (float)(i % 7) : 3.0f;
}

/* --mpi-child: the checks each rank runs; 0 when all held on this rank. */
static int mpi_child(int argc, char **argv)
{
    static const size_t sizes[] = {0, 1, 2, 3, 5, 1000, 100003};
    fed_coll *c = NULL;
    int bad = 0, rank, size;

    if (fed_coll_mpi_open(&argc, &argv, &c) != FED_OK) {
        fprintf(stderr, "test_coll: MPI did not start\n");
        return 1;
    }
    rank = fed_coll_rank(c);
    size = fed_coll_size(c);
    fed_coll_set_timeout(c, 30000);
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        float *buf = malloc((n ? n : 1) * sizeof *buf);

        for (size_t i = 0; i < n; i++)
            buf[i] = part(rank, i);
        if (fed_coll_allreduce_sum(c, buf, n) != FED_OK)
            bad++;
        for (size_t i = 0; i < n; i++) {
            float want = part(0, i);

            for (int r = 1; r < size; r++)
                want += part(r, i);
            if (memcmp(&want, &buf[i], sizeof want) != 0) {
                if (bad++ < 3)
                    fprintf(stderr, "rank %d: n %zu, [%zu] = %.9g, want %.9g\n", rank, n, i,
                            (double)buf[i], (double)want);
            }
        }
        free(buf);
    }
    {
        size_t len = 3u << 20;
        unsigned char *b = malloc(len);

        for (size_t i = 0; i < len; i++)
            b[i] = rank == 0 ? (unsigned char)(i * 7 + 1) : 0;
        if (fed_coll_bcast(c, b, len) != FED_OK)
            bad++;
        for (size_t i = 0; i < len; i++)
            if (b[i] != (unsigned char)(i * 7 + 1)) {
                bad++;
                break;
            }
        free(b);
    }
    { /* point to point around the ring, in order per tag; bad peers and tags */
        size_t n = 100003;
        float *out = malloc(n * sizeof *out), *in = malloc(n * sizeof *in), one = 0;

        for (size_t i = 0; i < n; i++)
            out[i] = (float)(rank * 1000003 + (int)i);
        for (int round = 0; round < 2; round++) {
            int to = (rank + 1) % size, from = (rank + size - 1) % size;

            /* even ranks send first, odd ones receive first: no cycle of waits */
            if (rank % 2 == 0 && fed_coll_send(c, to, 5, out, n) != FED_OK)
                bad++;
            if (fed_coll_recv(c, from, 5, in, n) != FED_OK)
                bad++;
            if (rank % 2 == 1 && fed_coll_send(c, to, 5, out, n) != FED_OK)
                bad++;
            for (size_t i = 0; i < n; i++)
                if (in[i] != (float)(from * 1000003 + (int)i)) {
                    bad++;
                    break;
                }
        }
        if (fed_coll_send(c, rank, 5, &one, 1) != FED_ERR_INVAL ||
            fed_coll_send(c, size, 5, &one, 1) != FED_ERR_INVAL ||
            fed_coll_recv(c, (rank + 1) % size, FED_COLL_TAG_MAX + 1, &one, 1) != FED_ERR_INVAL)
            bad++;
        free(out);
        free(in);
    }
    { /* a split by parity: each half sums only its own */
        fed_coll *sub = NULL;
        float v = (float)(rank + 1), want = 0;

        if (fed_coll_split(c, rank % 2, rank, &sub) != FED_OK)
            bad++;
        else {
            for (int r = rank % 2; r < size; r += 2)
                want += (float)(r + 1);
            if (fed_coll_rank(sub) != rank / 2 || fed_coll_size(sub) != (size - rank % 2 + 1) / 2 ||
                fed_coll_timeout(sub) != 30000 || fed_coll_allreduce_sum(sub, &v, 1) != FED_OK ||
                v != want)
                bad++;
            fed_coll_free(sub);
        }
    }
    if (bad)
        fprintf(stderr, "test_coll: rank %d of %d: %d checks failed\n", rank, size, bad);
    fed_coll_free(c);
    return bad ? 1 : 0;
}

static void test_mpi_three_ranks(void **state)
{
    char self[4096], cmd[8192];
    ssize_t k;
    int rc;

    (void)state;
    if (!fed_coll_mpi_built() || system("command -v mpirun >/dev/null 2>&1") != 0) {
        printf("skipped: no MPI build or no mpirun\n");
        skip();
    }
    k = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(k > 0);
    self[k] = '\0';
    if (getuid() == 0) {
        setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
        setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    }
    snprintf(cmd, sizeof cmd,
             "mpirun --oversubscribe --host 127.0.0.1:64 --mca btl self,vader -np 3 '%s' "
             "--mpi-child", self);
    rc = system(cmd);
    assert_int_equal(rc, 0);
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--mpi-child"))
        return mpi_child(argc, argv);
    {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slices),   cmocka_unit_test(test_bytes),
        cmocka_unit_test(test_local),    cmocka_unit_test(test_bad_table),
        cmocka_unit_test(test_mpi_three_ranks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
    }
}
