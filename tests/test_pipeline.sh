#!/bin/sh
# test_pipeline.sh - `mpirun -np S x D fednode train --pipeline-stages S
# --micro-batches M` (model/pipeline.h, model/train.h's fed_trainer_new_stage)
# on slices of Fashion-MNIST, --no-eval unless said, one epoch:
#  A. A deep MLP (mlp:256,256,256,256; 1000 samples, batch 32, M 4) at
#     S = 2 and 3: the saved model is bit-identical (cmp) to one process's
#     --pipeline-stages 1 --micro-batches 4 (GPipe's order); at S = 2 with
#     the test split the epoch's line (loss, accuracies) is the one
#     process's too (evaluation through the pipeline).
#  B. ResNet-8 (examples/models/resnet8.cfg; batch norm's statistics per
#     micro-batch, as GPipe's; 100 samples, batch 24, M 3) at S = 2 and 3:
#     bit-identical to one process.
#  C. S = 2, D = 2 (4 ranks, oversubscribed): bit-identical to the
#     data-parallel reference at S = 1, D = 2 (mpirun -np 2).
#  D. Each rank's parameter bytes are its stage's (the split `fednode model
#     --plan --pipeline-stages` prints), the stages' add up to the model's,
#     and at S = 2 each is within 10% of half.
#  E. Rank 1 killed (-9) mid-training: mpirun ends the job (exit not 0),
#     naming rank 1 and signal 9. Rank 1 frozen (SIGSTOP): rank 0's receive
#     times out at --mpi-timeout-ms, it says so and the job ends.
#  F. Refusals, each naming what: no mpirun, ranks not a multiple of S,
#     more stages than places to cut, --dp-sgd, dropout.
#  G. `fednode run`: an aggregator, two plain clients and a site c0 as
#     mpirun -np 2 --pipeline-stages 2 --micro-batches 4 (a layer file whose
#     graph is longer than a spec, so its text goes to rank 1), 2 rounds:
#     the aggregator's final model is bit-identical to the same job with c0
#     one process at --micro-batches 4; rank 1 holds its stage only. The
#     same with c0 as 4 ranks (2 replicas of 2 stages) equals c0 as 2
#     data-parallel ranks (--pipeline-stages 1 under mpirun -np 2).
#  H. A regression (loss mse on 400 CSV rows) at S = 2: bit-identical to
#     one process, the same epoch line (its test loss through the pipeline).
# Needs ./fednode built with MPI, mpirun and Fashion-MNIST; exits 77
# (skipped) without them. KEEP=1 keeps the temporary directory.
. "$(dirname "$0")/proc_lib.sh"
need_mpi
FEDNODE_NO_REEXEC=1
FEDNODE_LOG=warn
export FEDNODE_NO_REEXEC FEDNODE_LOG

MLP="--model mlp:256,256,256,256 --shard 0/60 --micro-batches 4"
B32="--batch 32"
RES="--model examples/models/resnet8.cfg --shard 0/600 --batch 24 --micro-batches 3"
COMMON="--data fashion-mnist --threads 1 --optimizer sgd --lr 0.05 --seed 3"
trap mpi_cleanup EXIT

# one NAME ARGS...: one process, output in $TMP/NAME.log
one() {
    n=$1; shift
    # shellcheck disable=SC2086
    "$FEDNODE" train $COMMON --epochs 1 "$@" --out "$TMP/$n.bin" >"$TMP/$n.log" 2>&1 ||
        fail "$n: one process trains"
}
# ranks NAME NP ARGS...: mpirun -np NP, output in $TMP/NAME.log
ranks() {
    n=$1 np=$2; shift 2
    # shellcheck disable=SC2086
    $MPIRUN -np "$np" "$FEDNODE" train $COMMON --epochs 1 "$@" --out "$TMP/$n.bin" >"$TMP/$n.log" 2>&1 ||
        fail "$n: mpirun -np $np trains"
}
same() { cmp -s "$TMP/$1.bin" "$TMP/$2.bin" || fail "$3: $2's model is $1's, bit for bit"; }

