#!/bin/sh
# bench_pipeline.sh - pipeline stages (issue 39): `fednode train` of a
# GEMM-heavy MLP (mlp:1024,1024,1024,1024, 4.0 M parameters) on 2,000
# Fashion-MNIST samples, batch 64, one thread a rank, --no-eval: one process
# (M = 1, and M micro-batches in GPipe's order) against `mpirun -np 2
# --pipeline-stages 2` at M = 2, 4, 8, each run REPS times interleaved. Per
# configuration: the step time (training seconds / steps, median and
# spread); at S = 2 each stage's share of its training time spent in the
# pipe (waiting for its neighbour or moving bytes: the measured bubble)
# beside GPipe's (S - 1) / (M + S - 1), and the bytes a stage sends a step.
# On this 2-core host the two stages take a core each, so S = 2 cannot beat
# one process by more than 2x and pays the bubble and the second forward;
# docs/performance.md reads the figures for more cores and hosts. Asserts
# nothing; skips without mpirun, an MPI build or the data.
set -u
FEDNODE=${FEDNODE:-./fednode}
BUILD=${BUILD:-build}
REPS=${REPS:-3}
DATA=${FEDNODE_DATA:-/usr/share/datasets/fashion-mnist}
if [ ! -x "$FEDNODE" ]; then echo "bench_pipeline: skipped: no $FEDNODE (run make)"; exit 0; fi
if ! command -v mpirun >/dev/null 2>&1 || [ "$(cat "$BUILD/have_mpi" 2>/dev/null)" != 1 ]; then
    echo "bench_pipeline: skipped: no mpirun or a build without MPI"; exit 0
fi
if [ ! -e "$DATA/train-images-idx3-ubyte.gz" ] && [ ! -e "$DATA/train-images-idx3-ubyte" ]; then
    echo "bench_pipeline: skipped: no Fashion-MNIST in $DATA"; exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    export OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM
fi
FEDNODE_LOG=warn
export FEDNODE_LOG
MPIRUN="mpirun --oversubscribe --host 127.0.0.1:64 --mca btl self,vader"
TMP=$(mktemp -d) || exit 1
trap 'rm -rf "$TMP"' EXIT
A="--data fashion-mnist --model mlp:1024,1024,1024,1024 --shard 0/30 --batch 64 --epochs 1 \
--threads 1 --optimizer sgd --lr 0.05 --no-eval"

# run NAME REP ARGS...: fednode train (or mpirun -np 2 with S = 2), the
# output in $TMP/NAME.REP
run() {
    n=$1 r=$2; shift 2
    # shellcheck disable=SC2086
    case $n in
    s2*) $MPIRUN -np 2 "$FEDNODE" train $A "$@" >"$TMP/$n.$r" 2>&1 ;;
    *) "$FEDNODE" train $A "$@" >"$TMP/$n.$r" 2>&1 ;;
    esac || echo "bench_pipeline: $n failed"
}
# stime NAME R: milliseconds a step of 64, from the epoch's samples/s
stime() { sed -n 's/^epoch.*samples\/s \([0-9]*\).*/\1/p' "$TMP/$1.$2" | awk '{ if ($1 > 0) printf "%.2f", 64000 / $1 }'; }
# median of the numbers on stdin, and the spread max - min
med() { sort -n | awk '{ v[NR] = $1 } END { if (NR) printf "%.2f ms (spread %.2f)", v[int((NR + 1) / 2)], v[NR] - v[1] }'; }

echo "bench_pipeline: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); fednode train $A"
for r in $(seq 1 "$REPS"); do
    run one "$r"
    run ref4 "$r" --micro-batches 4
    for M in 2 4 8; do run "s2m$M" "$r" --pipeline-stages 2 --micro-batches "$M"; done
done
printf "%-34s %s\n" "one process, M = 1" "$(for r in $(seq 1 "$REPS"); do stime one "$r"; echo; done | med)"
printf "%-34s %s\n" "one process, M = 4 (GPipe order)" "$(for r in $(seq 1 "$REPS"); do stime ref4 "$r"; echo; done | med)"
for M in 2 4 8; do
    printf "%-34s %s\n" "S = 2, M = $M (2 ranks)" "$(for r in $(seq 1 "$REPS"); do stime "s2m$M" "$r"; echo; done | med)"
    for st in 0 1; do
        pct=$(for r in $(seq 1 "$REPS"); do
            sed -n "s/^# rank $st: stage $st: in the pipe .* training (\([0-9.]*\)%).*/\1/p" "$TMP/s2m$M.$r"
        done | sort -n | awk '{ v[NR] = $1 } END { if (NR) printf "%.1f%%", v[int((NR + 1) / 2)] }')
        bytes=$(sed -n "s/^# rank $st: stage $st: .*, \([0-9]*\) bytes sent a step.*/\1/p" "$TMP/s2m$M.1")
        printf "    stage %d: in the pipe %s of its training (GPipe's bubble (S-1)/(M+S-1) = %.1f%%), %s bytes sent a step\n" \
            "$st" "$pct" "$(awk -v m="$M" 'BEGIN { print 100 / (m + 1) }')" "$bytes"
    done
done
