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
#  - DP statistics (--feature-bounds, under --require-dp-sgd), plain and
#    secure: each site charges its noised release (q 1, sigma 4, 1 step)
#    and the exported statistics are within 5 sigma of the clipped pooled
#    data's; a site under DP declines an exact pass, and a DP one past its
#    budget; bad bounds refused;
#  - --standardize under a DP requirement without --feature-bounds is
#    refused, naming the ways out.
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
# (EXTRA for every node; $AGGX for the aggregator alone, $CLIX for the sites)
run() {
    r=$1; shift
    start "$r-agg" --role aggregator --keys "$K/agg" --allow "$K/allow.txt" \
        --db "$TMP/$r-agg.db" --listen tcp://127.0.0.1:0 --port-file "$TMP/$r.port" \
        --data "$TMP/agg/d.csv" --threads 1 --model logreg --optimizer sgd --lr 0.05 \
        --batch 32 --local-epochs 1 --rounds 4 --min-clients 3 --wait-clients 3 \
        --deadline-ms 60000 --gather-ms 100 --linger-ms 500 ${AGGX:-} "$@"
    wait_for "the $r aggregator wrote its port" 30 test -s "$TMP/$r.port"
    site_clients "$r" "$(cat "$TMP/$r.port")" --data d.csv --threads 1 ${CLIX:-} "$@"
}
# check R: round 1 was the pass and 4 training rounds followed; the export's
# statistics are the pooled file's; eval of the export scores the same from
# every site's directory, and what the aggregator recorded for its last round
check() {
    r=$1 db=$TMP/$1-agg.db
    [ "$(sqlite3 "$db" 'SELECT max(round) FROM rounds')" = 5 ] ||
        fail "$r: the pass and 4 training rounds (rounds 1..5)"
    grep -q "aggregator: round 1: the statistics pass, 3 of 3 sampled clients in it" "$TMP/$r-agg.log" ||
        fail "$r: round 1 is the statistics pass, with all three sites"
    for s in 0 1 2; do
        grep -q "client: its data standardized with the shared statistics of 4 columns" "$TMP/$r-s$s.log" ||
            fail "$r: site $s standardizes with the shared statistics"
    done
    "$FEDNODE" export --db "$db" --out "$TMP/$r.safetensors" >"$TMP/$r-export.out" 2>&1 ||
        fail "$r: export: $(cat "$TMP/$r-export.out")"
    python3 - "$TMP/$r.safetensors" "$TMP/pooled.csv" <<'PY' >"$TMP/$r-stats.out" 2>&1 || fail "$r: $(cat "$TMP/$r-stats.out")"
import json, math, struct, sys
from fractions import Fraction
raw = open(sys.argv[1], "rb").read()
meta = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])["__metadata__"]
mean = [float(v) for v in meta["fednode.input_mean"].split(",")]
std = [float(v) for v in meta["fednode.input_std"].split(",")]
miss = [float(v) for v in meta["fednode.input_missing_rate"].split(",")]
rows = [l.strip().split(",") for l in open(sys.argv[2]).read().splitlines()[1:]]
assert len(mean) == len(std) == 4, (mean, std)
for j in range(4):
    xs = [Fraction(r[j]) for r in rows if r[j] != "NA"]   # exact, as the file says
    if abs(miss[j] - (len(rows) - len(xs)) / len(rows)) > 1e-15:
        sys.exit("column %d: missing rate %r, the file's %r" % (j + 1, miss[j], (len(rows) - len(xs)) / len(rows)))
    m = sum(xs) / len(xs)
    v = sum((x - m) ** 2 for x in xs) / len(xs)
    pm, ps = float(m), math.sqrt(float(v))
    # model/colstats.h: 2^-33 for each value's rounding, then only the final
    # rounding (the centred sum of squares is exact)
    tm = 2.0 ** -33 + 4e-16 * abs(pm)
    ts = 2.0 ** -33 + 4e-16 * ps
    if abs(mean[j] - pm) > tm or abs(std[j] - ps) > ts:
        sys.exit("column %d: export says mean %r std %r; pooled %r %r" % (j + 1, mean[j], std[j], pm, ps))
    print("column %d: mean %.17g (pooled %.17g), std %.17g (pooled %.17g)" % (j + 1, mean[j], pm, std[j], ps))
