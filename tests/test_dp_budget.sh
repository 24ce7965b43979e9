#!/bin/sh
# test_dp_budget.sh - DP-SGD in a client's rounds, with real fednode
# processes on 127.0.0.1 (logreg on tenths of Fashion-MNIST: 6000 samples a
# site, batch 100, noise multiplier 1, delta 1e-5: 60 steps at q = 1/60 a
# round, epsilon 1.4852, 1.6860, 1.8597, 2.0194 after rounds 1..4).
#  A. A budget stops a site: c2's --dp-budget-epsilon 1.9 allows three
#     releases. It is killed (-9) right after its first release (its charge
#     logged, its delta sent) and restarted on its database: it starts from
#     the epsilon it had spent, not from 0; whatever round it trains again
#     is charged again. After its third release it declines the next round
#     (FED_ERR_DP_BUDGET, recorded by the aggregator as a contribution with
#     its reason and signature; the aggregator names it, its epsilon and
#     budget at warning level) and is left out of every later round; the
#     other two carry on through round 6, and each site's epsilon is what
#     `fednode privacy` gives for its steps.
#  C. The same budget with --min-clients 3: once c2 declines, two clients
#     can still take part, fewer than 3: the aggregator stops the run with
#     an error naming why (exit status nonzero), instead of retrying.
#  D. The same budget in secure rounds (--secagg, 5 clients, --min-clients
#     4): c3 declines round 4, is named, and is never sampled again, so
#     rounds 5 and 6 run one secure try each with the other four (the
#     aggregator retried secure tries with it for ever before).
#  E. Left out until it restarts: c2 declines round 4 and is parked; its
#     retries (HELLO and NEXT of the same run) do not bring it back; run
#     again with --dp-budget-epsilon 2.1 (a later epoch) it is sampled in
#     round 5 and releases a fourth round.
#  B. --require-dp-sgd: a client without --dp-sgd declines every round
#     (FED_ERR_DP_REQUIRED, recorded); one with --dp-sgd and a larger noise
#     multiplier than required trains at its own; the refusals of flags that
#     do not fit the role.
# Needs ./fednode (make) and Fashion-MNIST; exits 77 (skipped) without them.
# KEEP=1 keeps the temporary directory (logs, databases) for a look.
. "$(dirname "$0")/proc_lib.sh"

K=$TMP/keys
allow_keys "$K" agg c0 c1 c2
C2=$(keyhex "$K/c2")
C1=$(keyhex "$K/c1")
COMMON="--data fashion-mnist --threads 1"
SETTINGS="--model logreg --optimizer sgd --lr 0.1 --batch 100 --local-epochs 1"
DP="--dp-sgd --dp-sgd-clip 1 --dp-sgd-noise 1 --dp-delta 1e-5"
# client NAME DIR PORT SHARD ARGS...
client() {
    name=$1 dir=$2 port=$3 shard=$4; shift 4
    # shellcheck disable=SC2086
    start "$name" --role client --keys "$K/${name#?}" --allow "$K/allow.txt" \
        --db "$TMP/$dir/${name#?}.db" --aggregator "tcp://127.0.0.1:$port" --aggregator-key agg \
        --partition iid --shard "$shard" $COMMON "$@"
}
# aggregator NAME DIR ARGS...: an aggregator with its database in $TMP/DIR
# on a free port, which it writes; the port in $PORT
aggregator() {
    name=$1 dir=$2; shift 2
    mkdir -p "$TMP/$dir"
    # shellcheck disable=SC2086
    start "$name" --role aggregator --keys "$K/agg" --allow "$K/allow.txt" --db "$TMP/$dir/agg.db" \
        --listen tcp://127.0.0.1:0 --port-file "$TMP/$dir/port" $COMMON $SETTINGS "$@"
    wait_for "aggregator $name wrote its port" 20 test -s "$TMP/$dir/port"
    PORT=$(cat "$TMP/$dir/port")
}
# eps STEPS: what fednode privacy gives for STEPS steps at q = 1/60, noise 1
eps() {
    "$FEDNODE" privacy --q 0.016666666666666666 --sigma 1 --steps "$1" --delta 1e-5 |
        awk '$1 == "epsilon" { printf "%.4f\n", $2 }'
}
# charges NAME: the releases NAME logged (its round's charge lines)
charges() { grep -c "DP-SGD steps at q" "$TMP/$1.log"; }
# spent DB: the site's epsilon as status shows it (4 decimals)
spent() {
    status "$1" | sed -n 's/.*"privacy":{"releases":[0-9]*,"epsilon":\([^,]*\),.*/\1/p' |
        awk '{ printf "%.4f\n", $1 }'
}
releases() { status "$1" | sed -n 's/.*"privacy":{"releases":\([0-9]*\),.*/\1/p'; }

