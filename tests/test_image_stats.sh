#!/bin/sh
# test_image_stats.sh - shared statistics of images (issue 37): an
# aggregator and three real client processes, each site's RGB image folder
# (PNGs written here, the channels far apart: red near 220, green near 30,
# blue over the range, the sites' levels shifted) in its own directory,
# plain and with --secagg:
#  - with the aggregator's --standardize round 1 is the statistics pass over
#    the three channels, every site standardizes its pixels with them;
#  - the statistics the export carries (a channel each, marked
#    fednode.input_stats = channel) are the pooled pixel bytes' mean and
#    population std within model/colstats.h's precision;
#  - `fednode eval` of the export scores, from every site's directory, what
#    the aggregator recorded for its last round;
#  - --stats-only prints the per-channel table;
#  - an aggregator restarted on its database keeps the statistics (no
#    second pass) and its evaluation still scores as eval of the export;
#  - DP statistics need no --feature-bounds for images (the byte's 0:255):
#    each site charges its noised release, the means within 5 sigma;
#  - without --standardize images get no pass (the default).
# Needs ./fednode, python3 and the sqlite3 shell; exits 77 without.
. "$(dirname "$0")/proc_lib.sh"
command -v sqlite3 >/dev/null 2>&1 || { echo "skipped: no sqlite3 shell (apt-get install sqlite3)"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "skipped: no python3"; exit 77; }
FED=$(cd "$(dirname "$FEDNODE")" && pwd)/$(basename "$FEDNODE")
FEDNODE_CACHE=off
export FEDNODE_CACHE

# the sites' folders (train: their own images; test: the same test images
# everywhere), the aggregator's (a few images and the test images), and
# the pooled training pixels' statistics in pooled.txt
python3 - "$TMP" <<'PY' || { echo "FAIL: writing the images"; exit 1; }
import os, random, struct, sys, zlib
root = sys.argv[1]
def png(path, px, w, h):  # px: rows of interleaved RGB bytes
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    raw = b"".join(b"\0" + bytes(r) for r in px)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
def image(rnd, label, shift):
    rows = []
    for y in range(8):
        r = []
        for x in range(8):
            red = min(255, max(0, int(rnd.gauss(215 + shift, 15))))
            green = min(255, max(0, int(rnd.gauss(30 + shift / 4, 6))))
            blue = rnd.randrange(256) if (x < 4) == (label == 1) else rnd.randrange(224)
            r += [red, green, blue]
        rows.append(r)
    return rows
pooled = [[], [], []]
def folder(d, split, n, seed, shift, keep):
    rnd = random.Random(seed)
    for i in range(n):
        label = i % 2
        os.makedirs(os.path.join(root, d, split, "c%d" % label), exist_ok=True)
        px = image(rnd, label, shift)
        png(os.path.join(root, d, split, "c%d" % label, "%03d.png" % i), px, 8, 8)
        if keep:
            for row in px:
                for x in range(8):
                    for k in range(3):
                        pooled[k].append(row[3 * x + k])
for s, (n, shift) in enumerate([(60, 0), (90, 20), (50, -25)]):
    folder("s%d/img" % s, "train", n, 10 + s, shift, True)
    folder("s%d/img" % s, "test", 60, 99, 0, False)
folder("agg/img", "train", 4, 98, 0, False)
folder("agg/img", "test", 60, 99, 0, False)
with open(os.path.join(root, "pooled.txt"), "w") as f:
    for v in pooled:
        n = len(v); m = sum(v) / n  # bytes: sums exact in Python integers
        var = (sum(x * x for x in v) * n - sum(v) ** 2) / (n * n)
        f.write("%d %.17g %.17g\n" % (n, m, var ** 0.5))
PY

K=$TMP/keys
allow_keys "$K" agg c0 c1 c2

