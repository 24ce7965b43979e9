#!/bin/sh
# test_tabular.sh - a tabular net on a CSV with categorical columns: the
# label is the exclusive or of two words' groups (a colour's and a city's),
# which no model of the bucket ids as plain numbers learns (logreg stays
# near chance), while embeddings of the two columns concatenated with the
# numeric ones reach at least 0.95 test accuracy with `fednode train`, and
# `fednode eval` of the saved model gives the same, and so does a federated
# run of three simulated sites (fedsim); a model whose
# embeddings do not match the data's --categorical columns or
# --hash-buckets is refused naming the column. Regression (--task
# regression, loss mse): a number set by a colour and two numeric columns,
# learnt to R^2 >= 0.95 on the test file as `fednode eval` reports it
# (with MSE and MAE); a classifier on numbers, or mse on classes, refused
# by train and by eval (which takes --task from an mse model when not given).
. "$(dirname "$0")/proc_lib.sh"
FEDSIM=${FEDSIM:-./fedsim}
export FEDNODE_NO_REEXEC=1

# tables NAME HEADER ROW: $TMP/NAME.csv (800 rows) and $TMP/NAME.test.csv
# (300) under HEADER, each row printed to out by the awk statements ROW,
# which draw from a Park-Miller stream: u() uniform in [-1, 1), k(n) 0..n-1.
tables() {
    awk -v tr="$TMP/$1.csv" -v te="$TMP/$1.test.csv" -v head="$2" '
        function k(n) { s = (s * 16807) % 2147483647; return s % n }
        function u() { return k(2000) / 1000 - 1 }
        BEGIN {
            s = 12345
            for (f = 0; f < 2; f++) {
                out = f ? te : tr
                print head > out
                for (i = 0; i < (f ? 300 : 800); i++) { '"$3"' }
            }
        }'
}

# the label: whether the colour is odd-numbered, flipped in two cities
tables t colour,x1,city,x2,x3,label '
    split("red green blue yellow purple orange black white", colour, " ")
    split("oslo lima pune kyiv doha rome", city, " ")
    c = k(8) + 1; t = k(6) + 1; x1 = u(); x2 = u(); x3 = u()
    printf "%s,%.3f,%s,%.3f,%.3f,%d\n", colour[c], x1, city[t], x2, x3, (c % 2 == 1) != (t <= 2) > out'
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

# federated: three simulated sites, the graph (embeddings and all) in each MODEL
# shellcheck disable=SC2086
"$FEDSIM" $DATA --model "$TMP/tab.cfg" --nodes 3 --rounds 20 --optimizer adam --lr 0.02 \
    --local-epochs 3 >"$TMP/sim.log" 2>&1 || fail "fedsim --model tab.cfg"
f=$(sed -n 's/^round   20 .* accuracy \([0-9.]*\) .*/\1/p' "$TMP/sim.log")
awk -v a="$f" 'BEGIN { exit !(a >= 0.95) }' || fail "fedsim's round 20 accuracy '$f' < 0.95"
ok "fedsim, 3 clients, 20 rounds: the tabular net's accuracy $f (>= 0.95)"

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

# regression: label = the colour's effect + 1.5 x1 - 0.5 x2 (x3 unused)
tables r colour,x1,x2,x3,label '
    split("red green blue black", colour, " "); split("2 -1 0.5 -2.5", eff, " ")
    c = k(4) + 1; x1 = u(); x2 = u(); x3 = u()
    printf "%s,%.3f,%.3f,%.3f,%.4f\n", colour[c], x1, x2, x3, eff[c] + 1.5 * x1 - 0.5 * x2 > out'
cat >"$TMP/reg.cfg" <<CFG
[input] features = 4 categorical = 0
[embedding] name = colour column = 0 num = 64 dim = 4
[numeric] name = num
[concat] name = all input = colour from = num
[linear] name = fc1 out = 16
[relu]
[linear] name = out out = 1
[output] loss = mse
CFG
RDATA="--data $TMP/r.csv --task regression --categorical colour --hash-buckets 64"
# shellcheck disable=SC2086
"$FEDNODE" train $RDATA --model "$TMP/reg.cfg" --epochs 20 --lr 0.02 --out "$TMP/reg.bin" \
    >"$TMP/reg.log" 2>&1 || fail "fednode train --task regression --model reg.cfg"
grep -q 'test_acc' "$TMP/reg.log" && fail "a regression has no accuracy to print"
# shellcheck disable=SC2086
"$FEDNODE" eval $RDATA --model "$TMP/reg.bin" >"$TMP/reg_eval.log" 2>&1 ||
    fail "fednode eval of the regression net"