# ---- A
one mlp1 $MLP $B32 --pipeline-stages 1 --no-eval
for S in 2 3; do
    ranks "mlp$S" "$S" $MLP $B32 --pipeline-stages "$S" --no-eval
    same mlp1 "mlp$S" "A: S = $S"
done
one mlp1e $MLP $B32 --pipeline-stages 1
ranks mlp2e 2 $MLP $B32 --pipeline-stages 2
want=$(grep '^epoch' "$TMP/mlp1e.log" | sed 's/  samples.*//')
got=$(grep '^epoch' "$TMP/mlp2e.log" | sed 's/  samples.*//')
[ -n "$want" ] && [ "$got" = "$want" ] ||
    fail "A: the piped epoch line '$got' is the one process's '$want'"
ok "A: a deep MLP at S = 2 and 3 equals one process's GPipe-order accumulation bit for bit; $got"

# ---- B
one res1 $RES --pipeline-stages 1 --no-eval
for S in 2 3; do
    ranks "res$S" "$S" $RES --pipeline-stages "$S" --no-eval
    same res1 "res$S" "B: S = $S"
done
ok "B: ResNet-8 at S = 2 and 3 equals one process bit for bit"

# ---- C
ranks mlpd2 2 $MLP --pipeline-stages 1 --batch 16 --no-eval
ranks mlps2d2 4 $MLP --pipeline-stages 2 --batch 16 --no-eval
same mlpd2 mlps2d2 "C: S = 2, D = 2"
ok "C: S = 2, D = 2 (4 ranks) equals the data-parallel S = 1, D = 2 bit for bit"

# ---- D: the parameter bytes each rank holds
for S in 2 3; do
    total=$(sed -n "s/^# rank 0: .*of the model's \([0-9]*\))$/\1/p" "$TMP/mlp$S.log")
    [ -n "$total" ] || fail "D: rank 0 prints its parameter bytes"
    sum=0
    for r in $(seq 0 $((S - 1))); do
        b=$(sed -n "s/^# rank $r: stage $r of $S .*, \([0-9]*\) parameter bytes .*/\1/p" "$TMP/mlp$S.log")
        [ -n "$b" ] || fail "D: rank $r of $S prints its stage and bytes"
        sum=$((sum + b))
        if [ "$S" = 2 ]; then # balanced: within 10% of half the model
            [ $((b * 20)) -ge $((total * 9)) ] && [ $((b * 20)) -le $((total * 11)) ] ||
                fail "D: rank $r holds $b bytes, within 10% of half of $total"
        fi
    done
    [ "$sum" = "$total" ] || fail "D: S = $S: the stages' $sum bytes are the model's $total"
done
for S in 2 3; do
    "$FEDNODE" model examples/models/resnet8.cfg --plan --pipeline-stages "$S" >"$TMP/plan$S.out" 2>&1 ||
        fail "D: fednode model --plan --pipeline-stages $S"
    for r in $(seq 0 $((S - 1))); do
        p=$(awk -v s="$r" '$1 == s && NF == 8 { print $5 }' "$TMP/plan$S.out")
        b=$(sed -n "s/^# rank $r: stage $r of $S .*, \([0-9]*\) parameters, .*/\1/p" "$TMP/res$S.log")
        [ -n "$p" ] && [ "$p" = "$b" ] ||
            fail "D: ResNet-8 rank $r of $S holds $b parameters, the plan's stage $r has '$p'"
    done
done
ok "D: each rank holds its stage's parameters (the plan's), the stages add up to the model, S = 2 halves the MLP within 10%"

