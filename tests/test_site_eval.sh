#!/bin/sh
# test_site_eval.sh - evaluation at the sites (--eval-every) with an
# aggregator that holds no data (--features 4 --classes 2) and three real
# client processes on a binary CSV, each with a validation file of its own
# (--val-data), plain and with --secagg:
#  - round 1 is the statistics pass, then 4 training rounds; with
#    --eval-every 2 the sites evaluate in rounds 2 and 4 the models of
#    rounds 1 and 3, recorded as val.* under those rounds;
#  - the pooled figures equal one central evaluation (`fednode eval` of
#    round 3's export) on the union of the three validation files: the
#    confusion matrix and accuracy exactly, the AUC within the bound the
#    pooled histogram gives (val.auc_bound);
#  - without --secagg each site's own figures are recorded (site.NAME.*),
#    but not those of the site that gave --no-site-metrics; with --secagg
#    none;
#  - status shows the pooled figures and each consenting site's;
#  - --val-fraction holds out part of a shard and the pooled samples are
#    that part; --best-metric auc judges val.auc;
#  - --early-stop on the pooled val.loss ends the run where the rule says,
#    and export --best writes the best round by it;
#  - a regression's pooled MSE, MAE and R^2 are the central evaluation's;
#  - --eval-every under a DP requirement is refused, saying why.
# Needs ./fednode and the sqlite3 shell; exits 77 without.
. "$(dirname "$0")/proc_lib.sh"
command -v sqlite3 >/dev/null 2>&1 || { echo "skipped: no sqlite3 shell (apt-get install sqlite3)"; exit 77; }
FED=$(cd "$(dirname "$FEDNODE")" && pwd)/$(basename "$FEDNODE")

gen() { # N SEED P: rows of 4 features, label 1 with probability P, shifted by it
    awk -v n="$1" -v seed="$2" -v p="$3" 'BEGIN {
        srand(seed); print "a,b,c,d,label"
        for (i = 0; i < n; i++) {
            y = rand() < p
            printf "%.5f,%.5f,%.5f,%.5f,%d\n", rand() + 0.35 * y, 10 * rand() - 2 * y,
                rand() * rand() + 0.2 * y, 100 + rand(), y
        }
    }'
}
for s in 0 1 2; do mkdir -p "$TMP/s$s"; done
gen 160 21 0.3 >"$TMP/s0/d.csv"; gen 70 31 0.3 >"$TMP/s0/v.csv"
gen 200 22 0.5 >"$TMP/s1/d.csv"; gen 90 32 0.5 >"$TMP/s1/v.csv"
gen 140 23 0.7 >"$TMP/s2/d.csv"; gen 60 33 0.7 >"$TMP/s2/v.csv"
{ cat "$TMP/s0/v.csv"; tail -n +2 "$TMP/s1/v.csv"; tail -n +2 "$TMP/s2/v.csv"; } >"$TMP/union.csv"

K=$TMP/keys
allow_keys "$K" agg c0 c1 c2

