#!/bin/sh
# hospital.sh - three hospitals train one breast-cancer classifier together:
# the Wisconsin diagnostic data (569 patients, 30 features) that Debian's
# python3-sklearn ships, split over hospitals a, b and c with label skew, an
# aggregator, sealed keys, secure aggregation and DP-SGD at each site; then the
# exported model is scored on a held-out pooled test file beside scikit-learn's
# LogisticRegression on the pooled training rows (when python3 has sklearn).
# Usage: hospital.sh [DIR] (default: a new temporary directory, kept and
# named at the end). Tutorial: docs/hospital.md. Settings below can be
# changed through the environment (HOSPITAL_DP=0: no DP-SGD, for comparison).
set -eu
FEDNODE=${FEDNODE:-fednode}
SEED=${HOSPITAL_SEED:-37}           # the split's shuffle
ROUNDS=${HOSPITAL_ROUNDS:-10}       # training rounds
EPOCHS=${HOSPITAL_EPOCHS:-2}        # local epochs a round
LR=${HOSPITAL_LR:-0.2}
BATCH=${HOSPITAL_BATCH:-16}
DP=${HOSPITAL_DP:-1}                # 1: DP-SGD at every site, required by the aggregator
NOISE=${HOSPITAL_NOISE:-2.0}        # DP-SGD's noise multiplier z
CLIP=${HOSPITAL_CLIP:-0.5}          # DP-SGD's per-patient gradient bound C
DELTA=${HOSPITAL_DELTA:-1e-4}       # (epsilon, delta): delta well below 1 / patients
SECAGG=${HOSPITAL_SECAGG:-1}
STATS_NOISE=${HOSPITAL_STATS_NOISE:-4}  # DP statistics' noise multiplier (--stats-noise)
CSV=${HOSPITAL_CSV:-/usr/lib/python3/dist-packages/sklearn/datasets/data/breast_cancer.csv}
DESCR=${HOSPITAL_DESCR:-${CSV%/data/breast_cancer.csv}/descr/breast_cancer.rst}

