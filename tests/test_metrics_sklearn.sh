#!/bin/sh
# test_metrics_sklearn.sh - model/metrics against scikit-learn on 1,000 random
# binary score sets (uniform, informative, tied, and concentrated: every score
# within 1e-3 of 0 or 1), 200 multi-class and 200 regression sets, printed by
# build/tests/test_metrics --scores. Exact where the metric is exact (AUC,
# AP, sensitivity, specificity, precision, F1 at 0.5 and at the Youden
# point, accuracy, macro-F1, per-class recall, confusion matrix, MSE, MAE,
# R^2 from three merged parts); the binned AUC within the bound it reports,
# the bound under 0.002 on the uniform sets, the binned counts at 0.5 equal
# to the exact ones. Skips (77) without /usr/bin/python3 with sklearn
# (Debian: python3-sklearn).
set -eu
PY=/usr/bin/python3
BIN=${BUILD:-build}/tests/test_metrics
if [ ! -x "$PY" ]; then echo "skipped: no $PY"; exit 77; fi
if ! "$PY" -c 'import sklearn' 2>/dev/null; then
    echo "skipped: $PY has no sklearn (Debian: apt-get install python3-sklearn)"; exit 77
fi
[ -x "$BIN" ] || { echo "FAIL: $BIN not built (make $BIN)"; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

"$PY" - "$BIN" "$TMP" <<'EOF'
import subprocess, sys
import numpy as np
from sklearn import metrics as M

binary, tmp = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(36)
sets = []  # (kind, data)
for i in range(1000):
    n = int(rng.integers(20, 3000))
    kind = ("uniform", "informative", "tied", "concentrated")[i % 4]
    while True:
        if kind == "uniform":       # scores uniform on (0, 1), labels at random
            s = rng.random(n)
            y = (rng.random(n) < rng.uniform(0.05, 0.95)).astype(int)
        elif kind == "informative": # positives score higher
            y = (rng.random(n) < rng.uniform(0.05, 0.95)).astype(int)
            s = 1 / (1 + np.exp(-(rng.normal(size=n) + rng.uniform(0, 3) * y)))
        elif kind == "tied":        # two decimals: many ties
            s = np.round(rng.random(n), 2)
            y = (rng.random(n) < s).astype(int)
        else:                       # within 1e-3 of 0 or 1
            y = (rng.random(n) < rng.uniform(0.05, 0.95)).astype(int)
            hi = rng.random(n) < np.where(y == 1, 0.8, 0.2)
            d = rng.random(n) * 1e-3
            s = np.where(hi, 1 - d, d)
        if 0 < y.sum() < n:
            break
    sets.append(("b", kind, y, s))
for i in range(200):
    n, k = int(rng.integers(5, 2000)), int(rng.integers(2, 11))
    t = rng.integers(0, k, n)
    p = np.where(rng.random(n) < 0.6, t, rng.integers(0, k, n))
    sets.append(("m", k, t, p))
for i in range(200):
    n = int(rng.integers(5, 2000))
    y = rng.normal(rng.uniform(-100, 100), rng.uniform(0.01, 50), n)
    yh = y + rng.normal(0, rng.uniform(0.01, 30), n)
    sets.append(("r", None, y, yh))

with open(tmp + "/sets.txt", "w") as f:
    for kind, extra, a, b in sets:
        if kind == "b":
            f.write("b %d\n" % len(a))
            f.writelines("%d %.17g\n" % (y, s) for y, s in zip(a, b))
        elif kind == "m":
            f.write("m %d %d\n" % (len(a), extra))
            f.writelines("%d %d\n" % (t, p) for t, p in zip(a, b))
        else:
            f.write("r %d\n" % len(a))
            f.writelines("%.17g %.17g\n" % (y, yh) for y, yh in zip(a, b))
out = subprocess.run([binary, "--scores", tmp + "/sets.txt"], capture_output=True, text=True)
if out.returncode != 0:
    sys.exit("FAIL: %s --scores exited %d: %s" % (binary, out.returncode, out.stderr))
lines = out.stdout.splitlines()
if len(lines) != len(sets):
    sys.exit("FAIL: %d sets, %d lines" % (len(sets), len(lines)))

bad = []
def near(what, i, got, want, tol=1e-9):
    if not abs(got - want) <= tol:
        bad.append("set %d: %s %.17g, scikit-learn %.17g" % (i, what, got, want))

worst = {"uniform": 0.0, "informative": 0.0, "tied": 0.0, "concentrated": 0.0}
for i, ((kind, extra, a, b), line) in enumerate(zip(sets, lines)):
    f = line.split()
    if f[0] != kind:
        sys.exit("FAIL: set %d: line %r" % (i, line))
    v = [float(x) for x in f[1:]]
    if kind == "b":
        y, s = a, b
        auc, ap, sens, spec, prec, f1, ythr, ysens, yspec, hauc, hbound, hap, hj, htp, hfp = v
        near("AUC", i, auc, M.roc_auc_score(y, s))
        near("AP", i, ap, M.average_precision_score(y, s))
        pred = (s >= 0.5).astype(int)
        near("sensitivity@0.5", i, sens, M.recall_score(y, pred, zero_division=0))
        near("specificity@0.5", i, spec, M.recall_score(y, pred, pos_label=0, zero_division=0))
        near("precision@0.5", i, prec, M.precision_score(y, pred, zero_division=0))
        near("F1@0.5", i, f1, M.f1_score(y, pred, zero_division=0))
        fpr, tpr, thr = M.roc_curve(y, s, drop_intermediate=False)
        near("Youden J", i, ysens + yspec - 1, np.max((tpr - fpr)[1:]))
        yp = (s >= ythr).astype(int)
        near("sensitivity@J", i, ysens, M.recall_score(y, yp))
        near("specificity@J", i, yspec, M.recall_score(y, yp, pos_label=0))
        if not abs(hauc - auc) <= hbound + 1e-12:
            bad.append("set %d (%s): binned AUC %.6f off the exact %.6f by more than its bound %.6f"
                       % (i, extra, hauc, auc, hbound))
        if extra == "uniform" and not hbound < 0.002:
            bad.append("set %d: uniform scores, bound %.6f >= 0.002" % (i, hbound))
        if htp != int(pred[y == 1].sum()) or hfp != int(pred[y == 0].sum()):
            bad.append("set %d: binned counts at 0.5 %d %d, exact %d %d"
                       % (i, htp, hfp, pred[y == 1].sum(), pred[y == 0].sum()))
        worst[extra] = max(worst[extra], hbound)
    elif kind == "m":
        k, t, p = extra, a, b
        near("accuracy", i, v[0], M.accuracy_score(t, p))
        near("macro-F1", i, v[1], M.f1_score(t, p, average="macro", zero_division=0))
        rec = M.recall_score(t, p, labels=list(range(k)), average=None, zero_division=0)
        for c in range(k):
            if (t == c).any():
                near("recall[%d]" % c, i, v[2 + c], rec[c])
            elif v[2 + c] == v[2 + c]:
                bad.append("set %d: class %d has no sample, recall %g (want NaN)" % (i, c, v[2 + c]))
        cm = M.confusion_matrix(t, p, labels=list(range(k))).ravel()
        if [int(x) for x in f[2 + k + 1:]] != [int(x) for x in cm]:
            bad.append("set %d: confusion matrix differs" % i)
    else:
        y, yh = a, b
        near("MSE", i, v[0], M.mean_squared_error(y, yh), 1e-9 * max(1, M.mean_squared_error(y, yh)))
        near("MAE", i, v[1], M.mean_absolute_error(y, yh), 1e-9 * max(1, M.mean_absolute_error(y, yh)))
        near("R^2", i, v[2], M.r2_score(y, yh))

for b in bad[:20]:
    print("FAIL:", b)
print("largest AUC bound by kind: " + ", ".join("%s %.5f" % kv for kv in worst.items()))
if bad:
    sys.exit("FAIL: %d mismatches" % len(bad))
print("ok: %d binary, 200 multi-class, 200 regression sets match scikit-learn" % 1000)
EOF
