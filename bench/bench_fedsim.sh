#!/bin/sh
# bench_fedsim.sh - fedsim at scale: wall seconds a round and peak memory
# for 1,000 clients (10% a round, mlp:256,128), 10,000 clients (10% a round,
# logreg) and 1,000 peers (random:3, logreg; 10 of them evaluate), every
# frame sealed and opened, in-memory databases. Prints fedsim's own closing
# line for each (wall time to the first round, then per round, and peak RSS)
# on this machine; asserts nothing.
set -u
FEDSIM=${FEDSIM:-./fedsim}
if [ ! -x "$FEDSIM" ]; then echo "bench_fedsim: skipped: no $FEDSIM (run make)"; exit 0; fi
run() {
    label=$1; shift
    printf '%-44s ' "$label"
    "$FEDSIM" "$@" 2>/dev/null | tail -n 1 || echo "failed"
}
echo "bench_fedsim: $(nproc) cores"
run "1,000 clients, 10% a round, mlp:256,128:" --nodes 1000 --fraction 0.1 --model mlp:256,128 --rounds 4
run "10,000 clients, 10% a round, logreg:" --nodes 10000 --fraction 0.1 --model logreg --rounds 4
run "  the same, --no-crypto:" --nodes 10000 --fraction 0.1 --model logreg --rounds 4 --no-crypto
run "1,000 peers, random:3, logreg:" --nodes 1000 --role peer --topology random:3 --model logreg \
    --rounds 3 --eval-peers 10