# ---- refusals of flags that do not fit the role (before anything is opened)
refused "--dp-budget-epsilon without --dp-sgd is refused" "needs --dp-sgd" \
    --role client --aggregator tcp://127.0.0.1:1 --db "$TMP/x.db" --dp-budget-epsilon 1
refused "--dp-sgd on an aggregator is refused" "is a client's setting" \
    --role aggregator --db "$TMP/x.db" --dp-sgd
refused "--require-dp-sgd on a client is refused" "is an aggregator's setting" \
    --role client --aggregator tcp://127.0.0.1:1 --db "$TMP/x.db" --require-dp-sgd
refused "--dp-sgd on a peer is refused" "not implemented for peers" \
    --role peer --db "$TMP/x.db" --dp-sgd
[ ! -e "$TMP/x.db" ] || fail "the refusals created no database"

# ---- A: a budget stops a site; a kill -9 does not reset its spent epsilon
aggregator aggA a --rounds 6 --min-clients 2 --deadline-ms 4000 --gather-ms 300 \
    --http 127.0.0.1:0
PA=$PORT
# shellcheck disable=SC2086
client Ac0 a "$PA" 0/10 $DP
# shellcheck disable=SC2086
client Ac1 a "$PA" 1/10 $DP
# shellcheck disable=SC2086
client Ac2 a "$PA" 2/10 $DP --dp-budget-epsilon 1.9
# right after c2's first release: its charge is committed before the
# delta goes, so poll tightly and kill at once
n=0
until grep -q "DP-SGD steps at q" "$TMP/Ac2.log" 2>/dev/null; do
    n=$((n + 1)); [ $n -lt 200000 ] || fail "A: c2 released a round"
done
kill -9 "$(pid Ac2)"
wait "$(pid Ac2)" 2>/dev/null
before=$(charges Ac2)
last=$(sed -n 's/.*DP-SGD steps at q .*: epsilon \([0-9.]*\) spent.*/\1/p' "$TMP/Ac2.log" | tail -n 1)
[ "$last" = "$(eps $((60 * before)))" ] || fail "A: c2's epsilon $last after $before releases"
ok "A: c2 killed (-9) right after release $before (epsilon $last)"
mv "$TMP/Ac2.log" "$TMP/Ac2-first.log"
# shellcheck disable=SC2086
client Ac2 a "$PA" 2/10 $DP --dp-budget-epsilon 1.9
wait_for "A: c2 restarted and read its accountant" 20 logged Ac2 "releases so far"
logged Ac2 "epsilon $last spent in $before releases so far" ||
    fail "A: c2 resumed from epsilon $last ($before releases), not from 0"