# run NAME AGGX C2X CX...: the aggregator (AGGX its own options; $ROUNDS
# training rounds, default 4; --eval-every $EVERY, default 2; --model
# $MODEL, default logreg; $DECL, default --classes 2) and the three sites
# (--data $CDATA, default d.csv; CX for each; C2X for c2 alone)
run() {
    r=$1 aggx=$2 c2x=$3; shift 3
    start "$r-agg" --role aggregator --keys "$K/agg" --allow "$K/allow.txt" \
        --db "$TMP/$r-agg.db" --listen tcp://127.0.0.1:0 --port-file "$TMP/$r.port" \
        --features 4 ${DECL:---classes 2} --threads 1 --model "${MODEL:-logreg}" --optimizer sgd --lr 0.1 \
        --batch 32 --local-epochs 1 --rounds "${ROUNDS:-4}" --min-clients 3 --wait-clients 3 \
        --deadline-ms 60000 --gather-ms 100 --linger-ms 500 --eval-every "${EVERY:-2}" $aggx
    wait_for "the $r aggregator wrote its port" 30 test -s "$TMP/$r.port"
    P=$(cat "$TMP/$r.port")
    for s in 0 1 2; do
        x=""; [ "$s" = 2 ] && x=$c2x
        ( cd "$TMP/s$s" && exec "$FED" run --role client --keys "$K/c$s" --allow "$K/allow.txt" \
            --db "$TMP/$r-s$s.db" --aggregator "tcp://127.0.0.1:$P" --aggregator-key agg \
            --data "${CDATA:-d.csv}" --threads 1 "$@" $x ) >"$TMP/$r-s$s.log" 2>&1 &
        echo $! >"$TMP/$r-s$s.pid"; PIDS="$PIDS $!"
    done
    exits0 "$r-agg" 180
    for s in 0 1 2; do exits0 "$r-s$s" 30; done
}
metric() { # DB ROUND NAME: the recorded value, %.6f ("" when none)
    sqlite3 "$1" "SELECT printf('%.6f', value) FROM round_metrics WHERE round = $2 AND name = '$3'"
}
# check R: val.* under rounds 1 and 3 and none other; round 3's equal the
# central evaluation of its export on the union of the validation files
check() {
    r=$1 db=$TMP/$1-agg.db
    [ "$(sqlite3 "$db" 'SELECT max(round) FROM rounds')" = 5 ] ||
        fail "$r: the pass and 4 training rounds (rounds 1..5)"
    got=$(sqlite3 "$db" "SELECT group_concat(round) FROM (SELECT DISTINCT round FROM round_metrics WHERE name = 'val.samples' ORDER BY round)")
    [ "$got" = "1,3" ] || fail "$r: the sites evaluated the models of rounds 1 and 3 (val.samples under '$got')"
    [ "$(metric "$db" 3 val.samples)" = "220.000000" ] ||
        fail "$r: 220 validation samples pooled, not '$(metric "$db" 3 val.samples)'"
    "$FEDNODE" export --db "$db" --round 3 --out "$TMP/$r.safetensors" >"$TMP/$r-export.out" 2>&1 ||
        fail "$r: export --round 3: $(cat "$TMP/$r-export.out")"
    FEDNODE_NO_REEXEC=1 "$FED" eval --model "$TMP/$r.safetensors" --data "$TMP/union.csv" \
        --threads 1 >"$TMP/$r-eval.out" 2>"$TMP/$r-eval.log" ||
        fail "$r: eval of round 3's export: $(cat "$TMP/$r-eval.log")"
    # the central counts at 0.5: (tp T fp F tn N fn M)
    cm=$(sed -n 's/^  at 0\.5 .*(tp \([0-9]*\) fp \([0-9]*\) tn \([0-9]*\) fn \([0-9]*\)).*/tn \3 fp \2 fn \4 tp \1/p' "$TMP/$r-eval.out")
    pooled=$(printf 'tn %d fp %d fn %d tp %d' "$(metric "$db" 3 val.confusion.0.0 | cut -d. -f1)" \
        "$(metric "$db" 3 val.confusion.0.1 | cut -d. -f1)" "$(metric "$db" 3 val.confusion.1.0 | cut -d. -f1)" \
        "$(metric "$db" 3 val.confusion.1.1 | cut -d. -f1)")
    [ "$cm" = "$pooled" ] || fail "$r: pooled confusion '$pooled', central '$cm'"
    auc=$(sed -n 's/.*AUC \([0-9.]*\).*/\1/p' "$TMP/$r-eval.out")
    [ -n "$auc" ] || fail "$r: eval printed no AUC: $(cat "$TMP/$r-eval.out")"
    awk -v a="$auc" -v p="$(metric "$db" 3 val.auc)" -v b="$(metric "$db" 3 val.auc_bound)" 'BEGIN {
        d = a - p; if (d < 0) d = -d
        exit !(b != "" && b >= 0 && b < 0.05 && d <= b + 0.00005) }' ||
        fail "$r: pooled AUC $(metric "$db" 3 val.auc) (bound $(metric "$db" 3 val.auc_bound)), central $auc"
    acc=$(metric "$db" 3 val.accuracy)
    grep -q "accuracy $(printf '%.4f' "$acc")" "$TMP/$r-eval.out" ||
        fail "$r: pooled accuracy $acc, central: $(grep -i accuracy "$TMP/$r-eval.out")"
    ok "$r: the pooled figures of round 3 are the central evaluation's on the union (confusion $cm, AUC $auc within $(metric "$db" 3 val.auc_bound))"
}

