#!/bin/sh
# test_peers.sh - peer mode end to end: six fednode peer processes on
# 127.0.0.1, no aggregator, disjoint IID sixths of Fashion-MNIST,
# mlp:256,128, SGD momentum 0.9, lr 0.05, random:2 neighbours, bsp.
#  A. 6 training rounds, then the 3 mixing-only rounds that end every run
#     (--final-mix 3): every peer's test accuracy is >= 0.84; every peer
#     recorded rounds 1..9 once, with the neighbours it mixed with.
#  B. 8 training rounds (no final mixing), a 3 s deadline: two peers killed (-9) once round 3 is
#     committed; the other four go on without them (no longer waiting for
#     them after two silent rounds) and finish; one of the two restarted on
#     its database resumes from its checkpoint (skipping ahead to its
#     neighbours' round when it is behind), its shares are mixed by the others
#     again, and it finishes too.
# Needs ./fednode and Fashion-MNIST; exits 77 (skipped) without them.
. "$(dirname "$0")/proc_lib.sh"

# Fixed test identities (proc_lib.sh's test_key): the same run each time.
K=$TMP/keys
mkdir -p "$K" "$TMP/a" "$TMP/b"
: >"$K/allow.txt"
for i in 0 1 2 3 4 5; do
    test_key "p$i" "$K"
    echo "p$i $("$FEDNODE" pubkey "$K/p$i")" >>"$K/allow.txt"
done
ok "keys for p0..p5 (tests/keys)"

SETTINGS="--data fashion-mnist --threads 1 --model mlp:256,128 --optimizer sgd --momentum 0.9 \
--lr 0.05 --batch 64 --local-epochs 1 --topology random:2 --sync bsp"
# peer NAME DIR I ARGS...: member pI with its database in DIR
peer() {
    name=$1 dir=$2 i=$3; shift 3
    # shellcheck disable=SC2086
    start "$name" --role peer --keys "$K/p$i" --allow "$K/allow.txt" --peers "$TMP/$dir/peers.txt" \
        --listen "tcp://127.0.0.1:$((BASE + i))" --db "$TMP/$dir/p$i.db" --partition iid \
        --shard "$i/6" $SETTINGS "$@"
}
peers_file() {
    : >"$TMP/$1/peers.txt"
    for i in 0 1 2 3 4 5; do echo "p$i tcp://127.0.0.1:$((BASE + i))" >>"$TMP/$1/peers.txt"; done
}
has_round() { [ "$(nround "$1" "$2")" -ge 1 ]; }
# six PHASE DIR ARGS...: the six peers PHASE0..PHASE5, in DIR, on BASE+0..5.
# Each peer's file must name the others' ports before any starts, so these
# cannot be port 0; each peer writes the port it bound (--port-file) once it
# listens, and when one could not bind (another process took the port),
# the six start again on other ports. BASE stays below the ephemeral range.
six() {
    ph=$1 dir=$2; shift 2
    for try in 1 2 3 4 5; do
        BASE=$((20000 + ($$ * 7 + try * 1009) % 10000))
        peers_file "$dir"
        for i in 0 1 2 3 4 5; do
            rm -f "$TMP/$dir/port$i"
            peer "$ph$i" "$dir" "$i" --port-file "$TMP/$dir/port$i" "$@"
        done
        n=300 up=0 dead=""
        while [ "$n" -gt 0 ] && [ "$up" -lt 6 ] && [ -z "$dead" ]; do
            sleep 0.1; n=$((n - 1)) up=0
            for i in 0 1 2 3 4 5; do
                [ -s "$TMP/$dir/port$i" ] && up=$((up + 1))
                alive "$ph$i" || dead="$ph$i"
            done
        done
        if [ "$up" -eq 6 ]; then
            for i in 0 1 2 3 4 5; do
                [ "$(cat "$TMP/$dir/port$i")" -eq $((BASE + i)) ] || fail "$ph$i listens on port $((BASE + i))"
            done
            return 0
        fi
        [ -n "$dead" ] && logged "$dead" "cannot listen" || fail "$ph: the six peers listen within 30 s"
        echo "$ph: $dead could not listen on its port (try $try); the six start again elsewhere"
        for i in 0 1 2 3 4 5; do kill -9 "$(pid "$ph$i")" 2>/dev/null; wait "$(pid "$ph$i")" 2>/dev/null; done
        rm -f "$TMP/$dir"/p*.db*
    done
    fail "$ph: the six peers found free ports in 5 tries"
}