# ---- E: a rank killed, a rank frozen
long="--model mlp:256,256,256,256 --shard 0/2 --batch 32 --micro-batches 4 --epochs 50"
# bg NAME ARGS...: mpirun -np 2 in the background
bg() {
    n=$1; shift
    # shellcheck disable=SC2086
    $MPIRUN -np 2 "$FEDNODE" train $COMMON "$@" >"$TMP/$n.log" 2>&1 &
    echo $! >"$TMP/$n.pid"
    PIDS="$PIDS $!"
    MPIS="$MPIS $!"
}
# shellcheck disable=SC2086
bg kill $long --pipeline-stages 2 --no-eval --mpi-timeout-ms 5000
wait_for "E: rank 1 reports its stage" 30 logged kill "# rank 1: stage 1"
r1=$(mpi_rank_pid kill 1) || fail "E: rank 1's pid"
kill -9 "$r1"
wait_exit kill 30
[ "$rc" -ne 0 ] || fail "E: the job exits non-zero (got 0)"
grep -q "process rank 1 .* exited on signal 9" "$TMP/kill.log" ||
    fail "E: mpirun names rank 1 and its signal"
ok "E: rank 1 killed: the job exits $rc, mpirun's line names rank 1 and signal 9"
# shellcheck disable=SC2086
bg frozen $long --pipeline-stages 2 --no-eval --mpi-timeout-ms 2000
wait_for "E: rank 1 reports its stage" 30 logged frozen "# rank 1: stage 1"
r1=$(mpi_rank_pid frozen 1) || fail "E: rank 1's pid (frozen)"
kill -STOP "$r1"
wait_exit frozen 30
kill -9 "$r1" 2>/dev/null
[ "$rc" -ne 0 ] || fail "E: the frozen job exits non-zero (got 0)"
grep -q "mpi: \(send\|receive\) not done by its deadline: a rank died or stalls" "$TMP/frozen.log" &&
    grep -q "train: training: timed out" "$TMP/frozen.log" ||
    fail "E: rank 0 says its exchange with the frozen stage timed out"
ok "E: rank 1 frozen: rank 0's exchange times out at 2 s, it says so, the job exits $rc"

# ---- F: refusals
# refused WHAT TEXT CMD...: CMD exits 2 and says TEXT
refused() {
    w=$1 t=$2; shift 2
    "$@" >"$TMP/refused.out" 2>&1 && fail "F: $w is refused"
    grep -q -- "$t" "$TMP/refused.out" || { sed 's/^/  | /' "$TMP/refused.out"; fail "F: $w: says '$t'"; }
}
# shellcheck disable=SC2086
refused "no mpirun" "start it as mpirun -np 2" "$FEDNODE" train $COMMON $MLP $B32 --pipeline-stages 2
# shellcheck disable=SC2086
refused "3 ranks, 2 stages" "the ranks must be a multiple of the stages" \
    $MPIRUN -np 3 "$FEDNODE" train $COMMON $MLP $B32 --pipeline-stages 2 --no-eval
# shellcheck disable=SC2086
refused "8 stages of ResNet-8" "7 stages at most" \
    $MPIRUN -np 8 "$FEDNODE" train $COMMON $RES --pipeline-stages 8 --no-eval
# shellcheck disable=SC2086
refused "DP-SGD" "does not go with --dp-sgd" "$FEDNODE" train $COMMON $MLP $B32 --pipeline-stages 2 --dp-sgd
# shellcheck disable=SC2086
refused "dropout" "pipeline stages do not take dropout" \
    $MPIRUN -np 2 "$FEDNODE" train $COMMON --model "g:L64,R,Dr100000,L" --shard 0/60 --batch 32 \
    --micro-batches 2 --pipeline-stages 2 --no-eval
ok "F: no mpirun, ranks not S x D, too many stages, --dp-sgd and dropout refused, each named"