PY
    ok "$r: the export's statistics are the pooled file's mean and std within 2^-33, and its missing rates"
    for s in 0 1 2; do
        ( cd "$TMP/s$s" && FEDNODE_NO_REEXEC=1 "$FED" eval --model "$TMP/$r.safetensors" \
            --data d.csv --threads 1 ) >"$TMP/$r-eval$s.out" 2>"$TMP/$r-eval$s.log" ||
            fail "$r: eval of the export at site $s: $(cat "$TMP/$r-eval$s.log")"
        sed -i "s|^model .*  data d.csv|data d.csv|" "$TMP/$r-eval$s.out"
    done
    cmp -s "$TMP/$r-eval0.out" "$TMP/$r-eval1.out" && cmp -s "$TMP/$r-eval0.out" "$TMP/$r-eval2.out" ||
        fail "$r: the export scores the same at every site: $(head -n 1 "$TMP"/$r-eval?.out)"
    rec=$(sqlite3 "$db" "SELECT printf('loss %.4f  accuracy %.4f', loss, accuracy) FROM rounds WHERE round = 5")
    grep -q "  $rec\$" "$TMP/$r-eval0.out" ||
        fail "$r: eval of the export gives the aggregator's last report ($rec): $(head -n 1 "$TMP/$r-eval0.out")"
    ok "$r: the export scores $rec at all three sites, as the aggregator recorded"
}

run plain
check plain
run secure --secagg
check secure

# --stats-only: the pass alone, its table printed, the run ended at round 1
AGGX=--stats-only run only
[ "$(sqlite3 "$TMP/only-agg.db" 'SELECT max(round) FROM rounds')" = 1 ] ||
    fail "--stats-only ends after the pass (round 1)"
grep -q "^shared statistics of 4 columns (round 1)" "$TMP/only-agg.log" ||
    fail "--stats-only prints the table: $(tail -n 6 "$TMP/only-agg.log")"
grep -Eq "^1 +a +470 +0\.0000 +1000000\.58" "$TMP/only-agg.log" &&
    grep -Eq "^4 +d +427 +0\.0915 +-50\.2" "$TMP/only-agg.log" ||
    fail "--stats-only's table names each column with its count, missing rate and mean"
ok "--stats-only: the pass alone, round 1, and its table"

# without the statistics (a model file carries none) the same model scores
# by each site's own training file: not the same everywhere
"$FEDNODE" import --in "$TMP/plain.safetensors" --out "$TMP/plain.model" >/dev/null 2>&1 ||
    fail "import the export"
for s in 0 2; do
    ( cd "$TMP/s$s" && FEDNODE_NO_REEXEC=1 "$FED" eval --model "$TMP/plain.model" --data d.csv \
        --threads 1 ) 2>/dev/null | sed -n 1p | sed 's/^model .*  data/data/' >"$TMP/own$s.out"
done
cmp -s "$TMP/own0.out" "$TMP/own2.out" &&
    fail "with each site's own scaling the same model scores alike at sites 0 and 2 (the test shows nothing)"
ok "with each site's own file's scaling the same model scores differently: $(cat "$TMP/own0.out") vs $(cat "$TMP/own2.out")"

