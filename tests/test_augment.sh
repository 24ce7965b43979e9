#!/bin/sh
# test_augment.sh - --augment at a federated site (fedsim's clients and
# peers, the code fednode run uses): the same seed gives the same final
# model, augmentation gives another than none, and a bad spec or float
# features (CSV) are refused naming the flag.
# Needs ./fednode, ./fedsim and Fashion-MNIST; exits 77 (skipped) without.
. "$(dirname "$0")/proc_lib.sh"
FEDSIM=${FEDSIM:-./fedsim}
[ -x "$FEDSIM" ] || { echo "skipped: no $FEDSIM (run make)"; exit 77; }
SIM="--data fashion-mnist --model logreg --nodes 4 --rounds 2"

# hash ROLE AUGMENT: the run's final model sha256
hash() {
    # shellcheck disable=SC2086
    "$FEDSIM" $SIM --role "$1" --augment "$2" >"$TMP/$1-$3.log" 2>&1 ||
        fail "fedsim --role $1 --augment $2 failed"
    awk '/final model sha256/ { print $4 }' "$TMP/$1-$3.log"
}

for role in aggregator peer; do
    none=$(hash $role none n)
    a1=$(hash $role crop:2,flip a1)
    a2=$(hash $role crop:2,flip a2)
    [ -n "$none" ] && [ -n "$a1" ] || fail "$role: no final model hash"
    [ "$a1" = "$a2" ] || fail "$role: --augment crop:2,flip repeats differently ($a1, $a2)"
    [ "$a1" != "$none" ] || fail "$role: --augment crop:2,flip trained as none did"
    ok "$role: augmented training repeats for a seed and differs from none"
done

# shellcheck disable=SC2086
if "$FEDSIM" $SIM --augment crop:99 >"$TMP/bad.log" 2>&1; then fail "crop:99 accepted"; fi
grep -q -- "--augment: 'crop:99': crop:P wants P from 1 to 64" "$TMP/bad.log" ||
    fail "crop:99 refused without saying why"
ok "a bad --augment is refused naming it"

printf 'a,b,label\n1,2,0\n3,4,1\n5,6,0\n7,8,1\n' >"$TMP/t.csv"
if "$FEDSIM" --data "$TMP/t.csv" --model logreg --nodes 2 --rounds 1 --augment flip \
    >"$TMP/csv.log" 2>&1; then
    fail "--augment on CSV features accepted"
fi
grep -q -- "--augment: 'flip' is for images (IDX or an image folder), not CSV features" \
    "$TMP/csv.log" || fail "--augment on CSV refused without saying why"
ok "--augment on CSV features is refused at start"
