#!/bin/sh
# test_declared_input.sh - the input declared, not guessed (issue 35): an
# aggregator with no --data (--model logreg --features 4 --classes 2)
# runs a federation of CSV sites with label skew, written here: c0 holds
# only class 0 and declares nothing (it builds the 2-class model the
# MODEL declares), c1 declares --classes 2, c2 holds both classes; c3's
# labels reach 2 and it declares nothing: it declines round 1 at warning
# level with both class counts, the aggregator says so once and samples it
# no more. Round 1 is the shared-statistics pass over the declared columns,
# and every round merges c0, c1 and c2. Refusals at start, with the
# numbers: a site whose labels pass --classes, a CSV of another column
# count than --features, an aggregator that declares nothing and has no
# data, and the contradictions between a model file and the options. An
# image folder (PNGs written by python3; the check is skipped without it)
# is fitted to a declared --input-shape unless --image-shape says another.
# Needs ./fednode; KEEP=1 keeps the logs.
. "$(dirname "$0")/proc_lib.sh"

K=$TMP/keys
allow_keys "$K" agg c0 c1 c2 c3
# gen N SEED P1 MAXLABEL: N rows of 4 features, label 1 with probability
# P1 (MAXLABEL 2: a third of them 2), the features shifted by the label
gen() {
    awk -v n="$1" -v seed="$2" -v p="$3" -v k="$4" 'BEGIN {
        srand(seed); print "a,b,c,d,label"
        for (i = 0; i < n; i++) {
            y = rand() < p; if (k == 2 && rand() < 0.33) y = 2
            printf "%.4f,%.4f,%.4f,%.4f,%d\n", y + rand(), 2 * rand(), rand() - y, 3 * y + rand(), y
        }
    }'
}
gen 150 1 0 1 >"$TMP/c0.csv"    # benign only: one class
gen 150 2 0.5 1 >"$TMP/c1.csv"
gen 150 3 0.8 1 >"$TMP/c2.csv"
gen 150 4 0.5 2 >"$TMP/c3.csv"  # labels 0..2: three classes
[ "$(awk -F, 'NR > 1 && $5 != 0' "$TMP/c0.csv" | wc -l)" -eq 0 ] || fail "c0.csv holds class 0 only"
awk 'BEGIN { print "a,b,c,label"; print "1,2,3,0"; print "1,2,3,1" }' >"$TMP/three.csv"
awk 'BEGIN { print "a,b,c,d,label"; print "1,2,3,4,0"; print "1,2,3,4,4"; print "1,2,3,4,3" }' \
    >"$TMP/labels.csv"

# refusals at start
AGG="--role aggregator --keys $K/agg --allow $K/allow.txt --db $TMP/x.db --listen tcp://127.0.0.1:0"
CL="--role client --keys $K/c1 --allow $K/allow.txt --db $TMP/y.db --aggregator tcp://127.0.0.1:1 --aggregator-key agg"
# shellcheck disable=SC2086
refused "an aggregator with no data and nothing declared says what to give" \
    "an aggregator builds its model from the declared input, with no data, and none is declared: give --features N (a CSV's columns besides the label), --input-shape C,H,W or a model file with \[input\], and --classes K" \
    $AGG --model logreg
# shellcheck disable=SC2086
refused "without --classes, it asks for the classes" \
    "the number of classes is not declared: give --classes K" $AGG --model logreg --features 4
# shellcheck disable=SC2086
refused "a site whose labels pass --classes refuses at start, with the numbers" \
    "does not fit the declared classes: --classes 2 declares 2 (labels 0 to 1), the data has 2 samples labelled 2 or more, the largest label 4" \
    $CL --data "$TMP/labels.csv" --classes 2
# shellcheck disable=SC2086
refused "a CSV of another column count than --features refuses at start" \
    "does not fit the declared input: --features 4 declares 4 features, the data has 3 features (columns besides the label)" \
    $CL --data "$TMP/three.csv" --features 4
printf '[input] features = 4\n[linear] out = classes\n[output] classes = 2\n' >"$TMP/net.cfg"
# shellcheck disable=SC2086
refused "--features against the model file's [input]" \
    "the input is declared twice and differently: 4 features by net.cfg's \[input\], 5 features by --features 5" \
    $AGG --model "$TMP/net.cfg" --features 5
# shellcheck disable=SC2086
refused "--classes against the model file's classes" \
    "--classes 3 contradicts net.cfg, whose model has 2 classes" $AGG --model "$TMP/net.cfg" --classes 3

