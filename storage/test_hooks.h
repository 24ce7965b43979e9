/* test_hooks.h - the store's one seam for tests: a full disk on demand.
 * Kept out of storage/store.h so that no daemon code sees it: only tests/
 * include this header (node/test_hooks.h is the node's seam). */
#ifndef FED_STORAGE_TEST_HOOKS_H
#define FED_STORAGE_TEST_HOOKS_H

#include "storage/store.h"

/* While full is set, every write transaction (a commit, or a write outside
 * begin/commit) is rolled back and fails with FED_ERR_FULL; reads work. A
 * max_bytes cap only stops the file growing, so a row replaced in place (a
 * round's accuracy added) still fits; on a disk with no space left even
 * that fails (its WAL frames). */
void fedi_store_set_disk_full(fed_store *st, int full);

#endif