ok "A: c2 restarted: epsilon $last in $before releases, as before the kill"
# the aggregator's /metrics (its port in its log) once c2 declined: c2's
# epsilon and budget as it reported them, and c2 left out
metric() {
    curl -sf --max-time 10 "http://127.0.0.1:$HPA/metrics" | sed -n "s/^$1 //p"
}
parked_c2() { [ "$(metric 'fednode_client_parked{client="c2"}')" = 1 ]; }
if command -v curl >/dev/null 2>&1; then
    HPA=$(sed -n 's|.*http: serving http://127\.0\.0\.1:\([0-9]*\)/.*|\1|p' "$TMP/aggA.log" | head -n 1)
    wait_for "A: /metrics says c2 is left out" 60 parked_c2
    [ "$(metric 'fednode_dp_epsilon_spent{client="c2"}' | awk '{ printf "%.4f\n", $1 }')" = "$(eps 180)" ] &&
        [ "$(metric 'fednode_dp_epsilon_budget{client="c2"}')" = 1.9 ] ||
        fail "A: /metrics shows c2's epsilon $(eps 180) and budget 1.9"
    [ "$(metric 'fednode_dp_epsilon_budget{client="c0"}')" = 0 ] &&
        [ "$(metric 'fednode_client_parked{client="c0"}')" = 0 ] ||
        fail "A: /metrics shows c0 with no budget, not left out"
    [ "$(metric fednode_secure_aggregation_enabled)" = 0 ] && [ "$(metric fednode_dp_enabled)" = 0 ] ||
        fail "A: /metrics says secure aggregation and (the aggregator's own) DP are off"
    ok "A: /metrics: c2 left out, epsilon $(eps 180) of budget 1.9; secure aggregation off"
else
    partly="A's /metrics checks (no curl)"
fi
wait_for "A: round 6 merged" 60 logged aggA "round 6 merged"
exits0 aggA 20
for c in Ac0 Ac1 Ac2; do exits0 "$c" 20; done
total=$(($(charges Ac2-first) + $(charges Ac2)))
[ "$total" -eq 3 ] || fail "A: c2 released 3 rounds in all (got $total)"
[ "$(releases "$TMP/a/c2.db")" -eq 3 ] || fail "A: c2's database holds its 3 releases"
[ "$(spent "$TMP/a/c2.db")" = "$(eps 180)" ] || fail "A: c2 spent $(eps 180)"
logged Ac2 "past the budget 1.9: declined" || fail "A: c2 declined a round over its budget"
ok "A: c2 released 3 rounds (epsilon $(spent "$TMP/a/c2.db") <= 1.9), then declined"
declined=$(rows "$TMP/a/agg.db" | grep "^\"round\":[0-9]*,\"key\":\"$C2\"" |
    grep '"reason":"declined FED_ERR_DP_BUDGET"' | sed -n 's/^"round":\([0-9]*\),.*/\1/p')
# once a run of c2 (a restart, a later epoch, may bring a new budget);
# the kill usually comes before its budget is spent, so once in all
n_declined=$(echo "$declined" | wc -w)
[ "$n_declined" -ge 1 ] && [ "$n_declined" -le 2 ] ||
    fail "A: c2 declined for its budget once a run, then was left out (rounds: $declined)"
declined=$(echo "$declined" | tail -n 1)
logged aggA "warn: aggregator: client c2 declined round $declined: its privacy budget is spent (epsilon $(eps 180) of 1.9); it takes part in no round until it restarts" ||
    fail "A: the aggregator named c2, its reason and figures at warning level"
rounds_once "$TMP/a/agg.db" 6
[ "$(contrib "$TMP/a/agg.db" "$declined" "$C2")" = "false,declined FED_ERR_DP_BUDGET" ] ||
    fail "A: round $declined: c2's refusal recorded with its reason"
[ "$declined" -le 5 ] || fail "A: c2 declined by round 5 (round $declined)"
for r in $(seq $((declined + 1)) 6); do
    [ -z "$(contrib "$TMP/a/agg.db" $r "$C2")" ] || fail "A: round $r: c2 left out, not sampled"
    [ "$(field "$TMP/a/agg.db" $r peers)" = 2 ] || fail "A: round $r merged the other 2"
done
logged aggA "round 6 starts with 2 of 2 waiting clients" &&
    logged aggA "round 6 merged 2 of 2 (0 missing)" || fail "A: round 6's log lines"
ok "A: c2 declined round $declined for its budget, named at warning level, and was left out of rounds $((declined + 1))..6; the others merged"
for c in c0 c1; do
    [ "$(releases "$TMP/a/$c.db")" -eq 6 ] || fail "A: $c released 6 rounds"
    [ "$(spent "$TMP/a/$c.db")" = "$(eps 360)" ] || fail "A: $c spent $(eps 360)"
    [ "$(field "$TMP/a/$c.db" 6 epsilon | awk '{ printf "%.4f\n", $1 }')" = "$(eps 360)" ] ||
        fail "A: $c's round 6 row holds its epsilon"