r2=$(sed -n 's/^regression  MSE [^ ]*  MAE [^ ]*  R^2 \([-0-9.e]*\)$/\1/p' "$TMP/reg_eval.log")
[ -n "$r2" ] || { cat "$TMP/reg_eval.log"; fail "eval prints MSE, MAE and R^2"; }
awk -v r="$r2" 'BEGIN { exit !(r >= 0.95) }' || fail "the regression's test R^2 $r2 < 0.95"
ok "regression (mse): test $(grep '^regression' "$TMP/reg_eval.log") (R^2 >= 0.95)"

# shellcheck disable=SC2086
if "$FEDNODE" train $RDATA --model logreg --epochs 1 >"$TMP/reg_xent.log" 2>&1; then
    fail "cross-entropy on numbers to predict is refused"
fi
grep -q "the loss cross_entropy takes 2 classes or more, the data has 1 (a number to predict: a model file whose loss is mse)" \
    "$TMP/reg_xent.log" || { cat "$TMP/reg_xent.log"; fail "the refusal says why"; }
awk -F, 'NR == 1 { print; next } { printf "%s,%s,%s,%s,%d\n", $1, $2, $3, $4, ($5 > 0) }' \
    "$TMP/r.csv" >"$TMP/c.csv"
if "$FEDNODE" train --data "$TMP/c.csv" --categorical colour --hash-buckets 64 \
    --model "$TMP/reg.cfg" --epochs 1 >"$TMP/reg_cls.log" 2>&1; then
    fail "mse on classes is refused"
fi
grep -q "the model's loss mse takes numbers, the data's labels are classes (--task regression reads them as numbers)" \
    "$TMP/reg_cls.log" || { cat "$TMP/reg_cls.log"; fail "the refusal says why"; }
ok "cross-entropy on numbers and mse on classes: refused, saying why"

# eval takes the task from the model: an mse model without --task reads the
# labels as numbers (the R^2 as above); with --task classification, or a
# classifier on numbers, it is refused saying why (no crash: rc 1)
"$FEDNODE" eval --data "$TMP/r.csv" --categorical colour --hash-buckets 64 \
    --model "$TMP/reg.bin" >"$TMP/reg_eval2.log" 2>&1 || fail "eval of an mse model without --task"
grep -q "^regression  MSE .* R^2 $r2\$" "$TMP/reg_eval2.log" ||
    { cat "$TMP/reg_eval2.log"; fail "eval without --task gives the R^2 $r2 of --task regression"; }
"$FEDNODE" eval --data "$TMP/c.csv" --categorical colour --hash-buckets 64 --task classification \
    --model "$TMP/reg.bin" >"$TMP/reg_eval_cls.log" 2>&1
rc=$?
[ "$rc" -eq 1 ] || { cat "$TMP/reg_eval_cls.log"; fail "eval of mse on classes exits 1, not $rc"; }
grep -q "the model's loss mse takes numbers, the data's labels are classes (--task regression reads them as numbers)" \
    "$TMP/reg_eval_cls.log" || { cat "$TMP/reg_eval_cls.log"; fail "eval's refusal names --task"; }
awk -F, 'NR == 1 { print; next } { printf "%s,%s,%s,%s,%d\n", $1, $2, $3, $4, ($5 > 0) }' \
    "$TMP/r.test.csv" >"$TMP/c.test.csv"
"$FEDNODE" train --data "$TMP/c.csv" --categorical colour --hash-buckets 64 --model mlp:8 \
    --epochs 1 --out "$TMP/cls.bin" >"$TMP/cls.log" 2>&1 || fail "train a classifier on c.csv"
# shellcheck disable=SC2086
"$FEDNODE" eval $RDATA --model "$TMP/cls.bin" >"$TMP/cls_eval_reg.log" 2>&1
rc=$?
[ "$rc" -eq 1 ] || { cat "$TMP/cls_eval_reg.log"; fail "eval of a classifier on numbers exits 1, not $rc"; }
grep -q "the loss cross_entropy takes 2 classes or more, the data has 1 (a number to predict: a model file whose loss is mse)" \
    "$TMP/cls_eval_reg.log" || { cat "$TMP/cls_eval_reg.log"; fail "eval's refusal is train's"; }
ok "eval: the task from an mse model; mse on classes, a classifier on numbers: refused (rc 1), saying why"