# run NAME ROUNDS EXTRA...: an aggregator and the three sites (EXTRA for
# every node; $AGGX for the aggregator alone, $CLIX for the sites)
run() {
    r=$1 n=$2; shift 2
    start "$r-agg" --role aggregator --keys "$K/agg" --allow "$K/allow.txt" \
        --db "$TMP/$r-agg.db" --listen tcp://127.0.0.1:0 --port-file "$TMP/$r.port" \
        --data "$TMP/agg/img" --image-shape 3x8x8 --threads 1 --model logreg --optimizer sgd \
        --lr 0.05 --batch 16 --local-epochs 1 --rounds "$n" --min-clients 3 --wait-clients 3 \
        --deadline-ms 60000 --gather-ms 100 --linger-ms 500 ${AGGX:-} "$@"
    wait_for "the $r aggregator wrote its port" 30 test -s "$TMP/$r.port"
    P=$(cat "$TMP/$r.port")
    rm -f "$TMP/$r.port" # a restart writes it again
    site_clients "$r" "$P" --data img --image-shape 3x8x8 --threads 1 ${CLIX:-} "$@"
}
# scores R ROUND: eval of R's export scores what the aggregator recorded for
# ROUND, from every site's directory
scores() {
    r=$1 db=$TMP/$1-agg.db
    "$FEDNODE" export --db "$db" --out "$TMP/$r.safetensors" >"$TMP/$r-export.out" 2>&1 ||
        fail "$r: export: $(cat "$TMP/$r-export.out")"
    rec=$(sqlite3 "$db" "SELECT printf('loss %.4f  accuracy %.4f', loss, accuracy) FROM rounds WHERE round = $2")
    for s in 0 1 2; do
        ( cd "$TMP/s$s" && FEDNODE_NO_REEXEC=1 "$FED" eval --model "$TMP/$r.safetensors" \
            --data img --image-shape 3x8x8 --threads 1 ) >"$TMP/$r-eval$s.out" 2>"$TMP/$r-eval$s.log" ||
            fail "$r: eval of the export at site $s: $(cat "$TMP/$r-eval$s.log")"
        grep -q "  $rec\$" "$TMP/$r-eval$s.out" ||
            fail "$r: eval of the export at site $s gives the aggregator's round $2 ($rec): $(head -n 1 "$TMP/$r-eval$s.out")"
    done
    ok "$r: the export scores $rec at all three sites, as the aggregator recorded for round $2"
}
# check R: the pass, the sites standardized, the export's statistics the
# pooled pixels', and eval of the export
check() {
    r=$1 db=$TMP/$1-agg.db
    [ "$(sqlite3 "$db" 'SELECT max(round) FROM rounds')" = 3 ] ||
        fail "$r: the pass and 2 training rounds (rounds 1..3)"
    grep -q "aggregator: round 1: the statistics pass, 3 of 3 sampled clients in it" "$TMP/$r-agg.log" ||
        fail "$r: round 1 is the statistics pass, with all three sites"
    for s in 0 1 2; do
        grep -q "client: its data standardized with the shared statistics of 3 columns" "$TMP/$r-s$s.log" ||
            fail "$r: site $s standardizes with the shared statistics"
    done
    scores "$r" 3
    python3 - "$TMP/$r.safetensors" "$TMP/pooled.txt" <<'PY' >"$TMP/$r-stats.out" 2>&1 || fail "$r: $(cat "$TMP/$r-stats.out")"
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
meta = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])["__metadata__"]
assert meta.get("fednode.input_stats") == "channel", meta
assert meta["fednode.input"] == "3,8,8", meta
mean = [float(v) for v in meta["fednode.input_mean"].split(",")]
std = [float(v) for v in meta["fednode.input_std"].split(",")]
assert len(mean) == len(std) == 3, (mean, std)
for k, line in enumerate(open(sys.argv[2])):
    n, pm, ps = line.split()
    pm, ps = float(pm), float(ps)
    # model/colstats.h: bytes are exact in fixed point; the final rounding only
    if abs(mean[k] - pm) > 2.0 ** -33 + 4e-16 * pm or abs(std[k] - ps) > 2.0 ** -33 + 4e-16 * ps:
        sys.exit("channel %d: export says mean %r std %r; pooled %r %r" % (k + 1, mean[k], std[k], pm, ps))
    print("channel %d: mean %.17g (pooled %.17g), std %.17g (pooled %.17g)" % (k + 1, mean[k], pm, std[k], ps))
assert mean[0] > 200 and mean[1] < 40, mean
PY
    ok "$r: the export's channel statistics are the pooled pixels' within 2^-33: $(tr '\n' ';' <"$TMP/$r-stats.out")"
}

AGGX=--standardize run plain 2
check plain
AGGX=--standardize run secure 2 --secagg
check secure

# a restart keeps them: the same aggregator's database, two rounds more; no
# second pass, its test set standardized at resume, eval of the export
# scores its last round
AGGX=--standardize run plain 4
[ "$(sqlite3 "$TMP/plain-agg.db" 'SELECT max(round) FROM rounds')" = 5 ] ||
    fail "restart: two training rounds more (rounds 4..5)"
grep -q "aggregator: resumed from the checkpoint of round 3" "$TMP/plain-agg.log" &&
    [ "$(grep -c "the statistics pass, 3 of 3" "$TMP/plain-agg.log")" = 0 ] ||
    fail "restart: resumed after round 3, no second statistics pass"
scores plain 5
ok "restart: the statistics kept, no second pass, the aggregator's evaluation as eval of the export"

