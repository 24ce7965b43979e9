#!/bin/sh
# bench_mpi_site.sh - `make bench`: a site's training step for mlp:256,128
# at a global batch of 128 with R = 1 and R = 2 processes under mpirun (one
# thread each, this host's cores), the gradients' sum's share of the step and
# the bytes a rank sends per step (build/bench/bench_mpi_site), and R = 2's
# speed-up over R = 1 from the same run. Without mpirun or an MPI build it
# says so and passes.
B=${BUILD:-build}
BIN=$B/bench/bench_mpi_site
if ! command -v mpirun >/dev/null 2>&1 || [ "$(cat "$B/have_mpi" 2>/dev/null)" != 1 ]; then
    echo "bench_mpi_site: skipped: no mpirun or fednode built without MPI"
    exit 0
fi
[ -x "$BIN" ] || { echo "bench_mpi_site: no $BIN (make bench builds it)"; exit 1; }
if [ "$(id -u)" -eq 0 ]; then
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    export OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM
fi
MPIRUN="mpirun --oversubscribe --host 127.0.0.1:64 --mca btl self,vader --bind-to none"
CORES=$(nproc)
OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export OMP_NUM_THREADS OPENBLAS_NUM_THREADS
r1=$($MPIRUN -np 1 "$BIN") || { echo "bench_mpi_site: R = 1 failed"; exit 1; }
r2=$($MPIRUN -np 2 "$BIN") || { echo "bench_mpi_site: R = 2 failed"; exit 1; }
echo "$r1"
echo "$r2"
s1=$(echo "$r1" | sed -n 's/.*step_ms=\([0-9.]*\).*/\1/p')
s2=$(echo "$r2" | sed -n 's/.*step_ms=\([0-9.]*\).*/\1/p')
awk -v a="$s1" -v b="$s2" 'BEGIN { printf "R = 2 vs R = 1: %.2fx the steps per second (%d cores here)\n", a / b, '"$CORES"' }'
