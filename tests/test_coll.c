/* test_coll.c - the collective's shell and one-rank transport (mpi/coll.h):
 * slices cover [0, n) in rank order, as equal as can be; the bytes one
 * allreduce sends; the local transport leaves buffers as they are; a bad
 * table is refused and its transport closed. The MPI transport itself runs
 * under mpirun in tests/test_mpi_site.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slices),   cmocka_unit_test(test_bytes),
        cmocka_unit_test(test_local),    cmocka_unit_test(test_bad_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
