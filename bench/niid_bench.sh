#!/bin/sh
# niid_bench.sh - NIID-Bench's FMNIST table (Li, Diao, Chen, He, ICDE 2022,
# as Flower's baseline reproduces it) through fedsim, one cell a job: a
# cell is (split, algorithm, seed); each finished cell appends one line to
# the results file, and a cell already there is skipped, so the script is
# stopped and started again at will (a cell cut short is run again whole).
#
# The setting: 10 parties all taking part, 50 rounds, 10 local epochs,
# batch 64, SGD lr 0.01 momentum 0.9, weight decay 1e-5, FedProx mu 0.01,
# inputs scaled to [0, 1], SimpleCNN (examples/models/simplecnn.cfg); the
# figure is the best test accuracy over the rounds (and the last round's).
# One cell is 50 x 10 epochs x 60,000 samples: 15-40 minutes on the 2-core
# build host.
#
#   sh bench/niid_bench.sh            every cell not in the results yet
#   sh bench/niid_bench.sh --one      the next such cell only (one job)
#   sh bench/niid_bench.sh --list     the cells and whether each is done
#
# Environment: NIID_OUT (the results, default build/niid_bench.tsv),
# NIID_SPLITS (default "iid dir0.5 c2 c3"), NIID_ALGOS (default "fedavg
# scaffold fedprox fednova"), NIID_SEEDS (default "1"), FEDSIM (./fedsim);
# NIID_ROUNDS, NIID_EPOCHS and NIID_NODES shrink the setting for a smoke run
# (the line then says so). fedsim needs --weight-decay and --input-scale,
# which an older build given as FEDSIM (before a7abff7) lacks: the script
# then stops, or with NIID_WITHOUT=1 runs without them and marks each line
# "no-wd-scale".
set -u
FEDSIM=${FEDSIM:-./fedsim}
OUT=${NIID_OUT:-build/niid_bench.tsv}
SPLITS=${NIID_SPLITS:-"iid dir0.5 c2 c3"}
ALGOS=${NIID_ALGOS:-"fedavg scaffold fedprox fednova"}
SEEDS=${NIID_SEEDS:-1}
ROUNDS=${NIID_ROUNDS:-50}
EPOCHS=${NIID_EPOCHS:-10}
NODES=${NIID_NODES:-10}
MODEL=${NIID_MODEL:-examples/models/simplecnn.cfg}
mode=${1:-all}

if [ ! -x "$FEDSIM" ]; then echo "niid_bench: skipped: no $FEDSIM (run make fedsim)"; exit 77; fi
case $MODEL in */*) [ -f "$MODEL" ] || { echo "niid_bench: no model file $MODEL"; exit 2; } ;; esac

# What the published setting needs of fedsim that it may lack.
note=full
extra="--weight-decay 1e-5 --input-scale unit"
help=$("$FEDSIM" --help 2>&1)
for opt in --weight-decay --input-scale; do
    if ! printf '%s\n' "$help" | grep -q -- "^  $opt "; then
        if [ "${NIID_WITHOUT:-0}" != 1 ]; then
            echo "niid_bench: $FEDSIM has no $opt (builds before a7abff7 lack it); set" \
                 "NIID_WITHOUT=1 to run without --weight-decay and --input-scale"
            exit 2
        fi
        extra=""
        note=no-wd-scale
    fi
done
if [ "$ROUNDS" != 50 ] || [ "$EPOCHS" != 10 ] || [ "$NODES" != 10 ]; then
    note="$note,smoke:${NODES}x${ROUNDS}x${EPOCHS}"
fi

partition_of() {
    case $1 in
    iid) echo iid ;;
    dir0.5) echo niid-dirichlet:0.5 ;;
    c2) echo labels:2 ;;
    c3) echo labels:3 ;;
    *) echo "niid_bench: unknown split '$1' (iid, dir0.5, c2, c3)" >&2; return 1 ;;
    esac
}

strategy_of() {
    case $1 in
    fedavg) echo fedavg ;;
    scaffold) echo scaffold ;;
    fedprox) echo fedprox:0.01 ;;
    fednova) echo fednova ;;
    *) echo "niid_bench: unknown algorithm '$1' (fedavg, scaffold, fedprox, fednova)" >&2
       return 1 ;;
    esac
}

# Whether cell (split, algo, seed) has its line (in this setting).
done_cell() {
    [ -f "$OUT" ] && awk -F '\t' -v s="$1" -v a="$2" -v r="$3" -v n="$note" \
        '$1 == s && $2 == a && $3 == r && $9 == n { f = 1 } END { exit !f }' "$OUT"
}

run_cell() {
    split=$1 algo=$2 seed=$3
    part=$(partition_of "$split") || exit 2
    strat=$(strategy_of "$algo") || exit 2
    tmp=$(mktemp "${TMPDIR:-/tmp}/niid_bench.XXXXXX") || exit 1
    start=$(date +%s)
    echo "niid_bench: $split $algo seed $seed ($note): started $(date -u +%FT%TZ)"
    # shellcheck disable=SC2086 # $extra is two options or none
    if ! "$FEDSIM" --nodes "$NODES" --fraction 1 --min-clients "$NODES" --rounds "$ROUNDS" \
        --local-epochs "$EPOCHS" --batch 64 --optimizer sgd --lr 0.01 --momentum 0.9 \
        --model "$MODEL" --partition "$part" --strategy "$strat" --seed "$seed" \
        --deadline-ms 86400000 $extra --csv "$tmp" >"$tmp.log" 2>&1; then
        echo "niid_bench: $split $algo seed $seed failed; its log:"
        tail -n 20 "$tmp.log"
        rm -f "$tmp" "$tmp.log"
        return 1
    fi
    # the CSV: round, t_s, accuracy, ...; the best and the last accuracy
    best=$(awk -F , 'NR > 1 && $3 != "" { if ($3 > b) b = $3 } END { printf "%.4f", b }' "$tmp")
    last=$(awk -F , 'NR > 1 && $3 != "" { l = $3 } END { printf "%.4f", l }' "$tmp")
    rounds=$(awk -F , 'NR > 1 { n++ } END { print n + 0 }' "$tmp")
    secs=$(($(date +%s) - start))
    mkdir -p "$(dirname "$OUT")"
    [ -f "$OUT" ] || printf 'split\talgorithm\tseed\tbest\tlast\trounds\twall_s\tdate\tsetting\n' >"$OUT"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$split" "$algo" "$seed" "$best" "$last" \
        "$rounds" "$secs" "$(date -u +%F)" "$note" >>"$OUT"
    echo "niid_bench: $split $algo seed $seed: best $best, last $last ($secs s)"
    rm -f "$tmp" "$tmp.log"
}

for seed in $SEEDS; do
    for split in $SPLITS; do
        for algo in $ALGOS; do
            if done_cell "$split" "$algo" "$seed"; then
                [ "$mode" = --list ] && echo "done     $split $algo seed $seed"
                continue
            fi
            case $mode in
            --list) echo "to do    $split $algo seed $seed" ;;
            --one) run_cell "$split" "$algo" "$seed"; exit $? ;;
            *) run_cell "$split" "$algo" "$seed" || exit 1 ;;
            esac
        done
    done
done
[ "$mode" = --list ] || echo "niid_bench: every cell is in $OUT"
