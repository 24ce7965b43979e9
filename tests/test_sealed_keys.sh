#!/bin/sh
# test_sealed_keys.sh - the key setup docs/keys.md recommends for real sites: every
# key sealed with a passphrase. An aggregator whose key is unsealed by a
# passphrase file and two clients whose keys are unsealed by
# FEDNODE_PASSPHRASE run two rounds of logreg over real processes; a wrong
# passphrase (by file and by environment) is one line on stderr and exit 1;
# none given says so (not "wrong"); a truncated key file says its length and
# the length needed; a client given the aggregator's own key is refused
# naming it; an unsealed key with FEDNODE_PASSPHRASE set still loads. Each of these
# aborted in libsodium before it was started (exit 134, nothing said).
# Needs ./fednode (make) and Fashion-MNIST; exits 77 (skipped) without them.
. "$(dirname "$0")/proc_lib.sh"

K=$TMP/keys
mkdir -p "$K"
printf 'correct horse battery staple\n' >"$TMP/agg.pass"
printf 'wrong horse\n' >"$TMP/bad.pass"
"$FEDNODE" keygen --out "$K/agg" --passphrase-file "$TMP/agg.pass" >"$TMP/keygen.out" 2>&1 ||
    { cat "$TMP/keygen.out"; fail "keygen agg sealed by file"; }
for c in c0 c1; do
    FEDNODE_PASSPHRASE="client $c secret" "$FEDNODE" keygen --out "$K/$c" >"$TMP/keygen.out" 2>&1 ||
        { cat "$TMP/keygen.out"; fail "keygen $c sealed by environment"; }
done
grep -q "sealed with the passphrase" "$TMP/keygen.out" || fail "keygen says the key is sealed"
: >"$K/allow.txt"
for n in agg c0 c1; do echo "$n $("$FEDNODE" pubkey "$K/$n")" >>"$K/allow.txt"; done
ok "keys: agg sealed by --passphrase-file, c0 and c1 by FEDNODE_PASSPHRASE"

# refused NAME PASSENV ARGS...: `fednode run ARGS` exits 1 with one line on
# stderr that names the passphrase, before any socket or database
refused() {
    name=$1 env=$2; shift 2
    FEDNODE_PASSPHRASE=$env "$FEDNODE" run "$@" --db "$TMP/$name.db" >"$TMP/$name.out" 2>&1
    rc=$?
    [ $rc -eq 1 ] || { cat "$TMP/$name.out"; fail "$name: exit 1 (got $rc)"; }
    grep -q "wrong passphrase" "$TMP/$name.out" || { cat "$TMP/$name.out"; fail "$name: says wrong passphrase"; }
    [ "$(grep -vc 'wrong passphrase' "$TMP/$name.out")" -le 1 ] ||
        { cat "$TMP/$name.out"; fail "$name: a short error, not a trace"; }
    [ ! -e "$TMP/$name.db" ] || fail "$name: no database made"
}
refused badfile "" --role aggregator --keys "$K/agg" --passphrase-file "$TMP/bad.pass" \
    --allow "$K/allow.txt" --listen tcp://127.0.0.1:0
refused badenv "not it" --role client --keys "$K/c0" --allow "$K/allow.txt" \
    --aggregator tcp://127.0.0.1:1 --aggregator-key agg
ok "a wrong passphrase, by file and by environment: exit 1, one error, no database"

FEDNODE_PASSPHRASE= "$FEDNODE" run --role client --keys "$K/c0" --allow "$K/allow.txt" \
    --aggregator tcp://127.0.0.1:1 --aggregator-key agg --db "$TMP/nopass.db" >"$TMP/nopass.out" 2>&1
rc=$?
[ $rc -eq 1 ] || { cat "$TMP/nopass.out"; fail "no passphrase: exit 1 (got $rc)"; }
grep -q "c0/node.key: sealed, and no passphrase was given" "$TMP/nopass.out" ||
    { cat "$TMP/nopass.out"; fail "no passphrase: says none was given"; }
