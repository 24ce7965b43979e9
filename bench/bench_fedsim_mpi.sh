#!/bin/sh
# bench_fedsim_mpi.sh - fedsim across ranks (issue 26): 1,000 logreg peers
# on random:3 (10 evaluate, 3 rounds) as one plain process, then under
# `mpirun -np 1` and `-np 2` on this host: fedsim's closing line (wall time
# to the first round, then per round) and each rank's peak RSS, the ratios
# against the plain run measured here, and from a 100-peer run beside it
# the memory one more peer costs, projected to 10,000 and 100,000 peers
# (one host, and per rank at 5 and 50 ranks). On two cores R = 2 cannot
# show more than 2x in time; the memory per rank is the figure. Asserts
# nothing; skips without mpirun or an MPI build.
set -u
FEDSIM=${FEDSIM:-./fedsim}
BUILD=${BUILD:-build}
if [ ! -x "$FEDSIM" ]; then echo "bench_fedsim_mpi: skipped: no $FEDSIM (run make)"; exit 0; fi
if ! command -v mpirun >/dev/null 2>&1 || [ "$(cat "$BUILD/have_mpi" 2>/dev/null)" != 1 ]; then
    echo "bench_fedsim_mpi: skipped: no mpirun or a build without MPI"; exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    export OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM
fi
MPIRUN="mpirun --oversubscribe --host 127.0.0.1:64 --mca btl self,vader"
TMP=$(mktemp -d) || exit 1
trap 'rm -rf "$TMP"' EXIT
S="--role peer --topology random:3 --model logreg --rounds 3 --eval-peers 10"

# run NAME [mpirun -np R] fedsim ...: the output in $TMP/NAME
run() {
    name=$1; shift
    "$@" >"$TMP/$name" 2>/dev/null || echo "bench_fedsim_mpi: $name failed"
}
per_round() { sed -n 's/.*then \([0-9.]*\) s a round.*/\1/p' "$TMP/$1"; }
rss() { sed -n 's/.*peak RSS \([0-9.]*\) MiB$/\1/p' "$TMP/$1" | head -n 1; }
rank_rss() { sed -n "s/^rank $2 of [0-9]*: peak RSS \([0-9.]*\) MiB/\1/p" "$TMP/$1"; }

echo "bench_fedsim_mpi: $(nproc) cores; fedsim $S"
run p100 "$FEDSIM" --nodes 100 $S
run plain "$FEDSIM" --nodes 1000 $S
run r1 $MPIRUN -np 1 "$FEDSIM" --nodes 1000 $S
run r2 $MPIRUN -np 2 "$FEDSIM" --nodes 1000 $S
for n in plain r1 r2; do
    printf '%-6s %s\n' "$n:" "$(grep '^wall' "$TMP/$n")"
    grep '^rank' "$TMP/$n" | sed 's/^/         /'
done
for n in r1 r2; do
    [ "$(grep sha256 "$TMP/plain")" = "$(grep sha256 "$TMP/$n")" ] &&
        echo "$n: the same final hash as plain" || echo "$n: hash differs from plain"
done
awk -v p="$(per_round plain)" -v a="$(per_round r1)" -v b="$(per_round r2)" \
    -v m="$(rss plain)" -v m0="$(rank_rss r2 0)" -v m1="$(rank_rss r2 1)" -v s="$(rss p100)" '
BEGIN {
    if (p > 0 && a > 0 && b > 0)
        printf "per round: plain %.3f s, R=1 %.3f s (%.2fx), R=2 %.3f s (%.2fx the plain speed)\n",
               p, a, p / a, b, p / b
    if (m > 0 && m0 > 0 && m1 > 0)
        printf "peak RSS: plain %.0f MiB; R=2 rank 0 %.0f MiB, rank 1 %.0f MiB (%.2f and %.2f of plain)\n",
               m, m0, m1, m0 / m, m1 / m
    if (m > s && s > 0) {
        node = (m - s) / 900; fixed = m - 1000 * node
        printf "a peer costs %.2f MiB (1,000 peers %.0f MiB, 100 peers %.0f MiB); fixed %.0f MiB\n",
               node, m, s, fixed
        printf "projected: 10,000 peers %.1f GiB on one host, %.1f GiB a rank on 5 ranks\n",
               (fixed + 10000 * node) / 1024, (fixed + 2000 * node) / 1024
        printf "projected: 100,000 peers %.1f GiB on one host, %.1f GiB a rank on 50 ranks\n",
               (fixed + 100000 * node) / 1024, (fixed + 2000 * node) / 1024
    }
}'