# ---- G: fednode run, the site in stages
K=$TMP/keys
allow_keys "$K" agg c0 c1 c2
cat >"$TMP/long.cfg" <<'EOF'
[input]
shape = 1,28,28
[flatten]
[linear]  name = pipeline_site_hidden_1  out = 64
[relu]
[linear]  name = pipeline_site_hidden_2  out = 64
[relu]
[linear]  name = pipeline_site_hidden_3  out = 64
[relu]
[linear]  name = pipeline_site_hidden_4  out = 64
[relu]
[linear]  name = pipeline_site_classes  out = classes
EOF
RUNC="--data fashion-mnist --threads 1 --partition iid"
# member DIR NAME SHARD ARGS...: a client of the job in $TMP/DIR
member() {
    d=$1 n=$2 sh=$3; shift 3
    # shellcheck disable=SC2086
    start "$n$d" --role client --keys "$K/$n" --allow "$K/allow.txt" --db "$TMP/$d/$n.db" \
        --aggregator "tcp://127.0.0.1:$port" --aggregator-key agg --shard "$sh" $RUNC "$@"
}
# job DIR C0-KIND: aggregator, c1, c2 and c0 (one process, or mpirun -np 2)
job() {
    mkdir -p "$TMP/$1"
    # shellcheck disable=SC2086
    start "agg$1" --role aggregator --keys "$K/agg" --allow "$K/allow.txt" \
        --db "$TMP/$1/agg.db" --listen tcp://127.0.0.1:0 --port-file "$TMP/$1/port" $RUNC \
        --model "$TMP/long.cfg" --optimizer sgd --momentum 0.9 --lr 0.05 --batch 32 \
        --local-epochs 1 --rounds 2 --min-clients 3 --deadline-ms 60000 --gather-ms 200
    wait_for "G: aggregator $1 wrote its port" 20 test -s "$TMP/$1/port"
    port=$(cat "$TMP/$1/port")
    member "$1" c1 1/60
    member "$1" c2 2/60
    if [ "$2" != one ]; then
        case $2 in
        mpi) np=2 st=2 ;; # 2 stages
        dp) np=2 st=1 ;;  # 2 replicas of the whole model
        s2d2) np=4 st=2 ;; # 2 replicas of 2 stages
        esac
        # shellcheck disable=SC2086
        $MPIRUN -np "$np" "$FEDNODE" run --role client --keys "$K/c0" --allow "$K/allow.txt" \
            --db "$TMP/$1/c0.db" --aggregator "tcp://127.0.0.1:$port" --aggregator-key agg \
            --shard 0/60 $RUNC --pipeline-stages "$st" --micro-batches 4 \
            --mpi-timeout-ms 20000 >"$TMP/site$1.log" 2>&1 &
        echo $! >"$TMP/c0$1.pid"
        PIDS="$PIDS $!"
        MPIS="$MPIS $!"
    else
        member "$1" c0 0/60 --micro-batches 4
    fi
    exits0 "agg$1" 120
    for n in c0 c1 c2; do exits0 "$n$1" 30; done
    "$FEDNODE" export --db "$TMP/$1/agg.db" --out "$TMP/$1/final.safetensors" >/dev/null 2>&1 ||
        fail "G: export $1"
}
FEDNODE_LOG=info
export FEDNODE_LOG
job gs mpi
FEDNODE_LOG=warn
job g1 one
cmp -s "$TMP/gs/final.safetensors" "$TMP/g1/final.safetensors" ||
    fail "G: the aggregator's final model with c0 in 2 stages is the one-process job's, bit for bit"
grep -q "site: rank 1 of 2: stage 1 of 2 (1 replica), holding only its stage's parameters" \
    "$TMP/sitegs.log" || fail "G: rank 1 says it holds stage 1 only"
grep -q "fednode: error" "$TMP/sitegs.log" && fail "G: no error lines at the site"
ok "G: fednode run with c0 as 2 pipeline stages (its graph's text sent to rank 1): the aggregator's final model equals the one-process job's bit for bit"
job gdp dp
FEDNODE_LOG=info
job gs2d2 s2d2
FEDNODE_LOG=warn
cmp -s "$TMP/gdp/final.safetensors" "$TMP/gs2d2/final.safetensors" ||
    fail "G: c0 as 2 replicas of 2 stages gives the final model of c0 as 2 data-parallel ranks"
grep -q "site: rank 1 of 4: stage 1 of 2 (2 replicas)" "$TMP/sitegs2d2.log" ||
    fail "G: rank 1 of 4 says it is stage 1 of 2 replicas"