# DP statistics: the aggregator declares --feature-bounds under a DP-SGD
# requirement; each site clips into them, noises its integers (the Gaussian
# mechanism at --stats-noise over the bounds, model/colstats.h) and charges
# the release (q 1, sigma 4, one step) before it leaves; the totals are
# within 5 sigma of the clipped pooled data's own (one site's sigma on a
# column's mean: 4 sqrt(3 x 4 columns) h / N, three sites sqrt(3) times it)
BOUNDS="1=999990:1000010,2=-0.01:0.01,c=-1.3e8:1.3e8,d=-100:0"
dpr() {
    r=$1; shift
    AGGX="--require-dp-sgd --dp-sgd-clip 1 --dp-sgd-noise 1 --feature-bounds $BOUNDS" \
        CLIX="--dp-sgd --dp-sgd-clip 1 --dp-sgd-noise 1" run "$r" "$@"
    grep -q "each site's release clipped and noised (DP statistics)" "$TMP/$r-agg.log" ||
        fail "$r: the aggregator read DP statistics back"
    for s in 0 1 2; do
        [ "$(sqlite3 "$TMP/$r-s$s.db" 'SELECT count(*) FROM dp_charges WHERE round = 1 AND q = 1 AND sigma = 4 AND steps = 1')" = 1 ] ||
            fail "$r: site $s charged the statistics pass (q 1, sigma 4, 1 step): $(sqlite3 "$TMP/$r-s$s.db" 'SELECT * FROM dp_charges')"
        [ "$(sqlite3 "$TMP/$r-s$s.db" 'SELECT count(*) FROM dp_charges WHERE round = 2 AND q < 1')" = 1 ] ||
            fail "$r: site $s charged its DP-SGD round after it"
    done
    ok "$r: each site charged its noised statistics (q 1, sigma 4, 1 step) and its DP-SGD round"
    "$FEDNODE" export --db "$TMP/$r-agg.db" --out "$TMP/$r.safetensors" >"$TMP/$r-export.out" 2>&1 ||
        fail "$r: export: $(cat "$TMP/$r-export.out")"
    python3 - "$TMP/$r.safetensors" "$TMP/pooled.csv" "$BOUNDS" <<'PY' >"$TMP/$r-stats.out" 2>&1 || fail "$r: $(cat "$TMP/$r-stats.out")"
import json, math, struct, sys
raw = open(sys.argv[1], "rb").read()
meta = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])["__metadata__"]
mean = [float(v) for v in meta["fednode.input_mean"].split(",")]
std = [float(v) for v in meta["fednode.input_std"].split(",")]
rows = [l.strip().split(",") for l in open(sys.argv[2]).read().splitlines()[1:]]
bounds = [tuple(map(float, b.split("=")[1].split(":"))) for b in sys.argv[3].split(",")]
for j, (lo, hi) in enumerate(bounds):
    xs = [min(max(float(r[j]), lo), hi) for r in rows if r[j] != "NA"]
    n = len(xs); m = sum(xs) / n; sd = math.sqrt(sum((x - m) ** 2 for x in xs) / n)
    h = (hi - lo) / 2
    sig = 4 * math.sqrt(3 * 4) * math.sqrt(3)      # the totals' noise, count units
    ms = sig * h / n                                # on the mean
    vs = sig * h * h / n + 2 * h * ms + sig * h * h / n * sig / n  # on the variance, loosely
    print("column %d: mean %.6g (clipped pooled %.6g, sigma %.3g), std %.6g (%.6g)" % (j + 1, mean[j], m, ms, std[j], sd))
    if abs(mean[j] - m) > 5 * ms:
        sys.exit("column %d: mean %r, the clipped pooled %r, over 5 sigma %r" % (j + 1, mean[j], m, ms))
    if abs(std[j] ** 2 - sd ** 2) > 5 * vs or not (0 < std[j] <= h):
        sys.exit("column %d: std %r, the clipped pooled %r" % (j + 1, std[j], sd))
PY
    ok "$r: the noised statistics are within 5 sigma of the clipped pooled data's: $(tr '\n' ';' <"$TMP/$r-stats.out")"
}
dpr dpplain
dpr dpsecure --secagg

# an exact pass to a site under DP: declined (it releases no exact sums)
start dpx-agg --role aggregator --keys "$K/agg" --allow "$K/allow.txt" --db "$TMP/dpx-agg.db" \
    --listen tcp://127.0.0.1:0 --port-file "$TMP/dpx.port" --data "$TMP/agg/d.csv" --threads 1 \
    --model logreg --rounds 1 --min-clients 1 --wait-clients 1 --deadline-ms 3000 --gather-ms 100
