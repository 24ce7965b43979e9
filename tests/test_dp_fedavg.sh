#!/bin/sh
# test_dp_fedavg.sh - DP-FedAvg (client-level DP) on the aggregator.
#  A. fedsim, 20 clients on logreg, q = 0.5, z = 1, clip 1, 5 rounds: each
#     row's epsilon (stdout and CSV) is what `fednode privacy` gives for q,
#     z and that many rounds; the run says its noise is not private; the
#     same seed repeats the same model.
#  B. --dp-target-epsilon 4 over 5 rounds: the calibrated z spends at most 4,
#     and within 1e-3 of it.
#  C. Adaptive clipping (Andrew et al. 2021, quantile 0.5; 40 clients, so
#     the count's noise, cohort / 20 = 1, exceeds z / 2): a clip far below
#     every update's norm grows every round, one far above shrinks; with 20
#     clients (count noise 0.5 = z / 2) the aggregator refuses to start.
#     A model with batch norm runs with its norm tensors and running
#     statistics kept at the sites (statistics of the data, without noise:
#     --local-bn implied, and said).
#  D. A Poisson draw below --min-clients is not redrawn: the round runs and
#     says so.
#  E. fedsim --svg-x epsilon draws accuracy against epsilon.
#  G. With --secagg (each client clips its own delta, the aggregator noises
#     the unmasked sum): q 0.5 of 20 refused (a draw below a secure round's 3
#     clients too likely); at q 0.7 the plain run's merged counts and
#     epsilon, accuracy within 0.5 point; adaptive clipping, and bits too few
#     for the clip, refused.
#  F. Real processes: an aggregator with DP-FedAvg (q = 1, z = 1.5) and three
#     clients, 2 rounds, then the aggregator restarted for round 3 on its
#     database: it resumes at the epsilon of 2 rounds and ends at that of 3,
#     each row's epsilon in `status`, which says the aggregator is trusted
#     for client-level DP; the refusals of settings that do not fit. Then a
#     fresh aggregator with --secagg too: one round of the three, its
#     epsilon, and status saying the noise is added after unmasking.
# Needs ./fednode, ./fedsim and Fashion-MNIST; exits 77 (skipped) without.
. "$(dirname "$0")/proc_lib.sh"
FEDSIM=${FEDSIM:-./fedsim}
[ -x "$FEDSIM" ] || { echo "skipped: no $FEDSIM (run make)"; exit 77; }
SIM0="--data fashion-mnist --model logreg --rounds 5 --fraction 0.5" # a flag given twice is an error
SIM="$SIM0 --nodes 20"

# eps Q Z STEPS: fednode privacy's epsilon, 4 decimals
eps() {
    "$FEDNODE" privacy --q "$1" --sigma "$2" --steps "$3" --delta 1e-5 |
        awk '$1 == "epsilon" { printf "%.4f\n", $2 }'
}

# ---- A
# shellcheck disable=SC2086
"$FEDSIM" $SIM --dp-client-clip 1 --dp-client-noise 1 --csv "$TMP/a.csv" >"$TMP/a.out" 2>&1 ||
    fail "fedsim DP-FedAvg exited $?"
grep -q "DP-FedAvg's noise and draw come from the aggregator's seeded stream.*not private" \
    "$TMP/a.out" || fail "fedsim says its DP-FedAvg run is not private"
head -n 1 "$TMP/a.csv" | grep -qx "round,t_s,accuracy,spread,bytes,merged,lr,epsilon" ||
    fail "the CSV's header has epsilon"
for r in 1 2 3 4 5; do
    want=$(eps 0.5 1 "$r")
    got=$(awk -F, -v r="$r" '$1 == r { printf "%.4f\n", $8 }' "$TMP/a.csv")
    [ "$got" = "$want" ] || fail "round $r: CSV epsilon $got, fednode privacy $want"
    grep -q "^round *$r .* epsilon $want " "$TMP/a.out" || fail "round $r's row shows epsilon $want"
