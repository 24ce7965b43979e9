#!/bin/sh
# docs-figures.sh - reruns the commands that print the figures quoted in
# README.md and docs/*.md (`make docs-figures`), so a page's figure can be
# checked against what this build prints here. Each figure is one named
# command; its output, the date and the machine go to build/docs-figures/NAME.txt
# and the lines the pages quote are printed. Run from the source root after `make`.
#
#   sh scripts/docs-figures.sh              the quick set (a few minutes on 2 cores)
#   sh scripts/docs-figures.sh NAME...      only these (see `list`)
#   sh scripts/docs-figures.sh long         the quick set, then make test-long and make bench
set -u
FEDNODE=${FEDNODE:-./fednode}
FEDSIM=${FEDSIM:-./fedsim}
OUT=${DOCS_FIGURES_OUT:-build/docs-figures}
QUICK="demo noniid privacy consortium export"
FEDNODE_NO_REEXEC=1; export FEDNODE_NO_REEXEC

machine() {
    cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1)
    mem=$(awk '/^MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo 2>/dev/null)
    load=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)
    echo "$(nproc) cores ($cpu), $mem, $(uname -sm), load average $load"
}

# run NAME COMMAND...: the command's output into $OUT/NAME.txt after a header
run() {
    name=$1; shift
    f=$OUT/$name.txt
    {
        echo "# figure: $name"
        echo "# command: $*"
        echo "# date: $(date -u '+%Y-%m-%d %H:%M UTC')"
        echo "# machine: $(machine)"
    } >"$f"
    start=$(date +%s)
    sh -c "$*" >>"$f" 2>&1
    rc=$?
    echo "# exit $rc after $(( $(date +%s) - start )) s (wall clock)" >>"$f"
    echo "== $name: $f (exit $rc)"
    return 0
}

# last ROUND row of a fedsim CSV ($1) for rounds $2...: "round accuracy"
csv_rounds() {
    file=$1; shift
    for r in "$@"; do awk -F, -v r="$r" '$1 == r { print "round " r ": " $3 }' "$file"; done
}

fig_demo() {
    run demo "DEMO_OUT=$OUT sh scripts/demo.sh"
    tail -n 4 "$OUT/demo.txt"
    echo "final rows (round,t_s,accuracy,spread,bytes,...):"
    tail -n 1 "$OUT/demo-fedavg.csv"; tail -n 1 "$OUT/demo-gossip.csv"
}

fig_noniid() {
    R="--nodes 100 --fraction 0.1 --partition dirichlet:0.1 --model mlp:256,128 --rounds 50"
    run noniid "$FEDSIM $R --strategy fedavg --csv $OUT/fedavg.csv &&
        $FEDSIM $R --strategy fedprox:0.01 --csv $OUT/fedprox.csv &&
        $FEDSIM $R --strategy fedadam --csv $OUT/fedadam.csv --name FedAdam \
            --compare FedAvg=$OUT/fedavg.csv,FedProx=$OUT/fedprox.csv --svg $OUT/noniid.svg"
    for s in fedavg fedprox fedadam; do
        echo "$s:"; csv_rounds "$OUT/$s.csv" 10 25 50
    done
}

fig_privacy() {
    run privacy "$FEDNODE privacy --q 0.04 --sigma 1.5 --steps 2250 --delta 1e-5 &&
        $FEDNODE privacy --q 0.04 --target-epsilon 8 --steps 2250 --delta 1e-5"
    grep -v '^#' "$OUT/privacy.txt"
}

fig_consortium() {
    d=$OUT/consortium
    rm -rf "$d"; mkdir -p "$d"; cp examples/consortium/*.ini examples/consortium/make-keys.sh "$d/"
    fed=$(cd "$(dirname "$FEDNODE")" && pwd)/$(basename "$FEDNODE")
    run consortium "cd $d && FEDNODE=$fed sh make-keys.sh >/dev/null &&
        { $fed run --config aggregator.ini 2>agg.log &
          for h in a b c; do $fed run --config hospital-\$h.ini 2>\$h.log & done;
          wait; } && $fed status --db aggregator.db"
    awk '$1 == 5 && $2 ~ /^20/ { print "round 5: accuracy " $6 }' "$OUT/consortium.txt"
    grep '^# exit' "$OUT/consortium.txt"
}

fig_export() {
    run export "sh tests/test_export_torch.sh"
    grep -E '^(ok|FAIL|skipped)' "$OUT/export.txt"
}

fig_long() {
    run test-long "make test-long"
    run bench "make bench"
    echo "see $OUT/test-long.txt and $OUT/bench.txt"
}

mkdir -p "$OUT" || exit 1
[ -x "$FEDNODE" ] && [ -x "$FEDSIM" ] || { echo "docs-figures: run make first (no $FEDNODE or $FEDSIM)"; exit 1; }
[ $# -gt 0 ] || set -- $QUICK
[ "$*" = long ] && set -- $QUICK long
for name in "$@"; do
    case $name in
    list) echo "$QUICK long"; exit 0 ;;
    demo | noniid | privacy | consortium | export | long) "fig_$name" ;;
    *) echo "docs-figures: no figure '$name' (one of: $QUICK long)"; exit 2 ;;
    esac
done