wait_for "the dpx aggregator wrote its port" 30 test -s "$TMP/dpx.port"
( cd "$TMP/s0" && exec "$FED" run --role client --keys "$K/c0" --allow "$K/allow.txt" \
    --db "$TMP/dpx-s0.db" --aggregator "tcp://127.0.0.1:$(cat "$TMP/dpx.port")" \
    --aggregator-key agg --data d.csv --threads 1 --dp-sgd ) >"$TMP/dpx-s0.log" 2>&1 &
echo $! >"$TMP/dpx-s0.pid"; PIDS="$PIDS $!"
wait_for "the DP site declines an exact pass" 60 grep -q "runs under DP and releases no exact sums" "$TMP/dpx-s0.log"
ok "a site under DP declines an exact statistics pass"
kill "$(pid dpx-s0)" "$(pid dpx-agg)" 2>/dev/null

# a DP pass past a site's budget: declined before anything is noised or
# charged (one release at multiplier 4 costs epsilon 1.01 at delta 1e-5)
start dpb-agg --role aggregator --keys "$K/agg" --allow "$K/allow.txt" --db "$TMP/dpb-agg.db" \
    --listen tcp://127.0.0.1:0 --port-file "$TMP/dpb.port" --data "$TMP/agg/d.csv" --threads 1 \
    --model logreg --rounds 1 --min-clients 1 --wait-clients 1 --deadline-ms 3000 --gather-ms 100 \
    --require-dp-sgd --feature-bounds "$BOUNDS"
wait_for "the dpb aggregator wrote its port" 30 test -s "$TMP/dpb.port"
( cd "$TMP/s0" && exec "$FED" run --role client --keys "$K/c0" --allow "$K/allow.txt" \
    --db "$TMP/dpb-s0.db" --aggregator "tcp://127.0.0.1:$(cat "$TMP/dpb.port")" \
    --aggregator-key agg --data d.csv --threads 1 --dp-sgd --dp-budget-epsilon 0.9 ) >"$TMP/dpb-s0.log" 2>&1 &
echo $! >"$TMP/dpb-s0.pid"; PIDS="$PIDS $!"
wait_for "the site declines a DP pass past its budget" 60 grep -q "the statistics pass (round 1) would take epsilon from 0.0000 to 1.01[0-9]*, past the budget 0.9: declined" "$TMP/dpb-s0.log"
kill "$(pid dpb-s0)" "$(pid dpb-agg)" 2>/dev/null
[ "$(sqlite3 "$TMP/dpb-s0.db" 'SELECT count(*) FROM dp_charges')" = 0 ] ||
    fail "a declined DP pass is not charged"
ok "a site declines a DP statistics pass past its budget, uncharged"

refused "--feature-bounds on a client is refused" "--feature-bounds is the aggregator's" \
    --role client --keys "$K/c0" --allow "$K/allow.txt" --db "$TMP/dpc.db" \
    --aggregator tcp://127.0.0.1:1 --aggregator-key agg --data "$TMP/s0/d.csv" --dp-sgd \
    --feature-bounds 0:1
refused "--feature-bounds missing a column is refused, naming it" "column 4 d has no bounds" \
    --role aggregator --keys "$K/agg" --allow "$K/allow.txt" --db "$TMP/dp.db" \
    --data "$TMP/agg/d.csv" --require-dp-sgd --feature-bounds "1=0:1,2=0:1,3=0:1"
refused "--feature-bounds with LO over HI is refused" "column 2: the bounds 1:0" \
    --role aggregator --keys "$K/agg" --allow "$K/allow.txt" --db "$TMP/dp.db" \
    --data "$TMP/agg/d.csv" --require-dp-sgd --feature-bounds "0:1,2=1:0"

# --standardize under a DP requirement without --feature-bounds is refused, naming the ways out
refused "--standardize with --require-dp-sgd is refused" "declare --feature-bounds" \
    --role aggregator --keys "$K/agg" --allow "$K/allow.txt" --db "$TMP/dp.db" \
    --data "$TMP/agg/d.csv" --require-dp-sgd
refused "--standardize with --dp-client-clip is refused" "run with --no-standardize" \
    --role aggregator --keys "$K/agg" --allow "$K/allow.txt" --db "$TMP/dp.db" \
    --data "$TMP/agg/d.csv" --dp-client-clip 1
