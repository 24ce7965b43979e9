# lib_bench.sh - what the process benchmarks share: their nodes' keys and
# allow-list, the warm data cache, and BENCH_BASE, the build they compare
# with. Each function takes the script's NAME (its messages' prefix) and
# exits 1 when it cannot do its part; $FEDNODE, $DATA and $TMP are the
# script's. Sourced, never run (make bench runs bench_*.sh).

# bench_keys NAME MEMBER...: unsealed keys $TMP/MEMBER and $TMP/allow.txt
bench_keys() {
    b=$1
    shift
    : >"$TMP/allow.txt"
    for m in "$@"; do
        env -u FEDNODE_PASSPHRASE "$FEDNODE" keygen --out "$TMP/$m" >/dev/null 2>&1 || {
            echo "$b: keygen failed"; exit 1; }
        echo "$m $("$FEDNODE" pubkey "$TMP/$m")" >>"$TMP/allow.txt"
    done
}

# warm_cache NAME: the data inflated once, as any earlier start on this
# machine leaves it (fed_data_open keeps gzip IDX files inflated in
# $FEDNODE_CACHE)
warm_cache() {
    "$FEDNODE" train --data "$DATA" --model logreg --epochs 1 --shard 0/1000 --threads 1 \
        >/dev/null 2>&1 || { echo "$1: fednode train failed"; exit 1; }
}

# base_fednode NAME: BASE_BIN, the fednode of BENCH_BASE: a fednode binary
# as it is, or a commit of this repository exported (git archive) into
# $TMP/base and built there (make fednode, BENCH_BASE_MAKE_JOBS jobs, 2)
# shellcheck disable=SC2034
base_fednode() {
    if [ -x "$BENCH_BASE" ] && [ -f "$BENCH_BASE" ]; then
        BASE_BIN=$BENCH_BASE
        return 0
    fi
    top=$(git -C "$(dirname "$0")" rev-parse --show-toplevel) || exit 1
    commit=$(git -C "$top" rev-parse --verify "$BENCH_BASE^{commit}") || {
        echo "$1: BENCH_BASE: '$BENCH_BASE' is neither a commit nor a fednode"; exit 1; }
    mkdir "$TMP/base" || exit 1
    git -C "$top" archive "$commit" | tar -x -C "$TMP/base" || exit 1
    echo "$1: building $BENCH_BASE ($commit) in $TMP/base"
    make -C "$TMP/base" -s -j"${BENCH_BASE_MAKE_JOBS:-2}" fednode >"$TMP/base.log" 2>&1 || {
        echo "$1: building $BENCH_BASE failed:"; tail -n 20 "$TMP/base.log"; exit 1; }
    BASE_BIN=$TMP/base/fednode
}
