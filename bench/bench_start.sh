#!/bin/sh
# bench_start.sh - what a client's start costs, measured in CPU time, page
# faults and memory (which the machine's load moves far less than wall
# time): an aggregator waiting for two clients (so no round starts), then a
# client (Fashion-MNIST shard 0/10, --threads 1, its data cache warm)
# started BENCH_RUNS (7) times; each run is read once it sits connected and
# idle, 1 s after its database appeared: minor page faults, threads,
# resident and peak resident memory; then it is stopped (SIGTERM) and its
# exit line gives its CPU time from start to stop (getrusage: every thread,
# those before fednode's restart too; the stop costs a few ms). Prints each
# figure's median (lowest-highest).
# With BENCH_BASE=<commit or fednode binary> (as bench_consortium.sh) the
# runs alternate this build and that one, A B A B. Asserts nothing.
set -u
FEDNODE=${FEDNODE:-./fednode}
DATA=${FEDNODE_DATA:-/usr/share/datasets/fashion-mnist}
RUNS=${BENCH_RUNS:-7}
if [ ! -x "$FEDNODE" ]; then echo "bench_start: skipped: no $FEDNODE (run make)"; exit 0; fi
if [ ! -e "$DATA/train-images-idx3-ubyte.gz" ] && [ ! -e "$DATA/train-images-idx3-ubyte" ]; then
    echo "bench_start: skipped: no Fashion-MNIST in $DATA"; exit 0
fi
if [ ! -r /proc/self/schedstat ]; then echo "bench_start: skipped: no /proc/PID/schedstat"; exit 0; fi
TMP=$(mktemp -d "${FEDNODE_BENCH_DIR:-/tmp}/fed_bench_start_XXXXXX") || exit 1
PIDS=""
trap 'for p in $PIDS; do kill "$p" 2>/dev/null; done; rm -rf "$TMP"' EXIT
trap 'exit 1' INT TERM

# shellcheck source=bench/lib_bench.sh
. "$(dirname "$0")/lib_bench.sh"
B=""
if [ -n "${BENCH_BASE:-}" ]; then
    base_fednode bench_start
    B=$BASE_BIN
fi

bench_keys bench_start aggregator c0 c1
warm_cache bench_start
"$FEDNODE" run --role aggregator --keys "$TMP/aggregator" --allow "$TMP/allow.txt" \
    --db "$TMP/agg.db" --listen tcp://127.0.0.1:0 --port-file "$TMP/port" --data "$DATA" \
    --model mlp:256,128 --rounds 1 --min-clients 2 --wait-clients 2 2>"$TMP/agg.log" &
PIDS=$!
i=0
while [ ! -s "$TMP/port" ]; do
    i=$((i + 1))
    [ $i -lt 600 ] || { echo "bench_start: the aggregator wrote no port file"; exit 1; }
    sleep 0.05
done
PORT=$(cat "$TMP/port")

# one TAG BIN: a client's start, its figures appended to $TMP/TAG
one() {
    rm -f "$TMP/c0.db"*
    "$2" run --role client --keys "$TMP/c0" --allow "$TMP/allow.txt" --db "$TMP/c0.db" \
        --aggregator "tcp://127.0.0.1:$PORT" --data "$DATA" --shard 0/10 --threads 1 \
        2>"$TMP/c0.log" &
    p=$!
    i=0
    while [ ! -e "$TMP/c0.db" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
    sleep 1
    kill -0 "$p" 2>/dev/null || { echo "bench_start: the client ended"; cat "$TMP/c0.log"; exit 1; }
    {
        awk '{ printf "%s ", $10 }' "/proc/$p/stat"
        awk '/^Threads/ { printf "%s ", $2 }' "/proc/$p/status"
        awk '/^VmRSS/ { r = $2 } /^VmHWM/ { h = $2 } END { printf "%.1f %.1f ", r / 1024, h / 1024 }' \
            "/proc/$p/status"
    } >>"$TMP/$1"
    kill "$p"
    wait "$p" 2>/dev/null
    # its CPU from the exit line (getrusage: every thread, those of the
    # image before a restart too)
    awk '/daemon: done: peak RSS/ { for (i = 1; i < NF; i++) if ($i == "CPU") c = $(i + 1) }
         END { printf "%.1f\n", c * 1000 }' "$TMP/c0.log" >>"$TMP/$1"
}
for _ in $(seq 1 "$RUNS"); do
    one A "$FEDNODE"
    [ -z "$B" ] || one B "$B"
done

# spread TAG K FMT: column K's median (lowest-highest), each in FMT
spread() {
    awk -v k="$2" '{ print $k }' "$TMP/$1" | sort -n | awk -v f="$3" '{ v[NR] = $1 }
        END { printf f " (" f "-" f ")", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2, v[1], v[NR] }'
}
echo "bench_start: a client's start to connected and idle (shard 0/10 of Fashion-MNIST, mlp:256,128,"
echo "  --threads 1, data cache warm), $RUNS runs${B:+ each, this build (A) and $BENCH_BASE (B) alternating};"
echo "  $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); each figure: median (lowest-highest)"
printf '%-34s %-24s %s\n' "figure" "A${B:+ (this build)}" "${B:+B ($BENCH_BASE)}"
k=1
for f in "minor page faults:%.0f" "threads:%.0f" "RSS MiB:%.1f" "peak RSS MiB:%.1f" "CPU ms, start to stop:%.0f"; do
    printf '%-34s %-24s %s\n' "${f%:*}" "$(spread A $k "${f##*:}")" "$([ -z "$B" ] || spread B $k "${f##*:}")"
    k=$((k + 1))
done
