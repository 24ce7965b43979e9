#!/bin/sh
# test_secagg_stream.sh - secure aggregation whose masked inputs are larger
# than a frame, with real fednode processes on 127.0.0.1: an aggregator
# with --secagg and 3 clients, every node at --max-frame 16384 (logreg's
# masked input, 7,851 words, is 31 KB), 2 rounds. Each masked input goes as
# a CHUNK stream (the aggregator counts the streams it took), both rounds
# commit with all 3, and `verify` checks the 6 signed masked inputs the
# aggregator kept from those streams. Needs ./fednode (make) and
# Fashion-MNIST; exits 77 (skipped) without them. KEEP=1 keeps the
# temporary directory.
. "$(dirname "$0")/proc_lib.sh"

K=$TMP/keys
allow_keys "$K" agg c0 c1 c2
COMMON="--data fashion-mnist --threads 1 --max-frame 16384"
# shellcheck disable=SC2086
start agg --role aggregator --keys "$K/agg" --allow "$K/allow.txt" --db "$TMP/agg.db" \
    --listen tcp://127.0.0.1:0 --port-file "$TMP/port" $COMMON --model logreg \
    --optimizer sgd --lr 0.05 --batch 64 --local-epochs 1 --rounds 2 --min-clients 3 \
    --wait-clients 3 --gather-ms 2000 --deadline-ms 8000 --poll-ms 1000 --secagg \
    --secagg-stage-ms 3000 --linger-ms 2000
wait_for "the aggregator wrote its port" 20 test -s "$TMP/port"
i=1
for n in c0 c1 c2; do
    # shellcheck disable=SC2086
    start "$n" --role client --keys "$K/$n" --allow "$K/allow.txt" --db "$TMP/$n.db" \
        --aggregator "tcp://127.0.0.1:$(cat "$TMP/port")" --aggregator-key agg \
        --partition iid --shard "$i/20" --poll-ms 1000 --retry-ms 1000 $COMMON
    i=$((i + 1))
done
exits0 agg 60
for r in 1 2; do
    logged agg "round $r merged 3 of 3" || fail "round $r merged all 3 clients"
    logged agg "secagg: round $r try 0 unmasked: 3 in the sum" ||
        fail "round $r unmasked the 3 masked inputs"
done
rounds_once "$TMP/agg.db" 2
ok "2 secure rounds, each with all 3 streamed masked inputs"
took=$(counter "$TMP/agg.db" wire.streams_done)
echo "the aggregator took $took streams"
[ "${took:-0}" -ge 6 ] || fail "the 6 masked inputs came as streams (streams_done $took)"
verify "$TMP/agg.db"
grep -q "contributions: 6 signatures ok, 0 bad" "$TMP/verify.out" ||
    fail "verify checked the 6 signed masked inputs ($(tail -3 "$TMP/verify.out"))"
ok "verify: the 6 streamed masked inputs' signatures"
