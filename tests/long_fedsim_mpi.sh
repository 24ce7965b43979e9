#!/bin/sh
# long_fedsim_mpi.sh - `make test-long`: test_fedsim_mpi.sh at every rank
# count, R = 1, 2 and 3 for each scenario (`make test` runs R = 3, the
# uneven split, and R = 2 for the faults). Skips as it does.
RANKS="1 2 3" exec sh "$(dirname "$0")/test_fedsim_mpi.sh"
