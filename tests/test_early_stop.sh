#!/bin/sh
# test_early_stop.sh - an aggregator with test data (a two-class CSV) and two
# clients, --early-stop auc:3 --keep-checkpoints 1:
#  - each round's figures are in round_metrics (auc, sensitivity, ...), and
#    status, status --json show the newest round's;
#  - the run ends at the round the rule says, computed here from the recorded
#    AUCs (the first round 3 rounds after the best so far, the earliest of
#    equals), before --rounds; restarted on its database it trains no more;
#  - retention keeps the newest checkpoint and the best round's; export
#    --round of another says it is no longer kept and lists those two;
#  - export --best writes the best round's model: imported and scored by
#    fednode eval on the same test file, its AUC is the one recorded.
# Refusals: a malformed --early-stop, an unknown metric, --early-stop on a
# client. Needs ./fednode and the sqlite3 shell; exits 77 without.
. "$(dirname "$0")/proc_lib.sh"
command -v sqlite3 >/dev/null 2>&1 || { echo "skipped: no sqlite3 shell (apt-get install sqlite3)"; exit 77; }
FED=$(cd "$(dirname "$FEDNODE")" && pwd)/$(basename "$FEDNODE")

refused "--early-stop without PATIENCE is refused" "want METRIC:PATIENCE" \
    --role aggregator --db "$TMP/x.db" --early-stop auc
refused "--early-stop auc:0 is refused" "want METRIC:PATIENCE" \
    --role aggregator --db "$TMP/x.db" --early-stop auc:0
refused "an unknown metric is refused" "'aucc' is no metric a round records" \
    --role aggregator --db "$TMP/x.db" --early-stop aucc:2
refused "--early-stop on a client is refused" "an aggregator's settings" \
    --role client --db "$TMP/x.db" --aggregator tcp://127.0.0.1:1 --early-stop auc:2

# two features, both informative, on scales far apart: the AUC climbs for
# some rounds as their weights settle, then stays
gen() {
    awk -v n="$1" -v seed="$2" 'BEGIN {
        srand(seed); print "label,a,b"
        for (i = 0; i < n; i++) {
            y = rand() < 0.35
            printf "%d,%.4f,%.2f\n", y, y + 1.5 * (rand() - 0.5), 300 * y + 900 * (rand() - 0.5)
        }
    }'
}
gen 1200 1 >"$TMP/d.csv"
gen 400 2 >"$TMP/d.test.csv"
K=$TMP/keys
allow_keys "$K" agg c0 c1
start agg --role aggregator --keys "$K/agg" --allow "$K/allow.txt" --db "$TMP/agg.db" \
    --listen tcp://127.0.0.1:0 --port-file "$TMP/port" --data "$TMP/d.csv" --threads 1 \
    --model logreg --optimizer sgd --lr 0.02 --batch 50 --local-epochs 1 --rounds 40 \
    --min-clients 2 --deadline-ms 60000 --gather-ms 100 --linger-ms 0 \
    --early-stop auc:3 --keep-checkpoints 1
wait_for "the aggregator wrote its port" 30 test -s "$TMP/port"
P=$(cat "$TMP/port")
for i in 0 1; do
    start "c$i" --role client --keys "$K/c$i" --allow "$K/allow.txt" --db "$TMP/c$i.db" \
        --aggregator "tcp://127.0.0.1:$P" --aggregator-key agg --partition iid \
        --shard "$i/2" --data "$TMP/d.csv" --threads 1
done
exits0 agg 120

db=$TMP/agg.db
last=$(sqlite3 "$db" 'SELECT max(round) FROM rounds')
[ -n "$last" ] && [ "$last" -lt 40 ] || fail "the run stopped early (last round $last of 40)"
n=$(sqlite3 "$db" "SELECT count(DISTINCT round) FROM round_metrics WHERE name = 'auc'")
[ "$n" = "$last" ] || fail "every round 1..$last has its AUC recorded ($n do)"
for m in sensitivity specificity f1 ap youden_threshold macro_f1 confusion.1.1 recall.0; do
    [ "$(sqlite3 "$db" "SELECT count(*) FROM round_metrics WHERE name = '$m'")" = "$last" ] ||
        fail "every round has $m"
