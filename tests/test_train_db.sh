#!/bin/sh
# test_train_db.sh - `fednode train --db` end to end: 2 recorded epochs,
# status / verify / export of that database, the refusals (a database that
# already has rounds without --resume, --resume without --db, another model
# on resume), --resume to 3 epochs giving round 3, and that run's round-3
# model hash equal to an uninterrupted 3-epoch run's; --no-eval (no test
# split loaded or scored) and --start-at (the first epoch waits for that
# instant and says how late it began); --warm-up (one untimed epoch before
# that wait; refused with --db, --out, --dp-sgd); each epoch's rate in its
# row, with and without --lr-warmup; missing data said before a device is
# opened. Needs ./fednode (make)
# and Fashion-MNIST; exits 77 (skipped) without them.
set -u
FEDNODE=${FEDNODE:-./fednode}
DATA=${FEDNODE_DATA:-/usr/share/datasets/fashion-mnist}
if [ ! -x "$FEDNODE" ]; then echo "skipped: no $FEDNODE (run make)"; exit 77; fi
if [ ! -e "$DATA/train-images-idx3-ubyte.gz" ] && [ ! -e "$DATA/train-images-idx3-ubyte" ]; then
    echo "skipped: no Fashion-MNIST in $DATA"; exit 77
fi
if ! "$FEDNODE" train --help 2>/dev/null | grep -q -- "--resume"; then
    echo "FAIL: $FEDNODE train --help lists no --resume"; exit 1
fi
TMP=$(mktemp -d) || exit 1
trap 'rm -rf "$TMP"' EXIT
RUN="--data fashion-mnist --model logreg --shard 0/20 --threads 1 --schedule const"

fail() { echo "FAIL: $1"; sed 's/^/  | /' "$TMP/out"; exit 1; }
# ok DESC CMD...: CMD must exit 0
ok() { d=$1; shift; "$@" >"$TMP/out" 2>&1 || fail "$d (exit $?)"; echo "ok: $d"; }
# refused DESC RC TEXT CMD...: CMD must exit RC and print TEXT
refused() {
    d=$1 want=$2 text=$3; shift 3
    "$@" >"$TMP/out" 2>&1; rc=$?
    [ $rc -eq "$want" ] || fail "$d (exit $rc, wanted $want)"
    grep -q -- "$text" "$TMP/out" || fail "$d (no '$text' in the output)"
    echo "ok: $d"
}
# round_hash DB N: model_hash of round N from status --json
round_hash() {
    "$FEDNODE" status --db "$1" --json | tr '{' '\n' | grep "\"round\":$2," |
        sed -n 's/.*"model_hash":"\([0-9a-f]*\)".*/\1/p'
}