done
ok "DP-FedAvg's epsilon after each of 5 rounds = fednode privacy's (q 0.5, z 1): $want at 5"
lr=$(awk -F, '$1 == 1 { print $7 }' "$TMP/a.csv")
grep -q "^round *1 .* lr $lr  epsilon " "$TMP/a.out" || fail "round 1's row shows lr $lr, then epsilon"
# shellcheck disable=SC2086
"$FEDSIM" --data fashion-mnist --model logreg --nodes 4 --rounds 1 --lr 100 >"$TMP/plain.out" 2>&1 ||
    fail "a plain fedsim run exited $?"
grep -q "^round *1 .* lr 100  (wall " "$TMP/plain.out" ||
    fail "a run without DP shows its lr alone (it printed a 0 after it: lr 1000)"
ok "the rows show the round's lr ($lr; 100 without DP, nothing after it)"
# shellcheck disable=SC2086
"$FEDSIM" $SIM --dp-client-clip 1 --dp-client-noise 1 >"$TMP/a2.out" 2>&1 || fail "rerun"
[ "$(grep sha256 "$TMP/a.out")" = "$(grep sha256 "$TMP/a2.out")" ] ||
    fail "the same seed repeats the same model"
ok "the same seed gives the same model (a seeded, not private, run)"

# ---- B
# shellcheck disable=SC2086
FEDNODE_LOG=info "$FEDSIM" $SIM --dp-client-clip 1 --dp-target-epsilon 4 --csv "$TMP/b.csv" \
    >"$TMP/b.out" 2>&1 || fail "fedsim --dp-target-epsilon exited $?"
z=$(sed -n 's/.*aggregator: z \([0-9.e+-]*\) spends epsilon.*/\1/p' "$TMP/b.out")
got=$(awk -F, '$1 == 5 { print $8 }' "$TMP/b.csv")
awk -v e="$got" 'BEGIN { exit !(e <= 4 && e > 3.999) }' ||
    fail "--dp-target-epsilon 4: 5 rounds spent $got (z $z)"
ok "--dp-target-epsilon 4: z $z, 5 rounds spend $got"

# ---- C
clips() { sed -n 's/.*within clip \([0-9.e+-]*\) (next \([0-9.e+-]*\)).*/\1 \2/p' "$1"; }
for c in 0.001 1000; do
    # shellcheck disable=SC2086
    FEDNODE_LOG=info "$FEDSIM" $SIM0 --nodes 40 --dp-client-clip $c --dp-client-quantile 0.5 \
        >"$TMP/c$c.out" 2>&1 || fail "fedsim adaptive clip $c exited $?"
    [ "$(clips "$TMP/c$c.out" | wc -l)" -eq 5 ] || fail "five rounds' clips for $c"
done
clips "$TMP/c0.001.out" | awk '{ if (!($2 > $1)) exit 1 }' ||
    fail "a clip below every norm grows: $(clips "$TMP/c0.001.out" | tr '\n' ' ')"
clips "$TMP/c1000.out" | awk '{ if (!($2 < $1)) exit 1 }' ||
    fail "a clip above every norm shrinks: $(clips "$TMP/c1000.out" | tr '\n' ' ')"
ok "adaptive clipping: 0.001 grows to $(clips "$TMP/c0.001.out" | tail -n 1 | cut -d' ' -f2), 1000 shrinks to $(clips "$TMP/c1000.out" | tail -n 1 | cut -d' ' -f2)"

# shellcheck disable=SC2086
FEDNODE_LOG=info "$FEDSIM" $SIM --dp-client-clip 1 --dp-client-quantile 0.5 >"$TMP/c.out" 2>&1 &&
    fail "adaptive clipping with count noise 0.5 = z / 2 ran"
grep -q "must exceed z / 2" "$TMP/c.out" || fail "the refusal says the count noise must exceed z / 2"
ok "adaptive clipping refused where the count's noise cannot carry its share"

# batch norm's tensors and running statistics come from the data without
# noise: they stay at the sites (--local-bn implied), and the run says so
FEDNODE_LOG=info "$FEDSIM" --data fashion-mnist --model g:L16,bn=N,R,L --rounds 2 --fraction 0.5 \
    --nodes 20 --dp-client-clip 1 --dp-client-noise 1 >"$TMP/bn.out" 2>&1 ||
    fail "DP-FedAvg of a batch-norm model: $(tail -n 2 "$TMP/bn.out")"
