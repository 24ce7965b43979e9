#!/bin/sh
# long_pipeline.sh - `make test-long`: examples/models/wide100m.cfg (105.6 M
# parameters, 0.42 GB in fp32) trains one federated round with an
# aggregator and two clients, each a site of two pipeline stages
# (`mpirun -np 2 fednode run --pipeline-stages 2 --micro-batches 2`),
# capped at 2 local steps of batch 16: the round commits with both sites'
# deltas accepted (each 0.42 GB, streamed in chunks of --max-frame), each
# site's rank 1 holds its stage only (fc3..head, 67.3 M parameters) and no
# process logs an error. Memory, from the plan (fednode model --plan
# --pipeline-stages 2): a stage rank 0.44 / 0.77 GB of parameters,
# gradients and momentum; rank 0 also holds the round's model and the
# delta (0.42 GB each). Measured once on the 2-core build host (2026-11-29,
# shared, load 10-12): 343 s, the aggregator's peak RSS 3.75 GB, a site's
# rank 0 1.93 GB, a rank 1 about 1.1 GB while it trained (ps), the
# aggregator's accuracy 0.52 after the round. Skips (77) without mpirun, an
# MPI build or the data.
. "$(dirname "$0")/proc_lib.sh"
need_mpi
trap mpi_cleanup EXIT
FEDNODE_NO_REEXEC=1
export FEDNODE_NO_REEXEC
CFG="$(dirname "$0")/../examples/models/wide100m.cfg"
K=$TMP/keys
allow_keys "$K" agg c0 c1
COMMON="--data fashion-mnist --threads 1 --partition iid"
start agg --role aggregator --keys "$K/agg" --allow "$K/allow.txt" --db "$TMP/agg.db" \
    --listen tcp://127.0.0.1:0 --port-file "$TMP/port" $COMMON --model "$CFG" \
    --optimizer sgd --momentum 0.9 --lr 0.01 --batch 16 --local-epochs 1 --rounds 1 \
    --min-clients 2 --deadline-ms 900000 --gather-ms 200
wait_for "the aggregator wrote its port" 120 test -s "$TMP/port"
port=$(cat "$TMP/port")
for n in c0 c1; do
    sh=0/60
    [ "$n" = c1 ] && sh=1/60
    # shellcheck disable=SC2086
    $MPIRUN -np 2 "$FEDNODE" run --role client --keys "$K/$n" --allow "$K/allow.txt" \
        --db "$TMP/$n.db" --aggregator "tcp://127.0.0.1:$port" --aggregator-key agg \
        --shard "$sh" $COMMON --pipeline-stages 2 --micro-batches 2 --max-steps 2 \
        --max-model-params 200000000 \
        --mpi-timeout-ms 600000 >"$TMP/$n.log" 2>&1 &
    echo $! >"$TMP/$n.pid"
    PIDS="$PIDS $!"
    MPIS="$MPIS $!"
done
t=$(date +%s)
exits0 agg 1200
for n in c0 c1; do exits0 "$n" 120; done
secs=$(($(date +%s) - t))
[ "$(nround "$TMP/agg.db" 1)" -eq 1 ] || fail "round 1 is committed"
for n in c0 c1; do
    [ "$(contrib "$TMP/agg.db" 1 "$(keyhex "$K/$n")")" = "true," ] ||
        fail "$n's delta is accepted in round 1"
    grep -q "site: rank 1 of 2: stage 1 of 2 (1 replica), holding only its stage's parameters" \
        "$TMP/$n.log" || fail "$n's rank 1 holds its stage only"
    grep -q "fednode: error" "$TMP/$n.log" && fail "$n logs no error"
done
grep -q "fednode: error" "$TMP/agg.log" && fail "the aggregator logs no error"
ok "a 105.6 M-parameter MLP: one federated round of two sites in 2 pipeline stages each, both deltas accepted, in $secs s"