! grep -q "wrong passphrase" "$TMP/nopass.out" || { cat "$TMP/nopass.out"; fail "no passphrase: called wrong"; }
[ ! -e "$TMP/nopass.db" ] || fail "no passphrase: no database made"
ok "a sealed key and no passphrase: says none was given, not a wrong one"

mkdir -p "$TMP/cut" && head -c 100 "$K/c0/node.key" >"$TMP/cut/node.key" && chmod 600 "$TMP/cut/node.key"
FEDNODE_PASSPHRASE="client c0 secret" "$FEDNODE" run --role client --keys "$TMP/cut" \
    --allow "$K/allow.txt" --aggregator tcp://127.0.0.1:1 --aggregator-key agg \
    --db "$TMP/cut.db" >"$TMP/cut.out" 2>&1 && fail "a truncated key file loaded"
grep -q "cut/node.key: truncated key file: 100 bytes where 144 are needed" "$TMP/cut.out" ||
    { cat "$TMP/cut.out"; fail "a truncated key file: says its length"; }
ok "a truncated key file: its length and the length needed"

allow_keys "$TMP/own" agg c0
"$FEDNODE" run --role client --keys "$TMP/own/agg" --allow "$TMP/own/allow.txt" \
    --aggregator tcp://127.0.0.1:1 --aggregator-key agg --db "$TMP/own.db" >"$TMP/own.out" 2>&1
rc=$?
[ $rc -eq 2 ] || { cat "$TMP/own.out"; fail "a client with the aggregator's key: exit 2 (got $rc)"; }
grep -q "run: --keys $TMP/own/agg holds the aggregator's key (--aggregator-key agg)" "$TMP/own.out" ||
    { cat "$TMP/own.out"; fail "a client with the aggregator's key: says so"; }
[ ! -e "$TMP/own.db" ] || fail "a client with the aggregator's key: no database made"
ok "a client given the aggregator's own key is refused naming it, before its database"

SETTINGS="--model logreg --rounds 2 --batch 64 --local-epochs 1 --threads 1 --gather-ms 200"
# shellcheck disable=SC2086
start agg --role aggregator --keys "$K/agg" --passphrase-file "$TMP/agg.pass" \
    --allow "$K/allow.txt" --db "$TMP/agg.db" --listen tcp://127.0.0.1:0 \
    --port-file "$TMP/port" --min-clients 2 --data fashion-mnist $SETTINGS
wait_for "aggregator writes its port" 30 test -s "$TMP/port"
port=$(cat "$TMP/port")
for i in 0 1; do
    FEDNODE_PASSPHRASE="client c$i secret" start "c$i" --role client --keys "$K/c$i" \
        --allow "$K/allow.txt" --db "$TMP/c$i.db" --aggregator "tcp://127.0.0.1:$port" \
        --aggregator-key agg --partition iid --shard "$i/2" --threads 1
done
exits0 agg 120
exits0 c0 30
exits0 c1 30
rounds_once "$TMP/agg.db" 2
acc=$(field "$TMP/agg.db" 2 accuracy)
awk -v a="$acc" 'BEGIN { exit !(a + 0 >= 0.75) }' || fail "round 2 accuracy $acc >= 0.75"
verify "$TMP/agg.db"
ok "sealed keys: aggregator and 2 clients ran 2 rounds (accuracy $acc), verify passes"

# an unsealed key loads whatever FEDNODE_PASSPHRASE says: the aggregator
# listens (its port file), and stops on SIGTERM with exit 0
test_key agg "$TMP/plain"
FEDNODE_PASSPHRASE="ignored" start plain --role aggregator --keys "$TMP/plain/agg" \
    --allow "$K/allow.txt" --db "$TMP/plain.db" --listen tcp://127.0.0.1:0 \
    --port-file "$TMP/plain.port" --data fashion-mnist
wait_for "unsealed key, FEDNODE_PASSPHRASE set: the aggregator listens" 30 test -s "$TMP/plain.port"
kill -TERM "$(pid plain)"
exits0 plain 30
ok "an unsealed key with FEDNODE_PASSPHRASE set loads; SIGTERM, exit 0"
echo "all checks passed in $(($(date +%s) - T0)) s"