grep -q "batch-norm tensors and non-trained statistics (64 floats) stay at the sites (--local-bn implied)" \
    "$TMP/bn.out" || fail "the run says batch norm stays at the sites: $(tail -n 2 "$TMP/bn.out")"
grep -q "^round    2 .*epsilon" "$TMP/bn.out" || fail "the batch-norm run's rounds: $(tail -n 2 "$TMP/bn.out")"
ok "DP-FedAvg of a model with batch norm keeps its statistics at the sites (--local-bn implied)"

# ---- D
# shellcheck disable=SC2086
FEDNODE_LOG=info "$FEDSIM" --data fashion-mnist --model logreg --nodes 20 --rounds 3 \
    --fraction 0.1 --min-clients 3 --dp-client-clip 1 >"$TMP/d.out" 2>&1 ||
    fail "fedsim small draws exited $?"
grep -q "the Poisson draw took [0-2] clients, fewer than --min-clients 3; not redrawn.*the round runs" \
    "$TMP/d.out" || fail "a draw below --min-clients is run, not redrawn, and said so"
[ "$(grep -c '^round ' "$TMP/d.out")" -eq 3 ] || fail "three rounds ran"
ok "a draw below --min-clients runs, not redrawn: $(grep -c 'not redrawn' "$TMP/d.out") of 3 rounds"

# ---- E
# shellcheck disable=SC2086
"$FEDSIM" $SIM --svg "$TMP/e.svg" --svg-x epsilon --compare "DP z 1=$TMP/a.csv" \
    --csv "$TMP/e.csv" >"$TMP/e.out" 2>&1 || fail "fedsim --svg exited $?"
grep -q "epsilon (client-level)" "$TMP/e.svg" || fail "--svg-x epsilon labels its axis"
grep -q "stroke-dasharray" "$TMP/e.svg" || fail "the run without DP is a dashed line"
awk -F, 'NR > 1 && $8 != 0 { exit 1 }' "$TMP/e.csv" || fail "a run without DP has epsilon 0"
ok "--svg-x epsilon: accuracy against epsilon, the run without DP dashed"

# ---- G
# q 0.5 of 20 draws fewer than a secure round's 3 clients with probability
# 2.0e-4 > delta / 10: refused, naming the rate that would do; q 0.7: 3.8e-8
# shellcheck disable=SC2086
"$FEDSIM" $SIM --dp-client-clip 1 --dp-client-noise 1 --secagg >"$TMP/g0.out" 2>&1 &&
    fail "DP-FedAvg with --secagg at q 0.5 of 20 ran"
grep -q "fewer than the 3 a secure round needs with probability 0.000201.*raise --fraction to 0.63" \
    "$TMP/g0.out" || fail "the refusal of a small draw says why: $(tail -n 2 "$TMP/g0.out")"
ok "DP-FedAvg with --secagg at q 0.5 of 20 refused (a draw below 3: 2.0e-4 > delta / 10)"
SIM="--data fashion-mnist --model logreg --nodes 20 --rounds 5 --fraction 0.7"
# shellcheck disable=SC2086
"$FEDSIM" $SIM --dp-client-clip 1 --dp-client-noise 1 --csv "$TMP/a7.csv" >"$TMP/a7.out" 2>&1 ||
    fail "fedsim DP-FedAvg at q 0.7 exited $?"
# shellcheck disable=SC2086
FEDNODE_LOG=info "$FEDSIM" $SIM --dp-client-clip 1 --dp-client-noise 1 --secagg \
    --csv "$TMP/g.csv" >"$TMP/g.out" 2>&1 || fail "fedsim DP-FedAvg with --secagg exited $?"
grep -q "a draw too small for a secure round .* has probability 3.77e-08 a round" "$TMP/g.out" ||
    fail "the secure run states its small-draw probability: $(grep -i 'too small' "$TMP/g.out")"
want=$(eps 0.7 1 5)
cut -d, -f1,6,8 "$TMP/a7.csv" >"$TMP/a.cut"
cut -d, -f1,6,8 "$TMP/g.csv" >"$TMP/g.cut"
cmp -s "$TMP/a.cut" "$TMP/g.cut" ||
    fail "with --secagg each round merges as many and spends as much: $(tr '\n' ' ' <"$TMP/g.cut")"