run plain "" --no-site-metrics --val-data v.csv
check plain
for s in c0 c1; do
    [ "$(metric "$TMP/plain-agg.db" 3 "site.$s.samples")" != "" ] || fail "plain: site $s's own figures recorded"
done
[ "$(sqlite3 "$TMP/plain-agg.db" "SELECT count(*) FROM round_metrics WHERE name LIKE 'site.c2.%'")" = 0 ] ||
    fail "plain: c2 gave --no-site-metrics: none of its own figures"
[ "$(metric "$TMP/plain-agg.db" 3 site.c0.samples)" = "70.000000" ] || fail "plain: site c0 evaluated its 70 samples"
ok "plain: per-site figures for c0 and c1, none for c2 (--no-site-metrics)"
"$FEDNODE" status --db "$TMP/plain-agg.db" >"$TMP/status.out" 2>&1 || fail "status: $(cat "$TMP/status.out")"
grep -q "^site evaluation (round 3's model, pooled" "$TMP/status.out" &&
    grep -q "auc_bound" "$TMP/status.out" && grep -q "^  site c0: .*samples 70" "$TMP/status.out" &&
    ! grep -q "site c2" "$TMP/status.out" ||
    fail "status shows round 3's pooled figures and c0's, not c2's: $(sed -n '/^site evaluation/,/^$/p' "$TMP/status.out")"
"$FEDNODE" status --db "$TMP/plain-agg.db" --json >"$TMP/status.json" 2>&1 &&
    grep -q '"site_metrics":{"round":3,' "$TMP/status.json" || fail "status --json has site_metrics"
ok "status shows the pooled figures and each consenting site's, and --json has them"

run secure --secagg "" --val-data v.csv --secagg
check secure
[ "$(sqlite3 "$TMP/secure-agg.db" "SELECT count(*) FROM round_metrics WHERE name LIKE 'site.%'")" = 0 ] ||
    fail "secure: no site's own figures under secure aggregation"
ok "secure: no per-site figures"

# --val-fraction: a tenth of each shard held out, pooled; best-metric judges it
run frac "--best-metric auc" "" --val-fraction 0.1
n=$(metric "$TMP/frac-agg.db" 3 val.samples)
# per site and class a tenth, rounded half away from zero (at least one of two or more)
want=$(for s in 0 1 2; do awk -F, 'NR > 1 { c[$5]++ } END { for (k in c) {
    t = int(c[k] * 0.1 + 0.5); if (t == 0 && c[k] >= 2) t = 1; s += t }; print s }' "$TMP/s$s/d.csv"; done |
    awk '{ s += $1 } END { printf "%.6f", s }')
[ "$n" = "$want" ] || fail "frac: $want held-out samples pooled, not '$n'"
[ "$(sqlite3 "$TMP/frac-agg.db" "SELECT value FROM meta WHERE key = 'best_metric'")" = val.auc ] ||
    fail "frac: --best-metric auc judges the pooled val.auc"
ok "frac: --val-fraction 0.1 holds out ${want%.*} samples; --best-metric auc is val.auc"

# --early-stop on the pooled figure: the run ends the round after the first
# evaluated round that is PATIENCE rounds past the best so far (earliest of
# equals), or runs all its rounds when none is
ROUNDS=12 EVERY=1 run stop "--early-stop loss:2" "" --val-data v.csv
last=$(sqlite3 "$TMP/stop-agg.db" 'SELECT max(round) FROM rounds')
want=$(sqlite3 "$TMP/stop-agg.db" "SELECT round, value FROM round_metrics WHERE name = 'val.loss' ORDER BY round" |
    awk -F'|' 'stop == "" { if (best == "" || $2 < bv) { best = $1; bv = $2 }
        if ($1 >= best + 2) stop = $1 + 1 } END { print stop == "" ? 13 : stop }')