done
ok "A: c0 and c1 spent epsilon $(eps 360) in 6 rounds, in their rounds rows and status"
# the aggregator's status (and so /status.json): each client's budget as
# it last reported it, with the contribution that carried it
budget_of() {
    status "$TMP/a/agg.db" | sed -n 's/.*"client_budgets":\[\([^]]*\)\].*/\1/p' | tr '{' '\n' |
        grep "\"key\":\"$1\"" | sed -n 's/.*"epsilon":\([^,]*\),"budget":\([^}]*\)}.*/\1 \2/p' |
        awk '{ printf "%.4f %g\n", $1, $2 }'
}
[ "$(budget_of "$C2")" = "$(eps 180) 1.9" ] || fail "A: status shows c2's epsilon and budget ($(budget_of "$C2"))"
[ "$(budget_of "$C1" | cut -d' ' -f2)" = 0 ] || fail "A: status shows c1's epsilon, no budget"
"$FEDNODE" status --db "$TMP/a/agg.db" | grep -q "clients' privacy budgets" ||
    fail "A: status prints the clients' budgets"
status "$TMP/a/agg.db" | grep -q '"secure_aggregation":false,"dp":true' ||
    fail "A: status --json says the rounds used DP, not secure aggregation"
ok "A: status: c2 at epsilon $(eps 180) of its budget 1.9, c1 with no budget; DP on, secure aggregation off"
verify "$TMP/a/agg.db"
ok "A: verify passes (the refusals' signatures included)"

# ---- C: fewer than --min-clients can still take part: the run stops
aggregator aggC c --rounds 6 --min-clients 3 --deadline-ms 4000 --gather-ms 300
PC=$PORT
# shellcheck disable=SC2086
client Cc0 c "$PC" 0/10 $DP
# shellcheck disable=SC2086
client Cc1 c "$PC" 1/10 $DP
# shellcheck disable=SC2086
client Cc2 c "$PC" 2/10 $DP --dp-budget-epsilon 1.9
wait_exit aggC 60
[ "$rc" -ne 0 ] || fail "C: the aggregator's run ended with an error status"
logged aggC "warn: aggregator: client c2 declined round 4: its privacy budget is spent (epsilon $(eps 180) of 1.9)" ||
    fail "C: c2 named at warning level"
logged aggC "error: aggregator: only 2 clients can still take part (1 declined for their privacy budget), fewer than --min-clients 3: stopping the run after round 3" ||
    fail "C: the aggregator said why it stops"
logged aggC "fewer clients than --min-clients can still take part" || fail "C: the daemon's last word"
rounds_once "$TMP/c/agg.db" 3
for c in Cc0 Cc1 Cc2; do kill "$(pid $c)" 2>/dev/null; done
ok "C: c2's budget spent with --min-clients 3: the aggregator stopped after round 3 (status $rc), saying why"

# ---- D: secure rounds: the spent site is left out of the next tries
allow_keys "$K" agg c0 c1 c2 c3 p0 # the same keys, two more members
aggregator aggD d --rounds 6 --min-clients 4 --deadline-ms 4000 --poll-ms 1000 \
    --wait-clients 5 --gather-ms 2000 --secagg --secagg-stage-ms 3000
i=0
for n in c0 c1 c2 c3 p0; do
    budget=""
    [ $n = c3 ] && budget="--dp-budget-epsilon 1.9"
    # shellcheck disable=SC2086
    start "D$n" --role client --keys "$K/$n" --allow "$K/allow.txt" \
        --db "$TMP/d/$n.db" --aggregator "tcp://127.0.0.1:$PORT" --aggregator-key agg \
        --partition iid --shard "$i/10" --poll-ms 1000 --retry-ms 1000 $COMMON $DP $budget
    i=$((i + 1))
done
exits0 aggD 120
logged aggD "warn: aggregator: client c3 declined round 4: its privacy budget is spent (epsilon $(eps 180) of 1.9)" ||
    fail "D: c3 named at warning level"