ok "G: c0 as 2 x 2 ranks (2 replicas of 2 stages) equals c0 as 2 data-parallel ranks bit for bit"

# ---- I: a round that a site in stages cannot give (its site evaluation of
# the whole model) is declined with a LEAVE, the site alive, no error
mkdir -p "$TMP/i"
# shellcheck disable=SC2086
start aggi --role aggregator --keys "$K/agg" --allow "$K/allow.txt" --db "$TMP/i/agg.db" \
    --listen tcp://127.0.0.1:0 --port-file "$TMP/i/port" $RUNC --model "$TMP/long.cfg" \
    --rounds 1 --min-clients 2 --deadline-ms 60000 --gather-ms 200 --eval-every 1
wait_for "I: aggregator wrote its port" 20 test -s "$TMP/i/port"
port=$(cat "$TMP/i/port")
member i c1 1/60 --val-fraction 0.1
# shellcheck disable=SC2086
$MPIRUN -np 2 "$FEDNODE" run --role client --keys "$K/c0" --allow "$K/allow.txt" \
    --db "$TMP/i/c0.db" --aggregator "tcp://127.0.0.1:$port" --aggregator-key agg \
    --shard 0/60 $RUNC --val-fraction 0.1 --pipeline-stages 2 --micro-batches 4 \
    --mpi-timeout-ms 20000 >"$TMP/sitei.log" 2>&1 &
echo $! >"$TMP/c0i.pid"
PIDS="$PIDS $!"
MPIS="$MPIS $!"
wait_for "I: c0 declines the round (site evaluation over stages)" 90 \
    grep -q "asks for site evaluation (--eval-every), which a site in 2 pipeline stages cannot give" \
    "$TMP/sitei.log"
sleep 1
alive c0i || fail "I: the site in stages lives on after declining"
grep -q "fednode: error" "$TMP/sitei.log" && { cat "$TMP/sitei.log"; fail "I: no error lines at the site"; }
# asking it again changes nothing: the aggregator parks it until it restarts
wait_for "I: the aggregator parks c0" 20 grep -q \
    "client c0 declined round 1: .*(FED_ERR_UNSUPPORTED); it takes part in no round until it restarts" \
    "$TMP/aggi.log"
ok "I: --eval-every over a site in 2 stages: the round declined with a LEAVE, the site alive, no error, parked"
kill "$(pid aggi)" "$(pid c1i)" 2>/dev/null
for p in $(ps -o pid= --ppid "$(pid c0i)" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
kill -9 "$(pid c0i)" 2>/dev/null

# ---- H: a regression (loss mse on CSV numbers) in 2 stages
awk 'BEGIN { srand(7); print "x1,x2,label";
    for (i = 0; i < 400; i++) { a = rand(); b = rand(); printf "%.3f,%.3f,%.4f\n", a, b, 1.5 * a - 0.5 * b } }' \
    >"$TMP/r.csv"
cat >"$TMP/reg.cfg" <<'EOF'
[input] features = 2
[linear] name = fc1 out = 16
[relu]
[linear] name = fc2 out = 16
[relu]
[linear] name = out out = 1
[output] loss = mse
EOF
REG="--data $TMP/r.csv --task regression --model $TMP/reg.cfg --batch 16 --micro-batches 4"
COMMON="--threads 1 --optimizer sgd --lr 0.02 --seed 3"
# shellcheck disable=SC2086
one reg1 $REG --pipeline-stages 1
# shellcheck disable=SC2086
ranks reg2 2 $REG --pipeline-stages 2
same reg1 reg2 "H: a regression at S = 2"
want=$(grep '^epoch' "$TMP/reg1.log" | sed 's/  samples.*//')
got=$(grep '^epoch' "$TMP/reg2.log" | sed 's/  samples.*//')
[ -n "$want" ] && [ "$got" = "$want" ] || fail "H: the piped epoch line '$got' is '$want'"
ok "H: a regression (mse) at S = 2 equals one process bit for bit; $got"