acc_a=$(awk -F, '$1 == 5 { print $3 }' "$TMP/a7.csv")
acc_g=$(awk -F, '$1 == 5 { print $3 }' "$TMP/g.csv")
awk -v a="$acc_a" -v g="$acc_g" 'BEGIN { d = a - g; exit !(d < 0.005 && d > -0.005) }' ||
    fail "DP-FedAvg with --secagg: accuracy $acc_g, without $acc_a"
ok "DP-FedAvg with --secagg: the same epsilon each round ($want at 5), accuracy $acc_g (without: $acc_a)"
# shellcheck disable=SC2086
"$FEDSIM" $SIM0 --nodes 40 --dp-client-clip 1 --dp-client-quantile 0.5 --secagg \
    >"$TMP/g2.out" 2>&1 && fail "adaptive clipping with --secagg ran"
grep -q "adaptive clipping (--dp-client-quantile) with --secagg is not built" "$TMP/g2.out" ||
    fail "the refusal of adaptive clipping with --secagg says why: $(tail -n 2 "$TMP/g2.out")"
# shellcheck disable=SC2086
"$FEDSIM" $SIM --dp-client-clip 1 --secagg --secagg-bits 8 >"$TMP/g3.out" 2>&1 &&
    fail "DP-FedAvg with --secagg-bits 8 ran"
grep -q "secagg-bits 8 are too few for --dp-client-clip" "$TMP/g3.out" ||
    fail "too few bits for the clip are refused: $(tail -n 2 "$TMP/g3.out")"
ok "with --secagg: adaptive clipping refused, and bits too few for the clip"

# ---- F
K=$TMP/keys
allow_keys "$K" agg c0 c1 c2
COMMON="--data fashion-mnist --threads 1"
SETTINGS="--model logreg --optimizer sgd --lr 0.1 --batch 100 --local-epochs 1"
DPF="--dp-client-clip 1 --dp-client-noise 1.5 --fraction 1"
agg() {
    # shellcheck disable=SC2086
    start "$1" --role aggregator --keys "$K/agg" --allow "$K/allow.txt" --db "$TMP/agg.db" \
        --listen tcp://127.0.0.1:0 --port-file "$TMP/port" $COMMON $SETTINGS $DPF \
        --rounds "$2" --min-clients 3 --deadline-ms 60000 --gather-ms 200
}
# clients PREFIX: the three clients c0..c2, as processes PREFIX0..PREFIX2
clients() {
    for i in 0 1 2; do
        # shellcheck disable=SC2086
        start "$1$i" --role client --keys "$K/c$i" --allow "$K/allow.txt" --db "$TMP/c$i.db" \
            --aggregator "tcp://127.0.0.1:$P" --aggregator-key agg --partition iid \
            --shard "$i/10" $COMMON
    done
}
refused "--dp-client-clip on a client is refused" "is an aggregator's setting" --role client \
    --aggregator tcp://127.0.0.1:1 --dp-client-clip 1
refused "--dp-target-epsilon without --dp-client-clip is refused" "need --dp-client-clip" \
    --role aggregator --dp-target-epsilon 3
# 133 clients in the allow-list, a round that holds 128 (--wait-clients 2):
# a Poisson draw could be cut to fit, and then one client could push another out (sensitivity 2C)
cp "$K/allow.txt" "$TMP/big-allow.txt"
i=0
while [ $i -lt 130 ]; do
    "$FEDNODE" keygen --out "$TMP/big/$i" >/dev/null 2>&1 || fail "keygen $i"
    echo "x$i $("$FEDNODE" pubkey "$TMP/big/$i")" >>"$TMP/big-allow.txt"
    i=$((i + 1))
done
# shellcheck disable=SC2086
"$FEDNODE" run --role aggregator --keys "$K/agg" --allow "$TMP/big-allow.txt" \
    --db "$TMP/big.db" --listen tcp://127.0.0.1:0 $COMMON $SETTINGS $DPF --wait-clients 2 \
    --min-clients 2 >"$TMP/big.out" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q "raise --wait-clients to 133" "$TMP/big.out" ||
    fail "an allow-list larger than a round: exit 1, saying why (got $rc: $(tail -n 2 "$TMP/big.out"))"
