#!/bin/sh
# bench_consortium.sh - the reference aggregator-mode job on 127.0.0.1: one
# aggregator and 10 client `fednode run` processes (iid shards of
# Fashion-MNIST, mlp:256,128, 1 local epoch of plain SGD lr 0.05 batch 64,
# 10 rounds), printing accuracy, seconds per round (rounds 2-10, and round 1
# apart), launch-to-connected time and peak RSS next to the targets, each as
# the median of BENCH_JOBS (5) jobs with their lowest and highest; where
# rounds 2-10's time went (stages(): from the rows every node's database
# already keeps); and, in the same run, the 10 clients' training alone,
# timed warm (each process loaded and one untimed epoch done, `fednode
# train --warm-up`, before a common instant), TOGETHER_RUNS (2) runs before
# each job and as many after the last, so both sides of the ratio are
# interleaved over the same minutes; the ratio's spread pairs each job with
# the runs just before it. Asserts nothing. Flower's harness (issue 41's
# comparison) is not in this repository: its column quotes that issue.
# BENCH_BASE=<commit> builds that commit (git archive into the temporary
# directory, make fednode) and runs the job with this build and that one
# interleaved, A B A B, BENCH_JOBS of each, printing each figure's median and
# spread for both (CPU seconds and peak RSS, which the machine's load moves
# far less than wall time, beside the wall figures); BENCH_BASE=PATH to a
# fednode binary skips the build.
# With BENCH_HTTP=1 (the default; 0: off) each job is followed by the same job
# with --http on every node and all 11 scraped every second (one curl a
# second fetching every /metrics, as a Prometheus would), so the two sides
# are interleaved too; it prints both medians of seconds per round, whether
# their difference lies within the runs' own spread, and the CPU seconds
# the nodes' HTTP threads used (each daemon logs its own at exit).
# Keys are made afresh each run and a client's shuffling is seeded from its
# key, so the accuracy moves a little (a few 0.001) from run to run.
set -u
FEDNODE=${FEDNODE:-./fednode}
JOB_FEDNODE=$FEDNODE # the build a job runs (BENCH_BASE: either)
DATA=${FEDNODE_DATA:-/usr/share/datasets/fashion-mnist}
N=10
ROUNDS=10
# The 10 clients share this machine's cores, so each is told to use one
# (--threads 1); a client alone on its machine would use them all (0).
CLIENT_THREADS=${BENCH_CLIENT_THREADS:-1}
LIMIT_S=${BENCH_CONSORTIUM_LIMIT_S:-300} # the job is killed past this
HTTP_RUNS=${BENCH_HTTP:-1}
if [ "$HTTP_RUNS" = 1 ] && ! command -v curl >/dev/null 2>&1; then
    echo "bench_consortium: no curl: the runs with --http are left out"; HTTP_RUNS=0
fi
if [ ! -x "$FEDNODE" ]; then echo "bench_consortium: skipped: no $FEDNODE (run make)"; exit 0; fi
if [ ! -e "$DATA/train-images-idx3-ubyte.gz" ] && [ ! -e "$DATA/train-images-idx3-ubyte" ]; then
    echo "bench_consortium: skipped: no Fashion-MNIST in $DATA"; exit 0
