#!/bin/sh
# test_tabular.sh - a tabular net on a CSV with categorical columns: the
# label is the exclusive or of two words' groups (a colour's and a city's),
# which no model of the bucket ids as plain numbers learns (logreg stays
# near chance), while embeddings of the two columns concatenated with the
# numeric ones reach at least 0.95 test accuracy with `fednode train`, and
# `fednode eval` of the saved model gives the same; a model whose
# embeddings do not match the data's --categorical columns or
# --hash-buckets is refused naming the column.
. "$(dirname "$0")/proc_lib.sh"
export FEDNODE_NO_REEXEC=1

# 800 training rows and 300 test rows, from a Park-Miller stream
awk -v tr="$TMP/t.csv" -v te="$TMP/t.test.csv" 'BEGIN {
    split("red green blue yellow purple orange black white", colour, " ")
    split("oslo lima pune kyiv doha rome", city, " ")
    s = 12345
    for (f = 0; f < 2; f++) {
        out = f ? te : tr
        print "colour,x1,city,x2,x3,label" > out
        for (i = 0; i < (f ? 300 : 800); i++) {
            s = (s * 16807) % 2147483647; c = s % 8 + 1
            s = (s * 16807) % 2147483647; t = s % 6 + 1
            s = (s * 16807) % 2147483647; x1 = (s % 2000) / 1000 - 1
            s = (s * 16807) % 2147483647; x2 = (s % 2000) / 1000 - 1
            s = (s * 16807) % 2147483647; x3 = (s % 2000) / 1000 - 1
            y = (c == 1 || c == 3 || c == 5 || c == 7) != (t <= 2)
            printf "%s,%.3f,%s,%.3f,%.3f,%d\n", colour[c], x1, city[t], x2, x3, y > out
        }
    }
}'
cat >"$TMP/tab.cfg" <<CFG
[input] features = 5 categorical = 0,2
[embedding] name = colour column = 0 num = 64 dim = 4
[embedding] name = city column = 2 num = 64 dim = 4
[concat] name = words input = colour from = city
[numeric] name = num
[concat] name = all input = words from = num
[linear] name = fc1 out = 16
[relu]
[linear] name = out out = 1
[output] loss = bce
CFG
DATA="--data $TMP/t.csv --categorical colour,city --hash-buckets 64"

acc() { sed -n 's/.*test_acc \([0-9.]*\).*/\1/p' "$1" | tail -n 1; }

# shellcheck disable=SC2086
"$FEDNODE" train $DATA --model "$TMP/tab.cfg" --epochs 20 --lr 0.02 --out "$TMP/tab.bin" \
    >"$TMP/tab.log" 2>&1 || fail "fednode train --model tab.cfg on categorical columns"
a=$(acc "$TMP/tab.log")
awk -v a="$a" 'BEGIN { exit !(a >= 0.95) }' || fail "the tabular net's test accuracy $a < 0.95"
ok "embeddings + numeric columns: test accuracy $a (>= 0.95)"

# shellcheck disable=SC2086
"$FEDNODE" eval $DATA --model "$TMP/tab.bin" >"$TMP/eval.log" 2>&1 ||
    fail "fednode eval of the saved tabular net"
grep -q "accuracy $a\$" "$TMP/eval.log" || { cat "$TMP/eval.log"; fail "eval gives train's $a"; }
ok "eval of the saved net: accuracy $a"

# shellcheck disable=SC2086
"$FEDNODE" train $DATA --model logreg --epochs 20 --lr 0.02 >"$TMP/lin.log" 2>&1 ||
    fail "fednode train --model logreg on the same data"
b=$(acc "$TMP/lin.log")
awk -v b="$b" 'BEGIN { exit !(b < 0.75) }' || fail "logreg on the ids as numbers reached $b"
ok "logreg on the bucket ids as numbers: $b (< 0.75: the words need the embeddings)"

if "$FEDNODE" train --data "$TMP/t.csv" --categorical colour,city --model "$TMP/tab.cfg" \
    --epochs 1 >"$TMP/buckets.log" 2>&1; then
    fail "an embedding of 64 ids under --hash-buckets 1024 is refused"
fi
grep -q "feature column 0 (from 0, the label left out): an embedding of it takes 64 ids, the data gives up to 1024 (--hash-buckets)" \
    "$TMP/buckets.log" || { cat "$TMP/buckets.log"; fail "the refusal names the column and both counts"; }
ok "too few ids for --hash-buckets: refused naming the column"

if "$FEDNODE" train --data "$TMP/t.csv" --categorical colour,x1,city --hash-buckets 64 \
    --model "$TMP/tab.cfg" --epochs 1 >"$TMP/cols.log" 2>&1; then
    fail "data hashing a column no embedding reads is refused"
fi
grep -q "feature column 1 (from 0, the label left out): the data hashes it (--categorical), no embedding reads it" \
    "$TMP/cols.log" || { cat "$TMP/cols.log"; fail "the refusal names the column"; }
ok "a hashed column no embedding reads: refused naming it"