command -v "$FEDNODE" >/dev/null 2>&1 || { echo "hospital.sh: no fednode (set FEDNODE=path/to/fednode)" >&2; exit 1; }
FEDNODE=$(command -v "$FEDNODE")
case $FEDNODE in /*) ;; *) FEDNODE=$(pwd)/$FEDNODE ;; esac
if [ $# -gt 0 ]; then W=$1; mkdir -p "$W"; else W=$(mktemp -d); fi
W=$(cd "$W" && pwd)
PIDS=""
stop() { for p in $PIDS; do kill "$p" 2>/dev/null || :; done; }
trap stop EXIT
trap 'exit 1' INT TERM HUP
say() { printf '\n== %s\n' "$*"; }

# 1. The data: the installed copy, else the file inside Debian's package,
# downloaded and unpacked (not installed) into $W/deb.
say "1. the data: breast_cancer.csv"
if [ ! -r "$CSV" ]; then
    mkdir -p "$W/deb"
    ( cd "$W/deb" && apt-get download python3-sklearn ) >"$W/deb/apt.log" 2>&1 ||
        { cat "$W/deb/apt.log" >&2; echo "hospital.sh: apt-get download python3-sklearn failed" >&2; exit 1; }
    dpkg -x "$W"/deb/python3-sklearn_*.deb "$W/deb/root"
    cp "$W/deb/root/usr/lib/python3/dist-packages/sklearn/datasets/data/breast_cancer.csv" "$W/" ||
        { echo "hospital.sh: no breast_cancer.csv in python3-sklearn" >&2; exit 1; }
    cp "$W/deb/root/usr/lib/python3/dist-packages/sklearn/datasets/descr/breast_cancer.rst" "$W/" ||
        :
    rm -rf "$W/deb"
    CSV=$W/breast_cancer.csv
    DESCR=$W/breast_cancer.rst
fi
echo "from $CSV"

# Its first row holds counts (569,30,malignant,benign), not names: write a
# header (scikit-learn's feature names). It codes malignant 0 and benign 1:
# label = 1 - target, so malignant is the positive class (label 1).
# Shuffled (seeded), 20% held out as the pooled test file; every other patient
# goes to one hospital with label skew: a malignant patient to a, b, c with
# probability 0.6, 0.3, 0.1, a benign one with 0.15, 0.35, 0.5.
names="mean_radius,mean_texture,mean_perimeter,mean_area,mean_smoothness"
names="$names,mean_compactness,mean_concavity,mean_concave_points,mean_symmetry"
names="$names,mean_fractal_dimension,radius_error,texture_error,perimeter_error,area_error"
names="$names,smoothness_error,compactness_error,concavity_error,concave_points_error"
names="$names,symmetry_error,fractal_dimension_error,worst_radius,worst_texture"
names="$names,worst_perimeter,worst_area,worst_smoothness,worst_compactness"
names="$names,worst_concavity,worst_concave_points,worst_symmetry,worst_fractal_dimension"
mkdir -p "$W/hospital-a" "$W/hospital-b" "$W/hospital-c" "$W/aggregator"
awk -F, -v seed="$SEED" -v names="$names" -v w="$W" '
    NR == 1 { if ($1 != 569 || $2 != 30) { print "unexpected first row: " $0 > "/dev/stderr"; exit 1 }
              next }
    { n++; row[n] = $0 }
    END {
        srand(seed)
        for (i = 1; i <= n; i++) { # shuffle: Fisher-Yates over the seeded stream
            j = 1 + int(rand() * i); t = row[i]; row[i] = row[j]; row[j] = t
        }
        hdr = names ",label"
        split("a b c", site, " ")
        for (s = 1; s <= 3; s++) print hdr > (w "/hospital-" site[s] "/data.csv")
        print hdr > (w "/test.csv")
        print hdr > (w "/train-pooled.csv")
        nt = int(n / 5)
        for (i = 1; i <= n; i++) {
            k = split(row[i], f, ",")
            y = 1 - f[k]              # malignant (0 in the file) -> 1
            line = f[1]
            for (c = 2; c < k; c++) line = line "," f[c]
            line = line "," y
            if (i <= nt) { print line > (w "/test.csv"); continue }
            print line > (w "/train-pooled.csv")
            u = rand()
            s = y ? (u < 0.6 ? 1 : u < 0.9 ? 2 : 3) : (u < 0.15 ? 1 : u < 0.5 ? 2 : 3)
            print line > (w "/hospital-" site[s] "/data.csv")
        }
    }' "$CSV"
# The aggregator's --data is only for its own evaluation each round: the
# held-out file as its "training" file (whose statistics scale it) and as its
# test split (X.test.csv beside X.csv).
cp "$W/test.csv" "$W/aggregator/heldout.csv"
cp "$W/test.csv" "$W/aggregator/heldout.test.csv"
for s in a b c; do
    awk -F, -v s="$s" 'NR > 1 { n++; m += $NF }
        END { printf "hospital-%s: %3d patients, %3d malignant (%2.0f%%)\n", s, n, m, 100 * m / n }' \
        "$W/hospital-$s/data.csv"
done
awk -F, 'NR > 1 { n++; m += $NF }
    END { printf "held out:   %3d patients, %3d malignant (%2.0f%%)\n", n, m, 100 * m / n }' "$W/test.csv"

# The bounds of the DP statistics (--feature-bounds, one LO:HI per column):
# the data set's published description (breast_cancer.rst beside the file,
# scikit-learn's DESCR) lists each feature's minimum and maximum over all
# 569 patients. That table is public, shipped with the data to anyone, so
# bounds taken from it release nothing the noise has to cover; they are
# widened by 5% of each range on both sides (generous, as bounds from
# clinical knowledge would be). A real consortium declares bounds from its
# field's literature, never from its patients' own values.
bounds=""
if [ -r "$DESCR" ]; then
    bounds=$(awk '/^ *[a-z ]+\((mean|standard error|worst)\): +[0-9.]+ +[0-9.]+ *$/ {
            n++; lo = $(NF - 1); hi = $NF; w = 0.05 * (hi - lo)
            printf "%s%d=%.6g:%.6g", (n > 1 ? "," : ""), n, lo - w, hi + w
        } END { if (n != 30) exit 1 }' "$DESCR") || bounds=""
fi
if [ "$DP" = 1 ] && [ -z "$bounds" ]; then
    echo "hospital.sh: no published feature ranges in $DESCR (HOSPITAL_DESCR=path/to/breast_cancer.rst)" >&2
    exit 1
fi
[ "$DP" = 1 ] && echo "feature bounds (published ranges, widened 5%): $bounds"

# 2. Keys: each node's own, sealed with a passphrase of its own (here random,
# in a 0600 file; at a real site, typed or kept by the site's secret store).
# The allow-list names every node by its public key; it is all the nodes share.
say "2. sealed keys and the allow-list"
umask 077
mkdir -p "$W/keys"
: >"$W/keys/allow.txt"
for n in aggregator hospital-a hospital-b hospital-c; do
    if [ ! -f "$W/keys/$n/node.key" ]; then
        od -An -N24 -tx1 /dev/urandom | tr -d ' \n' >"$W/keys/$n.pass"
        echo >>"$W/keys/$n.pass"
        "$FEDNODE" keygen --out "$W/keys/$n" --passphrase-file "$W/keys/$n.pass" >"$W/keys/$n.out" 2>&1 ||
            { cat "$W/keys/$n.out" >&2; exit 1; }
    fi
    echo "$n $("$FEDNODE" pubkey "$W/keys/$n")" >>"$W/keys/allow.txt"
done
umask 022
cat "$W/keys/allow.txt"

# 3. The federation. Under DP the shared-statistics pass (--standardize)
# runs as DP statistics: the aggregator declares the bounds, each hospital
# clips its values into them, adds Gaussian noise to its sums and charges
# that release to its privacy budget (docs/privacy.md) before it leaves.
say "3. the federation: an aggregator and three hospitals"
dpa="" dpc="" std=--no-standardize sec="" fb=""
if [ "$DP" = 1 ]; then
    dpa="--require-dp-sgd --dp-sgd-clip $CLIP --dp-sgd-noise $NOISE --stats-noise $STATS_NOISE"
    dpc="--dp-sgd --dp-sgd-clip $CLIP --dp-sgd-noise $NOISE --dp-delta $DELTA"
    std=--standardize fb=--feature-bounds
elif [ "${HOSPITAL_STANDARDIZE:-0}" = 1 ]; then
    std=--standardize
fi
[ "$SECAGG" = 1 ] && sec=--secagg
rm -f "$W/aggregator/port" "$W"/*.db
# shellcheck disable=SC2086
( cd "$W/aggregator" && exec "$FEDNODE" run --role aggregator --keys ../keys/aggregator \
    --passphrase-file ../keys/aggregator.pass --allow ../keys/allow.txt --db ../aggregator.db \
    --listen tcp://127.0.0.1:0 --port-file port --data heldout.csv --features 30 --classes 2 \
    --model logreg --optimizer sgd --lr "$LR" --batch "$BATCH" --local-epochs "$EPOCHS" \
    --rounds "$ROUNDS" --min-clients 3 --wait-clients 3 --deadline-ms 60000 --gather-ms 200 \
    --linger-ms 500 --threads 1 $std $sec $dpa ${fb:+"$fb" "$bounds"} ) >"$W/aggregator.log" 2>&1 &
agg=$!
PIDS=$agg
n=0
while [ ! -s "$W/aggregator/port" ]; do
    n=$((n + 1))
    if [ $n -gt 300 ] || ! kill -0 $agg 2>/dev/null; then
        tail -n 5 "$W/aggregator.log" >&2; echo "hospital.sh: the aggregator did not start" >&2; exit 1
    fi
    sleep 0.1
done
port=$(cat "$W/aggregator/port")
echo "aggregator on tcp://127.0.0.1:$port ($ROUNDS rounds of logreg, $EPOCHS local epochs each)"
for s in a b c; do
    # shellcheck disable=SC2086
    ( cd "$W/hospital-$s" && exec "$FEDNODE" run --role client --keys ../keys/hospital-$s \
        --passphrase-file ../keys/hospital-$s.pass --allow ../keys/allow.txt \
        --db ../hospital-$s.db --aggregator "tcp://127.0.0.1:$port" --aggregator-key aggregator \
        --data data.csv --features 30 --classes 2 --threads 1 $std $sec $dpc ) \
        >"$W/hospital-$s.log" 2>&1 &
    PIDS="$PIDS $!"
    echo "hospital-$s: training on its own data.csv${dpc:+ with DP-SGD}"
done
# Until the aggregator's last round; a hospital that fails ends the run (the
# aggregator would wait for it), and so does a run past HOSPITAL_TIMEOUT s.
failed() { tail -n 5 "$W"/*.log >&2; echo "hospital.sh: $1 (logs in $W)" >&2; exit 1; }
sites=${PIDS#"$agg"} n=$((${HOSPITAL_TIMEOUT:-600} * 5))
while kill -0 "$agg" 2>/dev/null; do
    left=""
    for p in $sites; do
        if kill -0 "$p" 2>/dev/null; then left="$left $p"; else wait "$p" || failed "a hospital failed"; fi
    done
    sites=$left n=$((n - 1))
    [ $n -gt 0 ] || failed "the federation ran past ${HOSPITAL_TIMEOUT:-600} s"
    sleep 0.2
done
wait "$agg" || failed "the aggregator failed"
for p in $sites; do wait "$p" || failed "a hospital failed"; done
PIDS=""
grep "aggregator: round .* accuracy" "$W/aggregator.log" | tail -n 1 || :
if [ "$DP" = 1 ]; then
    for s in a b c; do
        eps=$("$FEDNODE" status --db "$W/hospital-$s.db" --json |
            sed -n 's/.*"privacy":{"releases":[0-9]*,"epsilon":\([^,]*\),.*/\1/p')
        echo "hospital-$s spent epsilon $eps (delta $DELTA)"
    done
