#!/bin/sh
# test_eval_metrics.sh - `fednode eval` prints the binary set for a two-class
# model and the multi-class set otherwise, figures that agree with each
# other and with the data: at 0.5, tp + fn and fp + tn are the CSV's class
# counts and (tp + tn) / n the accuracy; the confusion matrix's rows are the
# class counts and its trace over n the accuracy. A logreg on one feature
# scores monotonically in it, so its AUC is scikit-learn's AUC of that
# feature (or 1 minus it); checked when /usr/bin/python3 has sklearn.
. "$(dirname "$0")/proc_lib.sh"

FED=$(cd "$(dirname "$FEDNODE")" && pwd)/$(basename "$FEDNODE")
gen() { # gen N SEED CLASSES
    awk -v n="$1" -v seed="$2" -v k="$3" 'BEGIN {
        srand(seed); print "age,label"
        for (i = 0; i < n; i++) {
            y = k == 2 ? (rand() < 0.3) : int(rand() * k)
            printf "%.4f,%d\n", 50 + 10 * y + 30 * (rand() - 0.5), y
        }
    }'
}
gen 800 1 2 >"$TMP/bin.csv"
gen 600 2 3 >"$TMP/multi.csv"
for t in bin multi; do
    ( cd "$TMP" && FEDNODE_NO_REEXEC=1 "$FED" train --data $t.csv --model logreg --epochs 5 \
          --lr 0.05 --out $t.model >$t.train.log 2>&1 &&
      FEDNODE_NO_REEXEC=1 "$FED" eval --model $t.model --data $t.csv >$t.out 2>$t.eval.log ) ||
        fail "fednode train and eval on $t.csv"
done

# two classes: the binary set
out="$TMP/bin.out"
grep -q '^binary (class 1 positive: ' "$out" || fail "eval prints the binary set: $(cat "$out")"
grep -q 'macro-F1\|confusion' "$out" && fail "a two-class model gets the binary set only"
pos=$(awk -F, 'NR > 1 && $2 == 1' "$TMP/bin.csv" | wc -l)
neg=$(awk -F, 'NR > 1 && $2 == 0' "$TMP/bin.csv" | wc -l)
grep -q "^binary (class 1 positive: $pos, negative: $neg)" "$out" ||
    fail "the class counts $pos and $neg: $(head -n 2 "$out")"
acc=$(sed -n 's/.*accuracy \([0-9.]*\)$/\1/p' "$out")
line=$(grep '^  at 0.5 ' "$out") || fail "a line at 0.5"
echo "$line" | awk -v p="$pos" -v n="$neg" -v acc="$acc" '{
    for (i = 1; i <= NF; i++) { if ($i == "(tp") tp = $(i + 1); if ($i == "fp") fp = $(i + 1);
        if ($i == "tn") tn = $(i + 1); if ($i == "fn") { fn = $(i + 1); sub(/\)/, "", fn) } }
    d = (tp + tn) / (p + n) - acc; if (d < 0) d = -d
    exit !(tp + fn == p && fp + tn == n && d < 0.00006) }' ||
    fail "the counts at 0.5 add up to the classes and the accuracy $acc: $line"
grep -q "^  at [0-9.e-]* (Youden's J) sensitivity " "$out" || fail "a line at Youden's point"
ok "two classes: AUC, AP, the points at 0.5 and Youden's J; counts match the data"

if /usr/bin/python3 -c 'import sklearn' 2>/dev/null; then
    auc=$(sed -n 's/.*  AUC \([0-9.]*\)  average precision.*/\1/p' "$out")
    /usr/bin/python3 - "$TMP/bin.csv" "$auc" <<'EOF' || fail "the AUC eval prints, $auc, is the feature's"
import sys
import numpy as np
from sklearn.metrics import roc_auc_score
d = np.loadtxt(sys.argv[1], delimiter=",", skiprows=1)
a = roc_auc_score(d[:, 1], d[:, 0])
got = float(sys.argv[2])
print("feature AUC %.4f, eval %.4f" % (a, got))
sys.exit(0 if min(abs(got - a), abs(got - (1 - a))) <= 0.00006 else 1)
EOF
    ok "the logreg's AUC is scikit-learn's AUC of its one feature: $auc"
else
    partly="no sklearn in /usr/bin/python3 (python3-sklearn): the AUC check was skipped"
fi

# three classes: the multi-class set
out="$TMP/multi.out"
grep -q '^macro-F1 [0-9.]*$' "$out" || fail "eval prints macro-F1: $(cat "$out")"
grep -q '^recall by class: 0:[0-9.]* 1:[0-9.]* 2:[0-9.]*$' "$out" || fail "recall by class"
grep -q '^binary' "$out" && fail "a three-class model gets no binary set"
acc=$(sed -n 's/.*accuracy \([0-9.]*\)$/\1/p' "$out")
for c in 0 1 2; do
    want=$(awk -F, -v c=$c 'NR > 1 && $2 == c' "$TMP/multi.csv" | wc -l)
    got=$(awk -v c=$c '/^confusion/ { m = 1; next } m && $1 == c && NF == 4 { print $2 + $3 + $4 }' "$out")
    [ "$got" = "$want" ] || fail "confusion row $c sums to $got, the CSV has $want"
done
awk -v acc="$acc" '/^confusion/ { m = 1; next } m && NF == 4 { tr += $($1 + 2); n += $2 + $3 + $4 }
    END { d = tr / n - acc; if (d < 0) d = -d; exit !(d < 0.00006) }' "$out" ||
    fail "the confusion matrix's trace over n is the accuracy $acc: $(cat "$out")"
ok "three classes: macro-F1, recall by class, a confusion matrix whose rows are the classes"
# a check left out for a missing tool makes the whole test a skip, not a pass
if [ -n "${partly:-}" ]; then echo "skipped: $partly"; exit 77; fi