for r in 5 6; do
    logged aggD "round $r starts with 4 of 4 waiting clients" &&
        logged aggD "round $r merged 4 of 4 (0 missing)" || fail "D: round $r ran with the other 4"
done
tries=$(status "$TMP/d/agg.db" | sed 's/.*"secagg":\[\([^]]*\)\].*/\1/' | grep -o '"try":' | wc -l)
[ "$tries" -eq 6 ] || fail "D: one secure try a round (got $tries tries for 6 rounds)"
status "$TMP/d/agg.db" | grep -q '"secure_aggregation":true,"dp":true' ||
    fail "D: status --json says the rounds used secure aggregation and DP"
ok "D: secure rounds: c3 declined round 4 and was left out; rounds 5, 6 took one try each with 4"

# ---- E: a restart (a later epoch) brings a parked site back
allow_keys "$K" agg c0 c1 c2
aggregator aggE e --rounds 5 --min-clients 2 --wait-clients 3 --gather-ms 60000 \
    --deadline-ms 4000
PE=$PORT
# shellcheck disable=SC2086
client Ec0 e "$PE" 0/10 $DP
# shellcheck disable=SC2086
client Ec1 e "$PE" 1/10 $DP
# shellcheck disable=SC2086
client Ec2 e "$PE" 2/10 $DP --dp-budget-epsilon 1.9
wait_for "E: c2 declined round 4" 60 logged aggE "client c2 declined round 4: its privacy budget is spent"
sleep 2 # its asks of the same run meanwhile: answered, never sampled
logged aggE "round 5 starts" && fail "E: round 5 waited for a third client (c2 parked)"
kill "$(pid Ec2)"
wait_exit Ec2 30 # a SIGTERM ends it (bounded: a hang is a failure, not a stuck test)
mv "$TMP/Ec2.log" "$TMP/Ec2-first.log"
# shellcheck disable=SC2086
client Ec2 e "$PE" 2/10 $DP --dp-budget-epsilon 2.1
exits0 aggE 60
for c in Ec0 Ec1 Ec2; do exits0 "$c" 20; done
logged aggE "warn: aggregator: client c2, left out for its privacy budget, restarted (epoch" ||
    fail "E: the aggregator took c2 back after its restart, saying so"
logged aggE "round 5 merged 3 of 3 (0 missing)" || fail "E: round 5 merged c2 with the others"
[ "$(releases "$TMP/e/c2.db")" -eq 4 ] || fail "E: c2 released a fourth round under its new budget"
ok "E: c2 parked after round 4, back in round 5 once restarted with budget 2.1"

# ---- B: --require-dp-sgd
aggregator aggB b --rounds 2 --min-clients 1 --wait-clients 2 --require-dp-sgd --dp-sgd-clip 0.5 \
    --dp-sgd-noise 1
PB=$PORT
client Bc0 b "$PB" 0/10 --dp-sgd --dp-sgd-noise 2
client Bc1 b "$PB" 1/10
wait_for "B: round 2 merged" 40 logged aggB "round 2 merged"
exits0 aggB 20
for c in Bc0 Bc1; do exits0 "$c" 20; done
for r in 1 2; do
    [ "$(contrib "$TMP/b/agg.db" $r "$C1")" = "false,declined FED_ERR_DP_REQUIRED" ] ||
        fail "B: round $r: c1's refusal recorded"
done
logged Bc1 "requires DP-SGD (clip 0.5, noise 1); this site runs without --dp-sgd: declined" ||
    fail "B: c1 said why it declined"
[ "$(charges Bc0)" -eq 2 ] && logged Bc0 "round 2: 60 DP-SGD steps at q 0.01667, noise 2:" ||
    fail "B: c0 trained both rounds with DP-SGD at its own noise 2"
[ "$(releases "$TMP/b/c1.db")" = "" ] || fail "B: c1 charged nothing"
ok "B: --require-dp-sgd: c1 (no --dp-sgd) declined both rounds, recorded; c0 trained at noise 2"
# a check left out for a missing tool makes the whole test a skip, not a pass
if [ -n "${partly:-}" ]; then echo "skipped: $partly, the rest passed"; exit 77; fi
echo "all checks passed"
