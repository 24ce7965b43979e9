#!/bin/sh
# test_ref_nets.sh - each reference net trained federated over real
# processes on 127.0.0.1: an aggregator (--model FILE, no data: it builds
# the model from the file's declaration) and three clients, each its own
# `fednode run`, ROUNDS rounds of at most --max-steps local steps on a
# small iid shard. SimpleCNN on Fashion-MNIST, the tabular net on a CSV of
# its ten columns (two of words, hashed; eight numbers). Each round merges
# all three clients; the aggregator's database and each client's hold rounds
# 1..ROUNDS, each committed once, and verify. A net is one `net` line below
# (ResNet-8's, examples/models/resnet8.cfg, once it lands); one whose model
# file is missing is skipped, said so. Needs ./fednode (make) and
# Fashion-MNIST; exits 77 (skipped) without them. KEEP=1 keeps the logs.
. "$(dirname "$0")/proc_lib.sh"

ROUNDS=3
MODELS=$(dirname "$0")/../examples/models
K=$TMP/keys
allow_keys "$K" agg c0 c1 c2

# tabular.cfg's CSV: words in the two first columns (a colour, a city), then
# eight numbers; the label the colour's parity, flipped in two cities (the
# words decide it: the embeddings must learn). 600 rows, Park-Miller draws.
awk -v out="$TMP/tab.csv" '
    function k(n) { s = (s * 16807) % 2147483647; return s % n }
    BEGIN {
        s = 4242
        split("red green blue yellow purple orange black white", colour, " ")
        split("oslo lima pune kyiv doha rome", city, " ")
        print "colour,city,x2,x3,x4,x5,x6,x7,x8,x9,label" > out
        for (i = 0; i < 600; i++) {
            c = k(8) + 1; t = k(6) + 1
            printf "%s,%s", colour[c], city[t] > out
            for (j = 2; j < 10; j++) printf ",%.3f", k(2000) / 1000 - 1 > out
            printf ",%d\n", (c % 2 == 1) != (t <= 2) > out
        }
    }' || fail "write the tabular CSV"

# net NAME FILE PARTS PASS AGG-ARGS -- CLIENT-ARGS: one federated run of
# FILE in $TMP/NAME, client i on --shard i/PARTS; ROUNDS rounds, each
# merging c0..c2, after the shared-statistics pass (round 1) when PASS is 1
# (a CSV's: data.md). (proc_lib's helpers set name, d, n: net's variables
# are net_*.)
net() {
    net_name=$1 net_file=$2 net_parts=$3 net_pass=$4; shift 4
    net_agg="" net_cli="" net_side=agg
    for a in "$@"; do
        if [ "$a" = -- ]; then net_side=client; continue; fi
        if [ $net_side = agg ]; then net_agg="$net_agg $a"; else net_cli="$net_cli $a"; fi
    done
    if [ ! -e "$net_file" ]; then
        echo "skipped: $net_name: no $net_file"
        return 0
    fi
    net_dir=$TMP/$net_name
    mkdir -p "$net_dir" || fail "make $net_dir"
    # shellcheck disable=SC2086
    start "$net_name-agg" --role aggregator --keys "$K/agg" --allow "$K/allow.txt" \
        --db "$net_dir/agg.db" --listen tcp://127.0.0.1:0 --port-file "$net_dir/port" \
        --model "$net_file" $net_agg --rounds $ROUNDS --min-clients 3 --wait-clients 3 \
        --deadline-ms 60000 --batch 32 --lr 0.05 --threads 1
    wait_for "$net_name: the aggregator wrote its port" 20 test -s "$net_dir/port"
    for net_i in 0 1 2; do
        # shellcheck disable=SC2086
        start "$net_name-c$net_i" --role client --keys "$K/c$net_i" --allow "$K/allow.txt" \
            --db "$net_dir/c$net_i.db" --aggregator "tcp://127.0.0.1:$(cat "$net_dir/port")" \
            --aggregator-key agg --model "$net_file" --partition iid \
            --shard "$net_i/$net_parts" --max-steps 20 --threads 1 $net_cli
    done
    net_last=$((ROUNDS + net_pass))
    wait_for "$net_name: round $net_last merged" 120 logged "$net_name-agg" "round $net_last merged"
    exits0 "$net_name-agg" 30
    for net_i in 0 1 2; do exits0 "$net_name-c$net_i" 30; done
    if [ "$net_pass" = 1 ]; then
        logged "$net_name-agg" "round 1: the statistics pass, 3 of 3 sampled clients in it" ||
            fail "$net_name: round 1 is the statistics pass of c0..c2"
    fi
    net_r=$((1 + net_pass))
    while [ $net_r -le $net_last ]; do
        logged "$net_name-agg" "round $net_r merged 3 of 3" ||
            fail "$net_name: round $net_r merged c0..c2"
        net_r=$((net_r + 1))
    done
    for net_db in agg c0 c1 c2; do
        rounds_once "$net_dir/$net_db.db" $net_last
        verify "$net_dir/$net_db.db"
    done
    ok "$net_name: aggregator + 3 client processes, rounds 1..$net_last committed once each, $ROUNDS of them trained and merged 3 of 3"
}

# the nets: ResNet-8 is one more line here when examples/models/resnet8.cfg lands
net simplecnn "$MODELS/simplecnn.cfg" 30 0 --classes 10 -- --data fashion-mnist
net tabular "$MODELS/tabular.cfg" 3 1 -- --data "$TMP/tab.csv" --categorical colour,city