# the federation: no --data at the aggregator
mkdir -p "$TMP/a"
start agg --role aggregator --keys "$K/agg" --allow "$K/allow.txt" --db "$TMP/a/agg.db" \
    --listen tcp://127.0.0.1:0 --port-file "$TMP/a/port" --model logreg --features 4 \
    --classes 2 --rounds 3 --min-clients 3 --wait-clients 4 --gather-ms 500 \
    --deadline-ms 60000 --batch 32 --lr 0.1 --threads 1 --linger-ms 500
wait_for "the aggregator wrote its port" 20 test -s "$TMP/a/port"
PORT=$(cat "$TMP/a/port")
client() { # client NAME ARGS...
    name=$1; shift
    start "$name" --role client --keys "$K/$name" --allow "$K/allow.txt" --db "$TMP/a/$name.db" \
        --aggregator "tcp://127.0.0.1:$PORT" --aggregator-key agg --threads 1 \
        --data "$TMP/$name.csv" "$@"
}
client c0
client c1 --classes 2
client c2
client c3
wait_for "round 4 merged" 60 logged agg "round 4 merged"
exits0 agg 30
for c in c0 c1 c2; do exits0 "$c" 30; done
logged agg "run: no --data: the model is built from the declared input (1x1x4 by --features 4, 2 classes by --classes 2), no evaluation here" ||
    fail "the aggregator says it built the model from the declared input"
grep -qi "fashion\|idx" "$TMP/agg.log" && fail "the aggregator read no data"
# round 1 is the shared-statistics pass (--standardize, the default for CSV):
# the aggregator has no data, its columns are the declared --features
logged agg "aggregator: shared statistics of 4 columns from 3 clients (0 suppressed)" &&
    logged agg "aggregator: round 1: the statistics pass, 3 of 4 sampled clients in it" ||
    fail "round 1, the statistics pass over the declared 4 columns, took c0, c1 and c2"
for r in 2 3 4; do
    logged agg "round $r merged 3 of 3" || fail "round $r merged c0, c1 and c2, c3 not sampled"
done
ok "an aggregator with no data ran the statistics pass and 3 rounds over 3 CSV sites; the one-class site c0 trained in each"
logged c3 "warn: client: round 1: the aggregator's model has 2 classes (labels 0 to 1), this client's data has 3 (labels up to 2); declined (FED_ERR_MODEL_MISMATCH)" ||
    fail "c3 declines at warning level with both class counts"
[ "$(grep -c "warn: aggregator: client c3 declined round 1: the model does not fit it" "$TMP/agg.log")" -eq 1 ] ||
    fail "the aggregator says once that c3 declined"
logged agg "client c3 declined round [23]" && fail "c3 is not sampled after it declined"
ok "c3 (labels up to 2) declined round 1 naming both class counts; said once, then left out"

# image folders: fitted to the declared input unless --image-shape says otherwise
if command -v python3 >/dev/null 2>&1; then
    python3 - "$TMP/img" <<'EOF' || fail "write PNGs"
import os, struct, sys, zlib
def png(path, w, h, rgb):
    raw = b"".join(b"\x00" + bytes(rgb) * w for _ in range(h))
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
for c in ("a", "b"):
    os.makedirs(os.path.join(sys.argv[1], c))
    for i in range(3):
        png(os.path.join(sys.argv[1], c, "%d.png" % i), 16, 12, (40 * i, 100 if c == "a" else 200, 7))
EOF
    FEDNODE_CACHE=off; export FEDNODE_CACHE
    start img --role client --keys "$K/c1" --allow "$K/allow.txt" --db "$TMP/img.db" \
        --aggregator tcp://127.0.0.1:1 --aggregator-key agg --data "$TMP/img" --input-shape 3,8,8 \
        --classes 2
    wait_for "the image client read its folder" 20 logged img "images of 3x8x8, 2 classes"
    kill "$(pid img)"
    ok "an image folder is fitted to the declared --input-shape 3,8,8"
    # shellcheck disable=SC2086
    refused "images fitted to another --image-shape than the declared input refuse at start" \
        "does not fit the declared input: --input-shape 3,8,8 declares 3,8,8, the data has 1,8,8 per sample" \
        $CL --data "$TMP/img" --image-shape 1x8x8 --input-shape 3,8,8
else
    partly="no python3 to write PNGs: the image folder checks were skipped"
fi
if [ -n "${partly:-}" ]; then echo "skipped: $partly"; exit 77; fi