fi

# 4. The model: exported by the aggregator, scored on the held-out patients.
say "4. the exported model on the $(($(wc -l <"$W/test.csv") - 1)) held-out patients"
"$FEDNODE" export --db "$W/aggregator.db" --out "$W/model.safetensors" >/dev/null
( cd "$W/aggregator" && FEDNODE_LOG=warn "$FEDNODE" eval --model ../model.safetensors \
    --data heldout.csv --threads 1 ) >"$W/eval.txt"
cat "$W/eval.txt"
auc=$(sed -n 's/.*AUC \([0-9.]*\).*/\1/p' "$W/eval.txt" | head -n 1)
sens=$(sed -n 's/.*sensitivity \([0-9.]*\).*/\1/p' "$W/eval.txt" | head -n 1)
echo "fednode:      AUC $auc  sensitivity $sens"

# 5. The same held-out patients scored by scikit-learn's LogisticRegression
# trained on all the training rows pooled in one place (what the federation
# stands in for), its features scaled with the pooled mean and std.
if /usr/bin/python3 -c 'import sklearn' 2>/dev/null; then
    /usr/bin/python3 - "$W/train-pooled.csv" "$W/test.csv" <<'PY' | tee "$W/sklearn.txt"
import sys
import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import recall_score, roc_auc_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
tr = np.loadtxt(sys.argv[1], delimiter=",", skiprows=1)
te = np.loadtxt(sys.argv[2], delimiter=",", skiprows=1)
m = make_pipeline(StandardScaler(), LogisticRegression(max_iter=5000)).fit(tr[:, :-1], tr[:, -1])
p = m.predict_proba(te[:, :-1])[:, 1]
print("scikit-learn: AUC %.4f  sensitivity %.4f" % (roc_auc_score(te[:, -1], p),
                                                     recall_score(te[:, -1], p >= 0.5)))
PY
else
    echo "scikit-learn: not installed for /usr/bin/python3 (apt-get install python3-sklearn)"
fi
echo "everything is in $W"