done
# the rule, from the recorded AUCs: best so far (earliest of equals); stop at
# the first round 3 after it
want=$(sqlite3 -separator ' ' "$db" "SELECT round, value FROM round_metrics WHERE name = 'auc' ORDER BY round" |
    awk '{ if (NR == 1 || $2 > bv) { b = $1; bv = $2 } if ($1 >= b + 3) { print $1, b; exit } }')
[ -n "$want" ] || fail "the recorded AUCs call for a stop"
stop=${want% *} best=${want#* }
[ "$last" = "$stop" ] || fail "the run ended at round $last; the rule says $stop (best $best)"
grep -q "early stop: auc has not improved on round $best's" "$TMP/agg.log" ||
    fail "the aggregator says why it stopped"
ok "early stop at round $last: auc's best was round $best, 3 rounds without improving on it"

# restarted on its database, the stopped run trains no more
start agg2 --role aggregator --keys "$K/agg" --allow "$K/allow.txt" --db "$TMP/agg.db" \
    --listen tcp://127.0.0.1:0 --data "$TMP/d.csv" --threads 1 --model logreg --optimizer sgd \
    --lr 0.02 --batch 50 --local-epochs 1 --rounds 40 --min-clients 2 --linger-ms 0 \
    --early-stop auc:3 --keep-checkpoints 1
exits0 agg2 30
[ "$(sqlite3 "$db" 'SELECT max(round) FROM rounds')" = "$last" ] ||
    fail "restarted after its early stop, the aggregator ran no further round"
ok "restarted on its database after the early stop: done at once, no round $((last + 1))"

status "$db" | grep -q "\"metrics\":{\"round\":$last,\"loss\":" || fail "status --json has round $last's metrics"
"$FEDNODE" status --db "$db" | grep -q "^metrics (round $last, the aggregator's evaluation)" ||
    fail "status shows the newest round's metrics"
ok "status and status --json show round $last's metrics"

kept=$(sqlite3 "$db" "SELECT group_concat(round, ', ') FROM (SELECT DISTINCT round FROM checkpoints WHERE pruned = 0 ORDER BY round)")
if [ "$best" = "$last" ]; then want_kept=$last; else want_kept="$best, $last"; fi
[ "$kept" = "$want_kept" ] || fail "retention keeps the best and the newest: $want_kept (kept: $kept)"
other=1; [ "$best" = 1 ] && other=2
"$FEDNODE" export --db "$db" --round "$other" --out "$TMP/x.safetensors" >"$TMP/x.out" 2>&1 &&
    fail "export --round $other (pruned) fails"
grep -q "round $other's checkpoint is no longer kept.*the rounds whose checkpoint is kept: $want_kept$" "$TMP/x.out" ||
    fail "export --round $other says it is no longer kept and lists $want_kept: $(cat "$TMP/x.out")"
ok "--keep-checkpoints 1 kept rounds $kept; export --round $other says why not and lists them"

( cd "$TMP" && "$FED" export --db agg.db --best --out best.safetensors >best.out 2>&1 &&
  "$FED" import --in best.safetensors --out best.model >import.log 2>&1 &&
  FEDNODE_NO_REEXEC=1 "$FED" eval --model best.model --data d.csv >eval.out 2>eval.log ) ||
    fail "export --best, import, eval"
grep -q "^best round by auc (higher is better): $best " "$TMP/best.out" ||
    fail "export --best picks round $best by auc: $(cat "$TMP/best.out")"
grep -q "^exported round $best " "$TMP/best.out" || fail "export --best writes round $best"
rec=$(sqlite3 "$db" "SELECT printf('%.4f', value) FROM round_metrics WHERE round = $best AND name = 'auc'")
got=$(sed -n 's/.*  AUC \([0-9.]*\)  average precision.*/\1/p' "$TMP/eval.out")
[ "$got" = "$rec" ] || fail "the exported model scores AUC $got on the test file; round $best recorded $rec"
ok "export --best wrote round $best's model: fednode eval gives its recorded AUC $rec"