[ "$last" = "$want" ] || fail "stop: the run ended at round $last, the rule says $want"
grep -q "val.loss judges the sites' pooled evaluation" "$TMP/stop-agg.log" ||
    fail "stop: the aggregator says which evaluation judges"
best=$(sqlite3 "$TMP/stop-agg.db" "SELECT round FROM round_metrics WHERE name = 'val.loss' ORDER BY value, round LIMIT 1")
"$FEDNODE" export --db "$TMP/stop-agg.db" --best --out "$TMP/best.safetensors" >"$TMP/best.out" 2>&1 &&
    grep -q "^exported round $best " "$TMP/best.out" ||
    fail "stop: export --best writes round $best, the best by val.loss: $(cat "$TMP/best.out")"
ok "stop: --early-stop loss:2 on val.loss ended the run at round $last, as the rule says; export --best wrote round $best"

# regression: label = 2 a - b + 3 c + noise; a linear model with loss mse
genr() { # N SEED
    awk -v n="$1" -v seed="$2" 'BEGIN {
        srand(seed); print "a,b,c,d,label"
        for (i = 0; i < n; i++) {
            a = rand(); b = rand(); c = rand(); d = rand()
            printf "%.5f,%.5f,%.5f,%.5f,%.5f\n", a, b, c, d, 2 * a - b + 3 * c + 0.1 * rand() - 40
        }
    }'
}
for s in 0 1 2; do genr 120 $((41 + s)) >"$TMP/s$s/r.csv"; genr 50 $((51 + s)) >"$TMP/s$s/rv.csv"; done
{ cat "$TMP/s0/rv.csv"; tail -n +2 "$TMP/s1/rv.csv"; tail -n +2 "$TMP/s2/rv.csv"; } >"$TMP/runion.csv"
printf '[input] features = 4\n[linear] name = out out = 1\n[output] loss = mse\n' >"$TMP/reg.cfg"
MODEL=$TMP/reg.cfg DECL="--task regression" CDATA=r.csv run reg "" "" --task regression --val-data rv.csv
db=$TMP/reg-agg.db
[ "$(metric "$db" 3 val.samples)" = "150.000000" ] || fail "reg: 150 validation samples pooled"
"$FEDNODE" export --db "$db" --round 3 --out "$TMP/reg.safetensors" >"$TMP/reg-export.out" 2>&1 ||
    fail "reg: export --round 3: $(cat "$TMP/reg-export.out")"
FEDNODE_NO_REEXEC=1 "$FED" eval --model "$TMP/reg.safetensors" --data "$TMP/runion.csv" --task regression \
    --threads 1 >"$TMP/reg-eval.out" 2>"$TMP/reg-eval.log" || fail "reg: eval: $(cat "$TMP/reg-eval.log")"
central=$(sed -n 's/^regression  MSE \([^ ]*\)  MAE \([^ ]*\)  R^2 \([^ ]*\)$/\1 \2 \3/p' "$TMP/reg-eval.out")
pooled="$(metric "$db" 3 val.mse) $(metric "$db" 3 val.mae) $(metric "$db" 3 val.r2)"
echo "$central $pooled" | awk '{ for (i = 1; i <= 3; i++) { d = $i - $(i + 3); if (d < 0) d = -d
    if (d > 1e-5 * (($i < 0 ? -$i : $i) + 1e-3)) exit 1 } }' ||
    fail "reg: pooled MSE, MAE, R^2 ($pooled) are the central evaluation's ($central)"
ok "reg: the pooled MSE, MAE and R^2 of round 3 are the central evaluation's on the union ($central)"

# refusals
"$FEDNODE" run --role aggregator --keys "$K/agg" --allow "$K/allow.txt" --db "$TMP/r.db" \
    --features 4 --classes 2 --eval-every 2 --require-dp-sgd --dp-sgd-clip 1 --dp-sgd-noise 1 \
    >"$TMP/refuse.out" 2>&1 && fail "--eval-every under --require-dp-sgd is refused"
grep -q "site evaluation .* release" "$TMP/refuse.out" ||
    fail "the refusal says the statistics are a release: $(cat "$TMP/refuse.out")"
ok "--eval-every under a DP requirement is refused: $(head -n 1 "$TMP/refuse.out")"