# ---- A: six peers, six rounds
six A a --rounds 6 --final-mix 3 --deadline-ms 30000
for i in 0 1 2 3 4 5; do exits0 "A$i" 60; done
ok "A: the six peers finished 6 training and 3 mixing rounds and exited 0"
accs=""
for i in 0 1 2 3 4 5; do
    db=$TMP/a/p$i.db
    rounds_once "$db" 9
    [ "$(field "$db" 7 samples)" -eq 0 ] || fail "A: p$i trained in round 7 (a mixing round)"
    acc=$(field "$db" 9 accuracy)
    accs="$accs $(printf "%.4f" "$acc")"
    awk -v a="$acc" 'BEGIN { exit !(a >= 0.84) }' || fail "A: p$i accuracy at the end is $acc, wanted >= 0.84"
    [ "$(contrib "$db" '[0-9]*' '[0-9a-f]*' | grep -c '^true')" -ge 9 ] ||
        fail "A: p$i recorded the neighbours it mixed with"
done
echo "A: test accuracy after 6 training rounds (and 3 mixing):$accs"
ok "A: every peer >= 0.84, rounds 1..9 once each, neighbours recorded"

# ---- B: two killed at round 3, the others finish, one restarted rejoins
six B b --rounds 8 --final-mix 0 --deadline-ms 3000
wait_for "B: p4 and p5 committed round 3" 60 sh -c \
    "$FEDNODE status --db $TMP/b/p4.db --json | grep -q '\"round\":3,' &&
     $FEDNODE status --db $TMP/b/p5.db --json | grep -q '\"round\":3,'"
kill -9 "$(pid B4)" "$(pid B5)"
wait_exit B4 5
wait_exit B5 5
ok "B: p4 and p5 killed (-9) after committing round 3"
wait_for "B: p0 reached round 5 without them" 90 has_round "$TMP/b/p0.db" 5
peer B5r b 5 --rounds 8 --final-mix 0 --deadline-ms 3000 --port-file "$TMP/b/port5r"
wait_for "B: the restarted p5 listens on its port again" 20 test -s "$TMP/b/port5r"
for i in 0 1 2 3; do exits0 "B$i" 90; done
ok "B: p0..p3 finished 8 rounds without p4 and with p5 away, then back"
exits0 B5r 90
logged B5r "resumed from the checkpoint of round" || fail "B: the restarted p5 resumed from its checkpoint"
for r in 1 2 3; do [ "$(nround "$TMP/b/p5.db" "$r")" -eq 1 ] || fail "B: p5 kept round $r once"; done
has_round "$TMP/b/p5.db" 8 || fail "B: the restarted p5 finished round 8"
for i in 0 1 2 3; do rounds_once "$TMP/b/p$i.db" 8; done
k5=$(keyhex "$K/p5")
back=0
for i in 0 1 2 3; do
    [ -n "$(contrib "$TMP/b/p$i.db" '[6-8]' "$k5" | grep '^true')" ] && back=$((back + 1))
done
[ "$back" -ge 1 ] || fail "B: the others mixed the restarted p5's shares again (rounds 6..8)"
echo "B: $back of p0..p3 mixed p5's shares after its restart$(logged B5r 'skipping ahead' && echo '; it skipped ahead')"
logged B0 "not waited for" || logged B1 "not waited for" || logged B2 "not waited for" ||
    logged B3 "not waited for" || fail "B: the others stopped waiting for the silent peers"
ok "B: p5 resumed from its checkpoint, rejoined and finished round 8"
for i in 0 1 2 3 5; do verify "$TMP/b/p$i.db"; done
ok "B: verify passes on the five databases"
echo "all checks passed in $(($(date +%s) - T0)) s"
