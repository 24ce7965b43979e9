#!/bin/sh
# long_hospital.sh - `make test-long`: the hospital example of issue 37
# (examples/consortium/hospital.sh) runs end to end, twice, with sealed keys
# and secure aggregation, and its exported model scores the held-out patients
# about as well as scikit-learn's LogisticRegression on the pooled training
# rows (AUC of the malignant class):
#  - without DP, with the shared statistics (the pass through secure
#    aggregation): within 0.01 of scikit-learn's AUC;
#  - with DP-SGD at each site and DP statistics (the example's defaults: the
#    pass clipped into the published feature ranges and noised at
#    multiplier 4, charged at q 1; epsilon <= 4.5 at delta 1e-4 in all):
#    each run within 0.02 of scikit-learn's AUC and the median of three
#    within 0.015 (16 runs measured: 14 within 0.01, the worst 0.0103 under;
#    docs/hospital.md).
# The relabelling is checked too: 212 malignant patients (label 1) of 569.
# Skips (77) without the data (python3-sklearn's breast_cancer.csv) or
# without scikit-learn for /usr/bin/python3, which the comparison needs.
set -u
FEDNODE=${FEDNODE:-./fednode}
CSV=/usr/lib/python3/dist-packages/sklearn/datasets/data/breast_cancer.csv
[ -x "$FEDNODE" ] || { echo "skipped: no $FEDNODE (run make)"; exit 77; }
[ -r "$CSV" ] || { echo "skipped: no $CSV (apt-get install python3-sklearn)"; exit 77; }
/usr/bin/python3 -c 'import sklearn' 2>/dev/null ||
    { echo "skipped: /usr/bin/python3 has no sklearn (apt-get install python3-sklearn)"; exit 77; }
FED=$(cd "$(dirname "$FEDNODE")" && pwd)/$(basename "$FEDNODE")
EX=$(cd "$(dirname "$0")/../examples/consortium" && pwd)/hospital.sh
TMP=$(mktemp -d) || exit 1
trap 'if [ -n "${KEEP:-}" ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi' EXIT
trap 'exit 1' INT TERM HUP
fail() {
    echo "FAIL: $1"
    for f in "$TMP"/*.out "$TMP"/*/*.log; do
        [ -f "$f" ] || continue
        echo "  -- ${f#"$TMP"/} (last lines)"; tail -n 12 "$f" | sed 's/^/  | /'
    done
    exit 1
}
ok() { echo "ok: $1"; }
# figure RUN WHO WHAT: "AUC" or "sensitivity" of "fednode" or "scikit-learn"
figure() { sed -n "s/^$2: *.*$3 \([0-9.]*\).*/\1/p" "$TMP/$1.out" | head -n 1; }
# run NAME ENV...: the example in $TMP/NAME, its output in $TMP/NAME.out
run() {
    n=$1; shift
    env "$@" FEDNODE="$FED" sh "$EX" "$TMP/$n" >"$TMP/$n.out" 2>&1 || fail "$n: hospital.sh exited $?"
    a=$(figure "$n" fednode AUC) s=$(figure "$n" scikit-learn AUC)
    [ -n "$a" ] && [ -n "$s" ] || fail "$n: the pooled AUC of fednode and of scikit-learn printed"
    grep -E '^(hospital-|held out|fednode: |scikit-learn|fednode: info: aggregator: round)' "$TMP/$n.out" |
        grep -v '=$' | sed 's/^/    /'
}

run plain HOSPITAL_DP=0 HOSPITAL_STANDARDIZE=1
m=$(cat "$TMP"/plain/hospital-?/data.csv "$TMP/plain/test.csv" | awk -F, '$NF == 1' | wc -l)
t=$(cat "$TMP"/plain/hospital-?/data.csv "$TMP/plain/test.csv" | grep -vc label)
[ "$m" -eq 212 ] && [ "$t" -eq 569 ] || fail "212 of 569 patients labelled 1 (malignant): got $m of $t"
ok "all 569 patients placed, the 212 malignant ones labelled 1"
grep -q "aggregator: round 1: the statistics pass, 3 of 3 sampled clients in it" "$TMP/plain/aggregator.log" ||
    fail "plain: round 1 is the statistics pass, with all three hospitals"
grep -q "shared statistics of 30 columns from 3 clients (0 suppressed) through secure aggregation" \
    "$TMP/plain/aggregator.log" || fail "plain: the statistics through secure aggregation"
# unmasked: the secure sum of each round (the pass and 10 training rounds)
u=$(grep -c "secagg: round [0-9]* try 0 unmasked: 3 in the sum" "$TMP/plain/aggregator.log")
[ "$u" -eq 11 ] || fail "plain: 11 secure rounds of 3 hospitals (got $u)"
awk -v a="$a" -v s="$s" 'BEGIN { d = a - s; exit !(d <= 0.01 && d >= -0.01) }' ||
    fail "plain: fednode's AUC $a within 0.01 of scikit-learn's $s"
ok "shared statistics and secure aggregation, no DP: AUC $a, scikit-learn's $s (within 0.01)"

# DP-SGD's and the statistics' noise are drawn anew each run, so the AUC
# spreads (docs/hospital.md): each run within 0.02, the median of three
# within 0.015; each run's statistics pass (DP, charged), epsilon and
# secure rounds
aucs=""
for r in dp1 dp2 dp3; do
    run "$r"
    grep -q "shared statistics of 30 columns from 3 clients (0 suppressed) through secure aggregation, each site's release clipped and noised (DP statistics)" \
        "$TMP/$r/aggregator.log" || fail "$r: DP statistics through secure aggregation"
    u=$(grep -c "secagg: round [0-9]* try 0 unmasked: 3 in the sum" "$TMP/$r/aggregator.log")
    [ "$u" -eq 11 ] || fail "$r: 11 secure rounds of 3 hospitals, the pass and 10 (got $u)"
    for h in a b c; do
        eps=$("$FED" status --db "$TMP/$r/hospital-$h.db" --json |
            sed -n 's/.*"privacy":{"releases":[0-9]*,"epsilon":\([^,]*\),.*/\1/p')
        awk -v e="$eps" 'BEGIN { exit !(e > 0 && e <= 4.5) }' || fail "$r: hospital-$h spent epsilon $eps <= 4.5"
        command -v sqlite3 >/dev/null 2>&1 || continue # (the charge's row needs the shell)
        [ "$(sqlite3 "$TMP/$r/hospital-$h.db" 'SELECT count(*) FROM dp_charges WHERE round = 1 AND q = 1 AND sigma = 4 AND steps = 1')" = 1 ] ||
            fail "$r: hospital-$h charged its statistics (q 1, sigma 4, one step)"
    done
    awk -v a="$a" -v s="$s" 'BEGIN { exit !(a >= s - 0.02) }' ||
        fail "$r: fednode's AUC $a within 0.02 of scikit-learn's $s"
    aucs="$aucs $a"
done
med=$(echo "$aucs" | tr ' ' '\n' | grep . | sort -n | sed -n 2p)
awk -v a="$med" -v s="$s" 'BEGIN { exit !(a >= s - 0.015) }' ||
    fail "dp: the median of fednode's AUCs ($aucs) within 0.015 of scikit-learn's $s"
ok "DP-SGD and DP statistics at every site (epsilon <= 4.5), secure aggregation: AUCs$aucs, median $med, scikit-learn's $s (each within 0.02, the median within 0.015)"