ok "DP-FedAvg with more members than a round holds is refused (exit 1, says --wait-clients 133)"
# row_eps ROUND WANT: the aggregator's row ROUND holds epsilon WANT (4 decimals)
row_eps() {
    got=$(field "$TMP/agg.db" "$1" epsilon | awk '{ printf "%.4f\n", $1 }')
    [ "$got" = "$2" ] || fail "round $1's row: epsilon $got, fednode privacy $2"
}
agg agg1 2
wait_for "the aggregator wrote its port" 30 test -s "$TMP/port"
P=$(cat "$TMP/port")
clients c
wait_for "round 2 committed" 120 logged agg1 "round 2 merged"
exits0 agg1 60
e2=$(eps 1 1.5 2)
row_eps 2 "$e2"
grep -q "round 2 merged 3 of 3 .* client-level epsilon $e2" "$TMP/agg1.log" ||
    fail "the log says round 2's epsilon $e2"
ok "aggregator (daemon): round 2's epsilon $e2 in its row and log"
rm -f "$TMP/port"
agg agg2 3
wait_for "the restarted aggregator wrote its port" 30 test -s "$TMP/port"
logged agg2 "DP-FedAvg resumes at epsilon $e2 (2 rounds charged)" ||
    fail "the restarted aggregator resumes at epsilon $e2"
P=$(cat "$TMP/port")
for i in 0 1 2; do exits0 "c$i" 60 2>/dev/null || true; done
clients d
wait_for "round 3 committed" 120 logged agg2 "round 3 merged"
exits0 agg2 60
e3=$(eps 1 1.5 3)
row_eps 3 "$e3"
"$FEDNODE" status --db "$TMP/agg.db" | grep -q "epsilon $e3 at delta 1e-05 spent in 3 rounds" ||
    fail "status shows epsilon $e3 in 3 rounds"
"$FEDNODE" status --db "$TMP/agg.db" | grep -q "client-level DP-FedAvg by this aggregator.*trusted" ||
    fail "status says the aggregator is trusted for client-level DP"
ok "restarted: resumes at $e2, round 3 ends at $e3 (= fednode privacy, q 1, z 1.5)"

# the same with --secagg: a fresh aggregator database, one round
for i in 0 1 2; do exits0 "d$i" 60 2>/dev/null || true; done
rm -f "$TMP/port" "$TMP"/c?.db
# shellcheck disable=SC2086
start aggs --role aggregator --keys "$K/agg" --allow "$K/allow.txt" --db "$TMP/aggs.db" \
    --listen tcp://127.0.0.1:0 --port-file "$TMP/port" $COMMON $SETTINGS $DPF --secagg \
    --rounds 1 --min-clients 3 --deadline-ms 60000 --gather-ms 200
wait_for "the secagg aggregator wrote its port" 30 test -s "$TMP/port"
P=$(cat "$TMP/port")
clients s
wait_for "the secure round committed" 120 logged aggs "round 1 merged"
exits0 aggs 60
e1=$(eps 1 1.5 1)
grep -q "round 1 merged 3 of 3 .* each clipped by its client to 0.99.* (secagg), client-level epsilon $e1" \
    "$TMP/aggs.log" || fail "the secure round's log: $(grep 'round 1 merged' "$TMP/aggs.log")"
[ "$(field "$TMP/aggs.db" 1 epsilon | awk '{ printf "%.4f\n", $1 }')" = "$e1" ] ||
    fail "the secure round's row holds epsilon $e1"
"$FEDNODE" status --db "$TMP/aggs.db" | grep -q "with secure aggregation: .*noise after unmasking.*refuses to run where that chance exceeds delta / 10" ||
    fail "status says the aggregator adds the noise after unmasking, and that small draws are refused"
ok "aggregator (daemon) with --secagg: 3 clients each clipped their own delta, epsilon $e1, status says who is trusted"
echo "passed ($(($(date +%s) - T0)) s)"
