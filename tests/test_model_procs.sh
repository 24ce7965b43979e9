#!/bin/sh
# test_model_procs.sh - a model file's graph longer than a spec (its id
# g#... in logs and the MODEL's spec field, the graph whole in the MODEL's
# graph field) over real fednode processes on 127.0.0.1: an aggregator
# with --model FILE and three clients of Fashion-MNIST. c0 gives no model
# and builds the one each MODEL carries; c1 declares the same file; c2
# declares logreg and declines round 1 at once (a LEAVE
# FED_ERR_MODEL_MISMATCH), logging both models' hashes and where they first
# differ; the aggregator says so once and samples it no more. Every round
# merges c0 and c1. Needs ./fednode (make) and
# Fashion-MNIST; exits 77 (skipped) without them. KEEP=1 keeps the logs.
. "$(dirname "$0")/proc_lib.sh"

K=$TMP/keys
allow_keys "$K" agg c0 c1 c2
{ echo '[input] shape = 1,28,28'; i=0
  while [ $i -lt 12 ]; do echo "[linear] name = hidden_$i out = 8"; echo '[relu]'; i=$((i + 1)); done
  echo '[linear] name = head out = classes'; } >"$TMP/deep.cfg"
COMMON="--data fashion-mnist --threads 1"
mkdir -p "$TMP/a"
# shellcheck disable=SC2086
start agg --role aggregator --keys "$K/agg" --allow "$K/allow.txt" --db "$TMP/a/agg.db" \
    --listen tcp://127.0.0.1:0 --port-file "$TMP/a/port" $COMMON --model "$TMP/deep.cfg" \
    --rounds 2 --min-clients 2 --wait-clients 3 --deadline-ms 60000 --batch 100 --lr 0.05
wait_for "the aggregator wrote its port" 20 test -s "$TMP/a/port"
PORT=$(cat "$TMP/a/port")
# client NAME SHARD ARGS...
client() {
    name=$1 shard=$2; shift 2
    # shellcheck disable=SC2086
    start "$name" --role client --keys "$K/$name" --allow "$K/allow.txt" --db "$TMP/a/$name.db" \
        --aggregator "tcp://127.0.0.1:$PORT" --aggregator-key agg --partition iid \
        --shard "$shard" $COMMON "$@"
}
client c0 0/30
client c1 1/30 --model "$TMP/deep.cfg"
client c2 2/30 --model logreg
wait_for "round 2 merged" 120 logged agg "round 2 merged"
exits0 agg 30
for c in c0 c1; do exits0 "$c" 30; done
grep -q "run: --model $TMP/deep.cfg is g#[0-9a-f]\{32\}" "$TMP/agg.log" ||
    fail "the aggregator names its graph by its id"
ok "the aggregator's graph: $(grep -o 'g#[0-9a-f]*' "$TMP/agg.log" | head -n 1)"
logged agg "round 1 merged 2 of 3 (0 missing, 1 declined)" || fail "round 1 merged c0 and c1"
logged agg "round 2 merged 2 of 2" || fail "round 2 merged c0 and c1, c2 not sampled"
n=$(grep -c "client: round .*: the aggregator's model g#[0-9a-f]\{32\} differs from the one this client's --model declares, g#[0-9a-f]\{32\}, at byte 0: '\.\.\.g:hidden_0=L8,R,hidden_1' against '\.\.\.logreg'" "$TMP/c2.log")
[ "$n" -eq 1 ] || { cat "$TMP/c2.log"; fail "c2 declined round 1 once, naming both models and where they differ"; }
logged c2 "declined (FED_ERR_MODEL_MISMATCH)" || fail "c2's decline names FED_ERR_MODEL_MISMATCH"
[ "$(grep -c "warn: aggregator: client c2 declined round 1: the model does not fit it" "$TMP/agg.log")" -eq 1 ] ||
    fail "the aggregator says once that c2 declined"
logged agg "client c2 declined round 2" && fail "c2 is not sampled after it declined"
ok "c0 built the graph from the MODEL, c1 took its own file's, c2 (logreg) declined once and was left out"