fi
TMP=$(mktemp -d "${FEDNODE_BENCH_DIR:-/tmp}/fed_bench_consortium_XXXXXX") || exit 1
PIDS=""
cleanup() {
    for p in $PIDS; do kill "$p" 2>/dev/null; done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

now() { date +%s.%N; }
# calc EXPR: awk arithmetic, printed with %.3f unless a format is given
calc() { awk "BEGIN { printf \"${2:-%.3f}\", ($1) }"; }

# ---- identities (not passphrase-sealed) and the allow-list ----
# shellcheck source=bench/lib_bench.sh
. "$(dirname "$0")/lib_bench.sh"
# shellcheck disable=SC2046
bench_keys bench_consortium aggregator $(seq -f 'c%g' 0 $((N - 1)))
warm_cache bench_consortium

# ---- training alone, in the same run ----
# One `fednode train` per shard, same recipe, 1 epoch, no test split
# (--no-eval: a client daemon scores nothing); each prints its epoch's
# samples/s timed around the training loop alone (no loading). Three ways of
# running the 10:
#   together all 10 at once with the daemons' threads, as the 10 client
#            daemons train a round: every one loads, then all begin their
#            epoch at one instant (--start-at), and the figure is the time
#            from that instant until the last epoch ended, as a round lasts
#            until its last delta. The start-up wake-up of 10 processes on
#            2 cores falls inside it (each epoch line says how late it
#            began: 0-30 ms), as it falls inside a round. Run TOGETHER_RUNS
#            times before each job and as many after the last (how the
#            scheduler first spreads 10 processes over 2 cores moves a run
#            by +-5%); the target's denominator is their median, which a
#            stray slow run does not move (one read 0.69 s among ten at
#            0.39-0.44, just after a job) and which sits below their mean
#            (stricter);
#   staggered the same 10 started one after another by this shell with no
#            common instant, the slowest one's epoch: shorter than
#            together, since the first ones are well on before the last
#            begins (this bench's denominator until 2026-11-24; printed to
#            compare);
#   packed   one at a time with 1 thread, summed and halved: the 2 cores'
#            worth of the round's training work with no contention at all
#            (the least any schedule of the 10 could take);
#   serial   one at a time with the daemons' threads (CLIENT_THREADS).
TOGETHER_RUNS=${BENCH_TOGETHER_RUNS:-2}
JOBS=${BENCH_JOBS:-5}
TRAIN="--data $DATA --model mlp:256,128 --optimizer sgd --momentum 0 --lr 0.05 --batch 64
    --schedule const --epochs 1 --device cpu --no-eval"
epoch_s() { # FILE: seconds of the epoch in a train output
    awk '/training samples/ { n = $0; sub(/.*\(/, "", n); sub(/ training.*/, "", n) }
         /samples\/s/ { for (i = 1; i < NF; i++) if ($i == "samples/s") r = $(i + 1) }
         END { if (r > 0) printf "%.4f", n / r; else print "nan" }' "$1"
}
start_s() { # FILE: how late the epoch began after --start-at
    awk '/samples\/s/ { for (i = 1; i < NF; i++) if ($i == "start") s = $(i + 1) }
         END { printf "%.4f", s + 0 }' "$1"
}
# train_10 TAG [--start-at T]: the 10 shards' epochs, all launched at once
train_10() {
    tag=$1
    shift
    for i in $(seq 0 $((N - 1))); do
        # shellcheck disable=SC2086
        "$FEDNODE" train $TRAIN --shard "$i/$N" --threads "$CLIENT_THREADS" "$@" \
            >"$TMP/tc.$tag.$i" 2>/dev/null &
        PIDS="$PIDS $!"
    done
    for p in $PIDS; do wait "$p"; done
    PIDS=""
}
# together_s TAG: from the common start to the last epoch's end, every
# process loaded and warm (--warm-up: one untimed epoch first) before the
# clock starts, as the daemons are in rounds 2 and later. The common instant
# is LEAD seconds after launch (in $TMP/lead, 4 s at first); a run where a
# process was ready less than 0.05 s before it is counted late, its figure
# kept but marked, and the next run's lead doubled. Prints "SECONDS LATE".
together_s() {
    lead=$(cat "$TMP/lead" 2>/dev/null || echo 4)
    train_10 "$1" --warm-up --start-at "$(calc "$(now) + $lead")"
    t=0 ready=-1e9
    for i in $(seq 0 $((N - 1))); do
        f="$TMP/tc.$1.$i"
        t=$(calc "$(start_s "$f") + $(epoch_s "$f") > $t ? $(start_s "$f") + $(epoch_s "$f") : $t" %.4f)
        r=$(awk '/warm-up epoch/ { for (i = 1; i < NF; i++) if ($i == "ready") print $(i + 1) + 0 }' "$f")
        ready=$(calc "${r:-0} > $ready ? ${r:-0} : $ready" %.4f)
    done
    late=$(calc "$ready > -0.05" %d)
    [ "$late" -eq 0 ] || calc "$lead * 2" %.1f >"$TMP/lead"
    echo "$t $late"
}
# staggered_s TAG: the slowest epoch of the 10 started one by one
staggered_s() {
    train_10 "$1"
    t=0
    for i in $(seq 0 $((N - 1))); do
        e=$(epoch_s "$TMP/tc.$1.$i")
        t=$(calc "$e > $t ? $e : $t" %.4f)
    done
    echo "$t"
}
# together_runs TAG: TOGETHER_RUNS figures, space-separated (a late one
# also counted in $TMP/late)
together_runs() {
    tg=$1
    for r in $(seq 1 "$TOGETHER_RUNS"); do
        # shellcheck disable=SC2046
        set -- $(together_s "$tg$r")
        [ "$2" = 0 ] || echo "$1" >>"$TMP/late"
        printf '%s ' "$1"
    done
}

# rows_of DB: "round start_ms end_ms" of each row of a node's database
rows_of() {
    "$JOB_FEDNODE" status --db "$1" --json | tr '{' '\n' |
        sed -n 's/^"round":\([0-9]*\),"start_ms":\([0-9]*\),"end_ms":\([0-9]*\),.*/\1 \2 \3/p'
}
# stages D: where job D's rounds 2 to ROUNDS went, from the rows the nodes
# already keep (the aggregator's round: start to merged and committed; each
# client's: its training's start to its delta sent and its row written; all
# on this machine's one clock), each the median over those rounds, in ms:
#   out    the round's start to the last client's training start (the
#          MODEL frame encoded, sent 10 times, decoded; the job scheduled)
#   first  the same to the first client's training start
#   work   a client's training start to its delta sent (median of all
#          clients' rounds; "slowest": the round's last client's)
#   tail   the last delta sent to the round merged and committed (transfer,
#          opening, merge, the storage commit)
#   gap    the commit to the next round's start (the held-out evaluation,
#          the gather timer, the next round's sampling)
# Prints "per_round_2_R round1 out first work slowest tail gap", then round
# 1's own out, first, slowest and tail.
stages() {
    {
        rows_of "$1/agg.db" | sed 's/^/a /'
        for i in $(seq 0 $((N - 1))); do rows_of "$1/c$i.db" | sed 's/^/c /'; done
    } | awk -v R="$ROUNDS" '
        function med(a, n,   i, j, t) {
            for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
            return n ? (n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2) : 0 }
        $1 == "a" { as[$2] = $3; ae[$2] = $4; next }
        { r = $2
          if (!(r in cmax) || $3 > cmax[r]) cmax[r] = $3
          if (!(r in cmin) || $3 < cmin[r]) cmin[r] = $3
          if (!(r in emax) || $4 > emax[r]) emax[r] = $4
          if (r >= 2) w[++nw] = $4 - $3
          if (!(r in slow) || $4 - $3 > slow[r]) slow[r] = $4 - $3 }
        END {
            for (r = 2; r <= R; r++) {
                o[r - 1] = cmax[r] - as[r]; f[r - 1] = cmin[r] - as[r]
                sl[r - 1] = slow[r]; tl[r - 1] = ae[r] - emax[r]
                if (r < R) g[r - 1] = as[r + 1] - ae[r]
            }
            printf "%.4f %.4f %.0f %.0f %.0f %.0f %.0f %.0f %.0f %.0f %.0f %.0f\n", (ae[R] - ae[1]) / 1000 / (R - 1),
                (ae[1] - as[1]) / 1000, med(o, R - 1), med(f, R - 1), med(w, nw),
                med(sl, R - 1), med(tl, R - 1), med(g, R - 2),
                cmax[1] - as[1], cmin[1] - as[1], slow[1], ae[1] - emax[1]
        }'
}

# ---- the job (job J: its logs and databases in $TMP/jobJ, its figures
# in $TMP/jobJ.fig, one line: see the end of job()) ----
# Nothing polls the processes while they run (a poller's forks took 35 ms
# of CPU a round from the job): each daemon logs its own peak RSS and CPU
# seconds when it exits (getrusage), and the two snapshots of the job's CPU
# seconds (/proc/PID/stat utime + stime) are taken by the aggregator log's
# reader when round 1 and the last round start (at the last merge some
# clients have gone).
# "daemon: done: peak RSS X MiB, CPU Y s" (the daemon's exit line)
usage_of() { awk '/daemon: done: peak RSS/ { for (i = 1; i < NF; i++) { if ($i == "RSS") r = $(i + 1); if ($i == "CPU") c = $(i + 1) } }
    END { print (r == "" ? "nan" : r), (c == "" ? "nan" : c) }' "$1"; }
hz=$(getconf CLK_TCK)
cpu_now() { # the current job's ($D) CPU seconds so far
    # shellcheck disable=SC2046
    awk -v hz="$hz" '{ s += $14 + $15 } END { printf "%.3f", s / hz }' $(cat "$D/stat_files") 2>/dev/null
}
# stamp: the lines of stdin, those the figures need prefixed with the
# wall-clock seconds they arrived (the first and last round's start also
# with the job's CPU seconds then), the others with '-': a fork of date per
# line took 0.5% of the cores from the job (each round's own times are in
# the aggregator's database)
stamp() {
    while IFS= read -r line; do
        case "$line" in
        *"round 1 starts"* | *"round $ROUNDS starts"*) echo "$(now) $line cpu $(cpu_now)" ;;
        *"round $ROUNDS merged"*) echo "$(now) $line" ;;
        *) echo "- $line" ;;
        esac
    done
}
# "http: served N requests, ...; the HTTP thread used X s CPU" (exit line)
http_of() { awk '/http: served/ { for (i = 1; i < NF; i++) { if ($i == "served") n = $(i + 1); if ($i == "used") c = $(i + 1) } }
    END { print (n == "" ? 0 : n), (c == "" ? "nan" : c) }' "$1"; }
# scrape D: every second, one curl fetching every node's /metrics (their
# ports from the logs' "http: serving" lines), until killed
scrape() {
    urls="" n=0
    while :; do
        if [ "$n" -lt $((N + 1)) ]; then
            urls=$(sed -n 's|.*http: serving \(http://[^/]*\)/ .*|\1/metrics|p' "$1"/*.log 2>/dev/null)
            n=$(echo "$urls" | grep -c metrics)
        fi
        # shellcheck disable=SC2086
        [ "$n" -gt 0 ] && curl -s --max-time 1 $urls >/dev/null 2>&1
        sleep 1
    done
}
# job J [http]: one run of the job, its figures into $TMP/jobJ.fig; with
# "http", every node serves --http and is scraped every second
job() {
    J=$1
    H=""
    [ "${2:-}" = http ] && H="--http 127.0.0.1:0"
    D=$TMP/job$J
    mkdir -p "$D"
    : >"$D/stat_files"
    mkfifo "$D/agg.fifo"
    stamp <"$D/agg.fifo" >"$D/agg.log" &
    STAMP=$!
    t_launch=$(now)
    "$JOB_FEDNODE" run --role aggregator --keys "$TMP/aggregator" --allow "$TMP/allow.txt" \
        --db "$D/agg.db" --listen tcp://127.0.0.1:0 --port-file "$D/port" --data "$DATA" \
        --model mlp:256,128 --optimizer sgd --momentum 0 --lr 0.05 --batch 64 --local-epochs 1 \
        --rounds $ROUNDS --min-clients $N --wait-clients $N $H >/dev/null 2>"$D/agg.fifo" &
    AGG=$!
    PIDS="$AGG"
    echo "/proc/$AGG/stat" >>"$D/stat_files"
    i=0
    while [ ! -s "$D/port" ]; do
        i=$((i + 1))
        if [ $i -gt 1000 ] || ! kill -0 $AGG 2>/dev/null; then
            echo "bench_consortium: the aggregator wrote no port file"; cat "$D/agg.log"; exit 1
        fi
        sleep 0.01
    done
    PORT=$(cat "$D/port")
    for i in $(seq 0 $((N - 1))); do
        "$JOB_FEDNODE" run --role client --keys "$TMP/c$i" --allow "$TMP/allow.txt" --db "$D/c$i.db" \
            --aggregator "tcp://127.0.0.1:$PORT" --data "$DATA" --shard "$i/$N" \
            --threads "$CLIENT_THREADS" $H ${H:+--linger-ms 0} >/dev/null 2>"$D/c$i.log" &
        PIDS="$PIDS $!"
        echo "/proc/$!/stat" >>"$D/stat_files"
    done
    SCRAPER=""
    if [ -n "$H" ]; then
        scrape "$D" &
        SCRAPER=$!
    fi
    # a watchdog: the job is stopped past LIMIT_S
    # shellcheck disable=SC2086
    (
        sleep "$LIMIT_S" &
        s=$!
        trap 'kill $s 2>/dev/null; exit 0' TERM
        wait $s && kill $PIDS 2>/dev/null && echo "bench_consortium: the job ran past ${LIMIT_S}s; stopping it"
    ) &
    WATCHDOG=$!
    failed=0
    for p in $PIDS; do wait "$p" || failed=1; done
    t_end=$(now)
    kill "$WATCHDOG" 2>/dev/null
    [ -z "$SCRAPER" ] || kill "$SCRAPER" 2>/dev/null
    wait $STAMP
    PIDS=""
    [ $failed -eq 0 ] || { echo "bench_consortium: a process failed"; cat "$D/agg.log"; exit 1; }

    # ---- the job's figures ----
    t_first=$(awk '/round 1 starts/ { print $1; exit }' "$D/agg.log")
    t_last=$(awk -v r="round $ROUNDS merged" 'index($0, r) { print $1; exit }' "$D/agg.log")
    if [ -z "$t_first" ] || [ -z "$t_last" ]; then
        echo "bench_consortium: the job did not finish $ROUNDS rounds"; cat "$D/agg.log"; exit 1
    fi
    acc=$("$JOB_FEDNODE" status --db "$D/agg.db" --json |
        sed -n 's/^{[^[]*"rounds":\[{"round":'$ROUNDS',[^}]*"accuracy":\([0-9.]*\),.*/\1/p')
    acc=$(calc "${acc:-0}" %.4f)
    connect=$(calc "$t_first - $t_launch")
    per_round=$(calc "($t_last - $t_first) / $ROUNDS")
    # shellcheck disable=SC2046
    set -- $(usage_of "$D/agg.log")
    agg_mib=$1 agg_cpu=$2
    cli_max=0 cli_sum=0 cli_cpu=0
    for i in $(seq 0 $((N - 1))); do
        # shellcheck disable=SC2046
        set -- $(usage_of "$D/c$i.log")
        cli_max=$(calc "$1 > $cli_max ? $1 : $cli_max" %.1f)
        cli_sum=$(calc "$cli_sum + $1" %.1f)
        cli_cpu=$(calc "$cli_cpu + $2" %.2f)
    done
    cli_mean=$(calc "$cli_sum / $N" %.1f)
    # CPU over rounds 1 to ROUNDS - 1: the snapshots on round 1's and the last
    # round's start lines
    t_lastst=$(awk -v r="round $ROUNDS starts" 'index($0, r) { print $1; exit }' "$D/agg.log")
    cpu0=$(awk '/round 1 starts/ { print $NF; exit }' "$D/agg.log")
    cpu1=$(awk -v r="round $ROUNDS starts" 'index($0, r) { print $NF; exit }' "$D/agg.log")
    cpu_rounds=$(calc "(${cpu1:-0} - ${cpu0:-0}) / ($ROUNDS - 1)")
    cores_busy=$(calc "(${cpu1:-0} - ${cpu0:-0}) / (${t_lastst:-0} - $t_first)" %.2f)
    # each round from its row: start to merge, then the gap to the next start
    rounds_line=$("$JOB_FEDNODE" status --db "$D/agg.db" --json | tr '{' '\n' |
        sed -n 's/^"round":\([0-9]*\),"start_ms":\([0-9]*\),"end_ms":\([0-9]*\),.*/\1 \2 \3/p' |
        awk '{ s[$1] = $2; e[$1] = $3 }
        END { for (r = 1; r in e; r++) printf "%.3f%s", (e[r] - s[r]) / 1000, ((r + 1) in s ? sprintf("+%.3f ", (s[r + 1] - e[r]) / 1000) : "") }')
    echo "$per_round $acc $connect $cli_max $cli_mean $agg_mib $agg_cpu $cli_cpu $cpu_rounds" \
        "$cores_busy $(calc "$t_end - $t_launch")" >"$TMP/job$J.fig"
    echo "$rounds_line" >"$TMP/job$J.rounds"
    stages "$D" >"$TMP/job$J.stages"
    if [ -n "$H" ]; then # the HTTP threads' requests and CPU seconds
        # shellcheck disable=SC2046
        set -- $(http_of "$D/agg.log")
        h_req=$1 h_agg=$2 h_cli=0
        for i in $(seq 0 $((N - 1))); do
            # shellcheck disable=SC2046
            set -- $(http_of "$D/c$i.log")
            h_req=$((h_req + $1))
            h_cli=$(calc "$h_cli + $2" %.4f)
        done
        echo "$h_agg $h_cli $h_req" >"$TMP/job$J.http"
    fi
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
median() { printf '%s\n' "$@" | sort -n |
    awk '{ v[NR] = $1 } END { printf "%.4f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
lowest() { printf '%s\n' "$@" | sort -n | head -n 1; }
highest() { printf '%s\n' "$@" | sort -n | tail -n 1; }
# spread V...: "median (lowest-highest)" of the values, in SPREAD_FMT (%.3f)
spread() {
    f=${SPREAD_FMT:-%.3f}
    printf '%s (%s-%s)' "$(calc "$(median "$@")" "$f")" "$(calc "$(lowest "$@")" "$f")" "$(calc "$(highest "$@")" "$f")"
}
# col FILE-SUFFIX K TAGS...: column K of each job's figures file
col() {
    sfx=$1 k=$2
    shift 2
    for t in "$@"; do awk -v k="$k" '{ printf "%s ", $k }' "$TMP/job$t.$sfx"; done
}

# ---- BENCH_BASE=<commit or fednode binary>: this build (A) against that
# one (B), jobs interleaved A B A B ..., BENCH_JOBS (5) of each; no
# training alone, no --http. CPU seconds, page faults and peak RSS move far
# less with the machine's load than wall time does ----
if [ -n "${BENCH_BASE:-}" ]; then
    base_fednode bench_consortium
    for j in $(seq 1 "$JOBS"); do
        JOB_FEDNODE=$FEDNODE job "A$j"
        JOB_FEDNODE=$BASE_BIN job "B$j"
    done
    JOB_FEDNODE=$FEDNODE
    as=$(seq -f 'A%g' 1 "$JOBS") bs=$(seq -f 'B%g' 1 "$JOBS")
    echo "bench_consortium: this build (A, $FEDNODE) against BENCH_BASE=$BENCH_BASE (B),"
    echo "  $JOBS jobs each, interleaved A B A B; $N clients at --threads $CLIENT_THREADS, $ROUNDS rounds;"
    echo "  $(nproc) cores, load average before: $load_before; each figure: median (lowest-highest)"
    printf '%-40s %-26s %-26s %s\n' "figure" "A" "B" "A / B (medians)"
    # row NAME SUFFIX COLUMN
    row() {
        # shellcheck disable=SC2086
        {
            a=$(col "$2" "$3" $as) b=$(col "$2" "$3" $bs)
            printf '%-40s %-26s %-26s %s\n' "$1" "$(spread $a)" "$(spread $b)" \
                "$(calc "$(median $a) / ($(median $b) == 0 ? 1 : $(median $b))" %.3f)"
        }
    }
    row "seconds per round, rounds 2-$ROUNDS (wall)" stages 1
    row "seconds of round 1 (wall)" stages 2
    row "seconds to $N connected (wall)" fig 3
    row "aggregator CPU seconds, the job" fig 7
    row "the $N clients' CPU seconds, the job" fig 8
    row "job's CPU seconds a round, rounds 1-$((ROUNDS - 1))" fig 9
    row "client peak RSS MiB, largest" fig 4
    row "client peak RSS MiB, mean" fig 5
    row "aggregator peak RSS MiB" fig 6
    row "final test accuracy" fig 2
    echo "rounds 2-$ROUNDS, where the time went (ms, median over the rounds; bench/bench_consortium.sh's stages()):"
    for k in 3:out 4:first 5:work 6:slowest 7:tail 8:gap; do
        SPREAD_FMT=%.0f row "  ${k#*:}" stages "${k%%:*}"
    done
    echo "round 1, where its time went (ms):"
    for k in 9:out 10:first 11:slowest 12:tail; do
        SPREAD_FMT=%.0f row "  ${k#*:}" stages "${k%%:*}"
    done
    exit 0
fi

# ---- the runs: training alone before each job, and after the last ----
staggered=$(staggered_s staggered)
togethers=""
: >"$TMP/late"
for j in $(seq 1 "$JOBS"); do
    togethers="$togethers $(together_runs "b$j")"
    job "$j"
    [ "$HTTP_RUNS" != 1 ] || job "h$j" http
done
togethers="$togethers $(together_runs after)"

# ---- the jobs' figures: the median of the jobs' seconds per round (and
# the CPU figures of the job nearest it), the worst job's accuracy,
# connect time and RSS ----
# fig K: column K of every job's figures, in job order
fig() { col fig "$1" $(seq 1 "$JOBS"); }
jobs_all=$(seq 1 "$JOBS")
# shellcheck disable=SC2086
per_rounds=$(col stages 1 $jobs_all)
# shellcheck disable=SC2046,SC2086
{
    per_round=$(calc "$(median $per_rounds)")
    acc=$(lowest $(fig 2)) connect=$(highest $(fig 3)) cli_max=$(highest $(fig 4))
    cli_mean=$(calc "($(fig 5 | sed 's/ *$//; s/ / + /g')) / $JOBS" %.1f) agg_mib=$(highest $(fig 6))
    round1s=$(col stages 2 $jobs_all) connects=$(fig 3)
}
# the job nearest the median: its CPU figures and round times
mj=$(for j in $(seq 1 "$JOBS"); do
    awk -v j="$j" -v m="$per_round" '{ d = $1 - m; print (d < 0 ? -d : d), j }' "$TMP/job$j.stages"
done | sort -n | head -n 1 | cut -d' ' -f2)
# shellcheck disable=SC2046
set -- $(cat "$TMP/job$mj.fig")
agg_cpu=$7 cli_cpu=$8 cpu_rounds=$9 cores_busy=${10} t_job=${11}
rounds_line=$(cat "$TMP/job$mj.rounds")

# ---- training alone: the denominator, and two other views ----
# shellcheck disable=SC2086
set -- $togethers
together=$(median "$@")
together_lo=$(lowest "$@") together_hi=$(highest "$@")
# each job against the training-alone runs just before it (interleaved
# pairs): the ratio's own spread
ratios=$(for j in $(seq 1 "$JOBS"); do
    # shellcheck disable=SC2086
    set -- $togethers
    k=$(((j - 1) * TOGETHER_RUNS))
    shift "$k"
    b=$(for r in $(seq 1 "$TOGETHER_RUNS"); do eval "printf '%s ' \"\${$r}\""; done)
    # shellcheck disable=SC2086
    calc "$(awk '{ print $1 }' "$TMP/job$j.stages") / $(median $b)" '%.3f '
done)
packed=0 serial=0
for i in $(seq 0 $((N - 1))); do
    # shellcheck disable=SC2086
    "$FEDNODE" train $TRAIN --warm-up --shard "$i/$N" --threads 1 >"$TMP/t1.$i" 2>/dev/null
    # shellcheck disable=SC2086
    "$FEDNODE" train $TRAIN --warm-up --shard "$i/$N" --threads "$CLIENT_THREADS" >"$TMP/t0.$i" 2>/dev/null
    packed=$(calc "$packed + $(epoch_s "$TMP/t1.$i") / 2" %.4f)
    serial=$(calc "$serial + $(epoch_s "$TMP/t0.$i")" %.4f)
done

# ---- report ----
verdict() { [ "$(calc "$1" %d)" -eq 1 ] && echo "met" || echo "MISSED"; }
# wverdict COND: verdict on a wall-clock figure, marked when the machine was
# busier than its cores before the run (other work then sets the figure)
busy=$(echo "$load_before" | awk -v n="$(nproc)" '{ print ($1 > n) }')
wverdict() { echo "$(verdict "$1")$([ "$busy" = 0 ] || echo " (under load)")"; }
echo "bench_consortium: 1 aggregator + $N clients on 127.0.0.1, iid shards of Fashion-MNIST,"
echo "  mlp:256,128, 1 local epoch of SGD (momentum 0) lr 0.05 batch 64, $ROUNDS rounds,"
echo "  $(nproc) cores (load average before: $load_before); clients at --threads $CLIENT_THREADS;"
echo "  Fashion-MNIST read from the inflated copies an earlier start keeps; the job $JOBS times,"
echo "  each figure the median of the jobs (lowest-highest), the targets' verdicts on the median;"
echo "  wall-clock figures move with the machine's load: rerun on a quiet machine before quoting them."
echo "  Flower: its harness is not in this repository (nor installable here); its column is"
echo "  issue 41's figures (Flower 1.6, the same job, this host), not rerun"
printf '%-36s %-22s %10s %12s  %s\n' "figure" "measured" "target" "Flower 1.6" "verdict"
printf '%-36s %-22s %10s %12s  %s\n' "final test accuracy (lowest)" "$acc" ">= 0.8157" "" \
    "$(verdict "$acc >= 0.8157")"
# shellcheck disable=SC2086
printf '%-36s %-22s %10s %12s  %s\n' "seconds per round, rounds 2-$ROUNDS" "$(spread $per_rounds)" \
    "<= 0.50" "0.83-1.14" "$(wverdict "$per_round <= 0.50")"
# shellcheck disable=SC2086
printf '%-36s %-22s %10s %12s  %s\n' "  / training alone, warm" "$(spread $ratios)" "<= 1.10" "" \
    "$(wverdict "$(median $ratios) <= 1.10")"
# shellcheck disable=SC2086
printf '%-36s %-22s %10s %12s  %s\n' "seconds of round 1" "$(spread $round1s)" \
    "<= rounds 2-$ROUNDS" "" "$(wverdict "$(median $round1s) <= $per_round")"
# shellcheck disable=SC2086
printf '%-36s %-22s %10s %12s  %s\n' "seconds to $N connected" "$(spread $connects)" "<= 0.5" \
    "13.9-18.8" "$(wverdict "$(median $connects) <= 0.5")"
printf '%-36s %-22s %10s %12s  %s\n' "peak RSS of a client, MiB (largest)" "$cli_max" \
    "<= 64" "334" "$(verdict "$cli_max <= 64")"
printf '%-36s %-22s\n' "  (mean of the $N clients)" "$cli_mean"
printf '%-36s %-22s %10s %12s\n' "peak RSS of the aggregator, MiB" "$agg_mib" "" "431-443"
echo "training alone per round (the $N shards' one epoch, no loading or evaluation):"
printf '  together  %.3f s  (all %d loaded and warm (--warm-up), from one instant until the last\n' "$together" "$N"
printf '                     ended: the denominator; median of %d runs, %s to %s, %d late;\n' \
    $(((JOBS + 1) * TOGETHER_RUNS)) "$together_lo" "$together_hi" "$(wc -l <"$TMP/late")"
# shellcheck disable=SC2086,SC2116
printf '                     %s before each job and after the last: %s)\n' "$TOGETHER_RUNS" "$(echo $togethers)"
printf '  staggered %.3f s  (all %d started one by one, cold, the slowest epoch: the denominator until 2026-11-24)\n' "$staggered" "$N"
printf '  packed    %.3f s  (one at a time, warm, 1 thread, sum / 2 cores: no contention, a floor)\n' "$packed"
printf '  serial    %.3f s  (one at a time, warm, the daemons'"'"' threads, sum)\n' "$serial"
printf '  rounds 2-%d: %s per round, %s x packed, %s x together\n' "$ROUNDS" "$per_round" \
    "$(calc "$per_round / $packed" %.2f)" "$(calc "$per_round / $together" %.2f)"
echo "rounds 2-$ROUNDS, where the time went (ms; each job's median over its rounds, then the jobs' median (lowest-highest)):"
# shellcheck disable=SC2046,SC2086
{
    printf '  %-8s %-22s %s\n' out "$(SPREAD_FMT=%.0f spread $(col stages 3 $jobs_all))" "round start to the last client's training start (MODEL out, decoded, job scheduled)"
    printf '  %-8s %-22s %s\n' first "$(SPREAD_FMT=%.0f spread $(col stages 4 $jobs_all))" "round start to the first client's training start"
    printf '  %-8s %-22s %s\n' work "$(SPREAD_FMT=%.0f spread $(col stages 5 $jobs_all))" "a client's training start to its delta sent (median client; training alone together: $(calc "$together * 1000" %.0f) for the slowest)"
    printf '  %-8s %-22s %s\n' slowest "$(SPREAD_FMT=%.0f spread $(col stages 6 $jobs_all))" "the same, the round's slowest client"
    printf '  %-8s %-22s %s\n' tail "$(SPREAD_FMT=%.0f spread $(col stages 7 $jobs_all))" "the last delta sent to the round merged and committed"
    printf '  %-8s %-22s %s\n' gap "$(SPREAD_FMT=%.0f spread $(col stages 8 $jobs_all))" "the commit to the next round's start (evaluation, gather timer, sampling)"
    echo "round 1, where its time went (ms; the jobs' median (lowest-highest)):"
    for k in 9:out 10:first 11:slowest 12:tail; do
        printf '  %-8s %s\n' "${k#*:}" "$(SPREAD_FMT=%.0f spread $(col stages "${k%%:*}" $jobs_all))"
    done
}
echo "job $mj (the nearest the median), each round from its row, start to merge + gap to the next start (s):"
echo "  $rounds_line"
printf 'CPU seconds over job %s'"'"'s %.2f s: aggregator %s, the %d clients %s (%s of %d cores busy)\n' \
    "$mj" "$t_job" "$agg_cpu" "$N" "$cli_cpu" \
    "$(calc "($agg_cpu + $cli_cpu) / $t_job" %.2f)" "$(nproc)"
printf 'during rounds 1-%d: %s of %d cores busy with the job; CPU seconds per round %s, %s x the training'"'"'s (2 x packed)\n' \
    $((ROUNDS - 1)) "$cores_busy" "$(nproc)" "$cpu_rounds" "$(calc "$cpu_rounds / (2 * $packed)" %.2f)"
if [ "$HTTP_RUNS" = 1 ]; then
    # shellcheck disable=SC2046,SC2086
    {
        h_rounds=$(col stages 1 $(seq -f 'h%g' 1 "$JOBS"))
        h_med=$(calc "$(median $h_rounds)")
        spread=$(calc "$(highest $per_rounds) - $(lowest $per_rounds)")
        h_spread=$(calc "$(highest $h_rounds) - $(lowest $h_rounds)")
        diff=$(calc "$h_med - $per_round")
        h_agg=$(median $(for j in $(seq 1 "$JOBS"); do cut -d' ' -f1 "$TMP/jobh$j.http"; done))
        h_cli=$(median $(for j in $(seq 1 "$JOBS"); do cut -d' ' -f2 "$TMP/jobh$j.http"; done))
        h_req=$(median $(for j in $(seq 1 "$JOBS"); do cut -d' ' -f3 "$TMP/jobh$j.http"; done))
    }
    echo "with --http on all $((N + 1)) nodes, each scraped every second (BENCH_HTTP=0: off), each such job right after one without:"
    printf '  seconds per round, median  %s with, %s without: %s (the runs'"'"' own spread: %s with, %s without)  %s\n' \
        "$h_med" "$per_round" "$diff" "$h_spread" "$spread" \
        "$(verdict "($diff < 0 ? 0 - ($diff) : $diff) <= ($spread > $h_spread ? $spread : $h_spread)")"
    printf '  %-34s %s\n' "(each job's, with --http)" "$h_rounds"
    printf '  HTTP threads'"'"' CPU seconds a job (median): aggregator %s, the %d clients together %s; %.0f requests a job\n' \
        "$h_agg" "$N" "$h_cli" "$h_req"
fi