# shellcheck disable=SC2086
ok "train 2 epochs into n.db" "$FEDNODE" train $RUN --epochs 2 --db "$TMP/n.db"
ok "status --db n.db" "$FEDNODE" status --db "$TMP/n.db"
grep -q "local" "$TMP/out" || fail "status shows strategy local"
[ "$("$FEDNODE" status --db "$TMP/n.db" --json | grep -o '"round":[0-9]*,"start' | wc -l)" -eq 2 ] ||
    fail "status --json lists 2 rounds"
echo "ok: status --json lists rounds 1..2"
# each epoch's row holds the rate of its first step: Adam's 0.002 (const);
# with one epoch of warm-up (--lr-warmup 1: 47 steps of 64 of the 3000
# samples) epoch 1 starts at 0.002 / 48 and epoch 2 at 0.002
# round_lr DB N: lr of round N from status --json, to 4 digits
round_lr() {
    "$FEDNODE" status --db "$1" --json | tr '{' '\n' | grep "\"round\":$2," |
        sed -n 's/.*"lr":\([0-9.e-]*\).*/\1/p' | awk '{ printf "%.4g", $1 }'
}
[ "$(round_lr "$TMP/n.db" 1),$(round_lr "$TMP/n.db" 2)" = "0.002,0.002" ] ||
    fail "the rounds' lr is 0.002 (got $(round_lr "$TMP/n.db" 1),$(round_lr "$TMP/n.db" 2))"
# shellcheck disable=SC2086
ok "train 2 epochs, 1 of warm-up, into w.db" "$FEDNODE" train $RUN --epochs 2 --lr-warmup 1 \
    --db "$TMP/w.db"
grep -q "schedule const after 1 warm-up epoch" "$TMP/out" || fail "train says the warm-up"
[ "$(round_lr "$TMP/w.db" 1),$(round_lr "$TMP/w.db" 2)" = "4.167e-05,0.002" ] ||
    fail "warm-up: lr 0.002/48, then 0.002 (got $(round_lr "$TMP/w.db" 1),$(round_lr "$TMP/w.db" 2))"
echo "ok: status shows each epoch's rate: 0.002 0.002; with --lr-warmup 1: 4.167e-05 0.002"
# shellcheck disable=SC2086
# missing data is said before any device is opened (a GPU takes seconds)
refused "missing data named before the device" 1 "/nonexistent: not found" \
    "$FEDNODE" train --data /nonexistent --device cuda:7 --epochs 1
grep -q "device" "$TMP/out" && fail "missing data: the device was opened first"
refused "--lr-warmup that leaves cosine no epoch" 2 "lr-warmup" \
    "$FEDNODE" train --data fashion-mnist --model logreg --epochs 2 --lr-warmup 2 --db "$TMP/x.db"
ok "verify --db n.db" "$FEDNODE" verify --db "$TMP/n.db"
ok "export --db n.db --out m.safetensors" "$FEDNODE" export --db "$TMP/n.db" --out "$TMP/m.safetensors"
[ -s "$TMP/m.safetensors" ] || fail "m.safetensors written"
echo "ok: m.safetensors is $(wc -c <"$TMP/m.safetensors") bytes"
# shellcheck disable=SC2086
refused "a database with rounds needs --resume" 2 "--resume" \
    "$FEDNODE" train $RUN --epochs 3 --db "$TMP/n.db"
# shellcheck disable=SC2086
refused "--resume without --db is a usage error" 2 "--db" "$FEDNODE" train $RUN --resume
# shellcheck disable=SC2086
refused "--resume with another model" 1 "mlp:16" \
    "$FEDNODE" train --data fashion-mnist --model mlp:16 --shard 0/20 --threads 1 \
    --schedule const --epochs 3 --db "$TMP/n.db" --resume
# shellcheck disable=SC2086
ok "train --resume --epochs 3" "$FEDNODE" train $RUN --epochs 3 --db "$TMP/n.db" --resume
grep -q "epoch   3/3" "$TMP/out" || fail "the resumed run trains epoch 3 only"
if grep -q "epoch   1/3" "$TMP/out"; then fail "the resumed run starts at epoch 3"; fi
echo "ok: the resumed run trained epoch 3 only"
h3=$(round_hash "$TMP/n.db" 3)
[ -n "$h3" ] || fail "status shows round 3"
echo "ok: round 3 recorded ($h3)"
ok "verify after resume" "$FEDNODE" verify --db "$TMP/n.db"
# Damage the file at the SQLite level: the b-tree header of every page past
# the first three (sqlite_schema, meta and its index stay readable, so it
# opens). verify must say the file is damaged, quote integrity_check, and not
# call it a hash or chain mismatch.
cp "$TMP/n.db" "$TMP/d.db"
psize=$(od -An -tu1 -j16 -N2 "$TMP/d.db" | awk '{print $1 == 0 && $2 == 1 ? 65536 : $1 * 256 + $2}')
pages=$(($(wc -c <"$TMP/d.db") / psize))
p=4
while [ "$p" -le "$pages" ]; do
    printf '\377\377\377\377\377\377\377\377\377\377\377\377' |
        dd of="$TMP/d.db" bs=1 seek=$(((p - 1) * psize)) conv=notrunc 2>/dev/null
    p=$((p + 1))
done
refused "verify of a damaged database file" 1 "database file damaged" \
    "$FEDNODE" verify --db "$TMP/d.db"
grep -q "^integrity_check: database file damaged (SQLite found corruption): [0-9]* problem" \
    "$TMP/out" || fail "verify counts integrity_check's problems"
grep -q "btreeInitPage" "$TMP/out" || fail "verify quotes integrity_check's lines"
grep -q "^FAULTS FOUND: the database file .*d.db is damaged (SQLite-level corruption" \
    "$TMP/out" || fail "verify's summary says the file is damaged"
if grep -q "hash or chain mismatch)$" "$TMP/out"; then fail "damage is not a hash mismatch"; fi
echo "ok: verify tells a damaged file from a hash or chain mismatch ($pages pages of $psize)"
# shellcheck disable=SC2086
ok "uninterrupted 3 epochs into u.db" "$FEDNODE" train $RUN --epochs 3 --db "$TMP/u.db"
u3=$(round_hash "$TMP/u.db" 3)
[ "$h3" = "$u3" ] || { echo "  resumed $h3, uninterrupted $u3" >"$TMP/out"; fail "round 3 hashes equal"; }
echo "ok: 2 epochs + resume == 3 epochs (round 3 model hash equal)"

# shellcheck disable=SC2086
ok "train with the test split" "$FEDNODE" train $RUN --epochs 1
grep -q "test_acc" "$TMP/out" || fail "an epoch line has test_acc by default"
# shellcheck disable=SC2086
ok "train --no-eval" "$FEDNODE" train $RUN --epochs 1 --no-eval
if grep -q "test" "$TMP/out"; then fail "--no-eval neither loads nor scores the test split"; fi
echo "ok: --no-eval leaves the test split alone"
at=$(($(date +%s) + 2))
# shellcheck disable=SC2086
ok "train --start-at (1-2 s ahead)" "$FEDNODE" train $RUN --epochs 2 --no-eval --start-at "$at"
now=$(date +%s)
[ "$now" -ge "$at" ] || fail "the run ended after --start-at"
grep "epoch   1/2" "$TMP/out" | grep -q "start +0\.[0-9]*$" ||
    fail "epoch 1 began at or just after --start-at"
if grep "epoch   2/2" "$TMP/out" | grep -q "start"; then fail "only epoch 1 waits"; fi
echo "ok: --start-at: $(grep -o 'start +[0-9.]*' "$TMP/out")"
# shellcheck disable=SC2086
refused "--start-at takes a decimal number" 2 "not a decimal number" "$FEDNODE" train $RUN --start-at soon
# --warm-up: one untimed epoch first, then --start-at's wait and the timed epochs
at=$(($(date +%s) + 2))
# shellcheck disable=SC2086
ok "train --warm-up --start-at" "$FEDNODE" train $RUN --epochs 1 --no-eval --warm-up --start-at "$at"
[ "$(grep -c '^# warm-up epoch  samples/s [0-9]*  ready -[0-9.]*$' "$TMP/out")" -eq 1 ] ||
    fail "one warm-up line, ready before --start-at"
grep "epoch   1/1" "$TMP/out" | grep -q "start +0\.[0-9]*$" || fail "the timed epoch waited for --start-at"
echo "ok: --warm-up: $(grep -o 'ready -[0-9.]*' "$TMP/out"), then $(grep -o 'start +[0-9.]*' "$TMP/out")"
for o in "--db $TMP/wu.db" "--out $TMP/wu.bin" "--dp-sgd"; do
    # shellcheck disable=SC2086
    refused "--warm-up refuses ${o%% *}" 2 "cannot go with ${o%% *}" "$FEDNODE" train $RUN --warm-up $o
done
if [ -e "$TMP/wu.db" ] || [ -e "$TMP/wu.bin" ]; then fail "a refused --warm-up wrote a file"; fi
echo "all checks passed"