# without the statistics (a model file carries none) the same model scores
# otherwise: what the checks above compare is sensitive to them
"$FEDNODE" import --in "$TMP/plain.safetensors" --out "$TMP/plain.model" >/dev/null 2>&1 ||
    fail "import the export"
( cd "$TMP/s0" && FEDNODE_NO_REEXEC=1 "$FED" eval --model "$TMP/plain.model" --data img \
    --image-shape 3x8x8 --threads 1 ) >"$TMP/raw.out" 2>"$TMP/raw.log" || fail "eval of the model file: $(cat "$TMP/raw.log")"
grep -q "  $rec\$" "$TMP/raw.out" &&
    fail "the model without its statistics scores as with them (the test shows nothing): $(head -n 1 "$TMP/raw.out")"
ok "without the statistics the same model scores otherwise: $(head -n 1 "$TMP/raw.out" | sed 's/^model .*  samples/samples/')"

# --stats-only: the pass alone and the per-channel table
AGGX="--standardize --stats-only" run only 2
grep -q "^shared statistics of 3 channels (pixel bytes 0..255, round 1)" "$TMP/only-agg.log" ||
    fail "--stats-only prints the channels' table: $(tail -n 6 "$TMP/only-agg.log")"
m1=$(sed -n 1p "$TMP/pooled.txt" | cut -d' ' -f2 | cut -c1-8)
grep -Eq "^1 +red +[0-9]+ +0\.0000 +$m1" "$TMP/only-agg.log" && grep -Eq "^3 +blue " "$TMP/only-agg.log" ||
    fail "--stats-only's table names each channel with its count and mean: $(tail -n 5 "$TMP/only-agg.log")"
ok "--stats-only: the per-channel table"

# DP statistics under a DP-SGD requirement: images need no --feature-bounds
# (each channel's bounds are the byte's, 0:255); each site clips (nothing
# to clip), noises and charges its release (q 1, sigma 4, one step) with a
# record an image (the noise 64 times a single value's: 8 x 8 pixels a
# channel), and the channels' means are within 5 sigma of the pooled
# pixels' (one site's sigma on a mean: 4 sqrt(3 x 3 channels) 127.5 / the
# images, three sites sqrt(3) times it)
AGGX="--standardize --require-dp-sgd --dp-sgd-clip 1 --dp-sgd-noise 1" \
    CLIX="--dp-sgd --dp-sgd-clip 1 --dp-sgd-noise 1" run dp 1
grep -q "each site's release clipped and noised (DP statistics)" "$TMP/dp-agg.log" ||
    fail "dp: the aggregator read DP statistics back"
for s in 0 1 2; do
    [ "$(sqlite3 "$TMP/dp-s$s.db" 'SELECT count(*) FROM dp_charges WHERE round = 1 AND q = 1 AND sigma = 4 AND steps = 1')" = 1 ] ||
        fail "dp: site $s charged the statistics pass (q 1, sigma 4, 1 step): $(sqlite3 "$TMP/dp-s$s.db" 'SELECT * FROM dp_charges')"
done
"$FEDNODE" export --db "$TMP/dp-agg.db" --out "$TMP/dp.safetensors" >"$TMP/dp-export.out" 2>&1 ||
    fail "dp: export: $(cat "$TMP/dp-export.out")"
python3 - "$TMP/dp.safetensors" "$TMP/pooled.txt" <<'PY' >"$TMP/dp-stats.out" 2>&1 || fail "dp: $(cat "$TMP/dp-stats.out")"
import json, math, struct, sys
raw = open(sys.argv[1], "rb").read()
meta = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])["__metadata__"]
mean = [float(v) for v in meta["fednode.input_mean"].split(",")]
for k, line in enumerate(open(sys.argv[2])):
    n, pm, ps = line.split()
    sig = 4 * math.sqrt(3 * 3) * 127.5 / (int(n) / 64) * math.sqrt(3)
    print("channel %d: mean %.6g (pooled %.6g, sigma %.3g)" % (k + 1, mean[k], float(pm), sig))
    if abs(mean[k] - float(pm)) > 5 * sig:
        sys.exit("channel %d: mean %r, the pooled %r, over 5 sigma %r" % (k + 1, mean[k], float(pm), sig))
PY
ok "dp: each site charged its noised channel statistics, within 5 sigma of the pooled pixels': $(tr '\n' ';' <"$TMP/dp-stats.out")"

# the default for images: no pass
AGGX= run off 1
[ "$(sqlite3 "$TMP/off-agg.db" 'SELECT max(round) FROM rounds')" = 1 ] &&
    ! grep -q "statistics pass" "$TMP/off-agg.log" ||
    fail "images without --standardize: no statistics pass"
ok "images without --standardize: no statistics pass (the default)"
