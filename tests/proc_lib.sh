# proc_lib.sh - what the process tests (tests/test_*.sh) share: the skip
# checks, a temporary directory and the processes started, removed and
# killed on exit, and small helpers to start fednode, wait with a bound, and
# read a node's database through `fednode status --json`. Sourced, never run.
set -u
FEDNODE=${FEDNODE:-./fednode}
DATA=${FEDNODE_DATA:-/usr/share/datasets/fashion-mnist}
if [ ! -x "$FEDNODE" ]; then echo "skipped: no $FEDNODE (run make)"; exit 77; fi
if [ ! -e "$DATA/train-images-idx3-ubyte.gz" ] && [ ! -e "$DATA/train-images-idx3-ubyte" ]; then
    echo "skipped: no Fashion-MNIST in $DATA"; exit 77
fi
TMP=$(mktemp -d) || exit 1
PIDS=""
cleanup() {
    for p in $PIDS; do kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
    if [ -n "${KEEP:-}" ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
FEDNODE_PASSPHRASE=   # the keys made here are not sealed
FEDNODE_LOG=info      # the checks read info lines
export FEDNODE_PASSPHRASE FEDNODE_LOG
T0=$(date +%s)

fail() {
    echo "FAIL: $1"
    for f in "$TMP"/*.log "$TMP"/*/*.log; do
        [ -f "$f" ] || continue
        echo "  -- ${f#"$TMP"/} (last lines)"
        tail -n 12 "$f" | sed 's/^/  | /'
    done
    exit 1
}
ok() { echo "ok: $1"; }

# start NAME ARGS...: fednode run ARGS in the background, output in
# $TMP/NAME.log, its pid in $TMP/NAME.pid (and in PIDS, for cleanup)
start() {
    name=$1; shift
    "$FEDNODE" run "$@" >"$TMP/$name.log" 2>&1 &
    echo $! >"$TMP/$name.pid"
    PIDS="$PIDS $!"
}
pid() { cat "$TMP/$1.pid"; }
alive() { kill -0 "$(pid "$1")" 2>/dev/null; }
# wait_for DESC SECONDS CMD...: until CMD succeeds, polling every 0.1 s
wait_for() {
    d=$1 n=$(($2 * 10)); shift 2
    while [ "$n" -gt 0 ]; do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.1; n=$((n - 1))
    done
    fail "$d (waited $(($(date +%s) - T0)) s into the test)"
}
# logged NAME TEXT: TEXT is in NAME's log
logged() { grep -q -- "$2" "$TMP/$1.log"; }
# wait_exit NAME SECONDS: NAME must end within SECONDS; its status in $rc
wait_exit() {
    n=$(($2 * 10))
    while alive "$1" && [ "$n" -gt 0 ]; do sleep 0.1; n=$((n - 1)); done
    if alive "$1"; then kill -9 "$(pid "$1")"; fail "$1 ended within $2 s"; fi
    wait "$(pid "$1")"; rc=$?
}
# exits0 NAME SECONDS: NAME ends within SECONDS with status 0
exits0() { wait_exit "$1" "$2"; [ "$rc" -eq 0 ] || fail "$1 exited $rc, wanted 0"; }
# site_clients R PORT ARGS...: clients c0, c1, c2 (keys and allow-list in
# $K, aggregator key agg), each run from its own directory $TMP/sN with
# ARGS, against the aggregator on 127.0.0.1:PORT, database $TMP/R-sN.db,
# output appended to $TMP/R-sN.log; then R-agg and each site must end with 0
site_clients() {
    r=$1 p=$2; shift 2
    fed=$(cd "$(dirname "$FEDNODE")" && pwd)/$(basename "$FEDNODE")
    for s in 0 1 2; do
        ( cd "$TMP/s$s" && exec "$fed" run --role client --keys "$K/c$s" --allow "$K/allow.txt" \
            --db "$TMP/$r-s$s.db" --aggregator "tcp://127.0.0.1:$p" --aggregator-key agg \
            "$@" ) >>"$TMP/$r-s$s.log" 2>&1 &
        echo $! >"$TMP/$r-s$s.pid"; PIDS="$PIDS $!"
    done
    exits0 "$r-agg" 180
    for s in 0 1 2; do exits0 "$r-s$s" 30; done
}
status() { "$FEDNODE" status --db "$1" --json; }
# rows DB: status --json, one object a line
rows() { status "$1" | tr '{' '\n'; }
# nround DB N: how many rows of round N the rounds table has
nround() { rows "$1" | grep -c "^\"round\":$2,\"start_ms\""; }
# field DB N KEY: KEY's value in round N's row
field() { rows "$1" | grep "^\"round\":$2,\"start_ms\"" | sed -n "s/.*\"$3\":\([^,}]*\).*/\1/p"; }
# contrib DB N HEXKEY: "accepted,reason" of each of HEXKEY's contributions
# to round N (N = '[0-9]*': any round)
contrib() {
    rows "$1" | grep "^\"round\":$2,\"key\":\"$3\"" |
        sed -n 's/.*"accepted":\([a-z]*\),"reason":"\([^"]*\)".*/\1,\2/p'
}
# need_mpi: skip (77) unless mpirun is on PATH and this fednode was built
# with MPI ($BUILD/have_mpi, written by make); sets MPIRUN to mpirun with
# --oversubscribe (two cores run the ranks) on this host only. As root (CI)
# it sets the two variables Open MPI reads to allow that.
need_mpi() {
    command -v mpirun >/dev/null 2>&1 ||
        { echo "skipped: no mpirun (make deps installs openmpi-bin)"; exit 77; }
    [ "$(cat "${BUILD:-build}/have_mpi" 2>/dev/null)" = 1 ] ||
        { echo "skipped: fednode built without MPI (no mpicc; make deps installs libopenmpi-dev)"; exit 77; }
    if [ "$(id -u)" -eq 0 ]; then
        OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
        export OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM
    fi
    # shellcheck disable=SC2034 # read by the tests that source this
    MPIRUN="mpirun --oversubscribe --host 127.0.0.1:64 --mca btl self,vader"
}
# The mpiruns a test started (their pids in MPIS): mpi_cleanup kills what
# each started, then it (by their ids), before proc_lib's cleanup; a test
# that starts mpirun in the background traps it on EXIT.
MPIS=""
mpi_cleanup() {
    for m in $MPIS; do
        for p in $(ps -o pid= --ppid "$m" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
        kill -9 "$m" 2>/dev/null
    done
    cleanup
}
# mpi_rank_pid NAME R: the pid of rank R under the mpirun started as NAME
mpi_rank_pid() {
    for p in $(ps -o pid= --ppid "$(pid "$1")"); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" &&
            { echo "$p"; return 0; }
    done
    return 1
}
counter() { status "$1" | sed -n "s/.*\"$2\":\([0-9]*\).*/\1/p"; }
verify() { "$FEDNODE" verify --db "$1" >"$TMP/verify.out" 2>&1 || {
    sed 's/^/  | /' "$TMP/verify.out"; fail "verify $1"; }; }
keyhex() { "$FEDNODE" pubkey "$1" | base64 -d | od -An -v -tx1 | tr -d ' \n'; }
# rounds_once DB LAST: rounds 1..LAST each exactly once, none after
rounds_once() {
    for r in $(seq 1 "$2"); do
        [ "$(nround "$1" "$r")" -eq 1 ] || fail "$1 has round $r exactly once"
    done
    [ "$(nround "$1" $(($2 + 1)))" -eq 0 ] || fail "$1 has no round $(($2 + 1))"
}
# test_key NAME DIR: the fixed test identity tests/keys/NAME (unsealed, for
# tests only) into DIR/NAME, 0600 as a key file must be. The keys seed the
# topologies and the shuffles, so fixed ones give the same run each time.
test_key() {
    mkdir -p "$2/$1" && cp "$(dirname "$0")/keys/$1/node.key" "$(dirname "$0")/keys/$1/node.pub" "$2/$1/" &&
        chmod 700 "$2/$1" && chmod 600 "$2/$1/node.key" || fail "copy test key $1"
}
# allow_keys DIR NAME...: the fixed test identities NAME... into DIR (as
# test_key) and DIR/allow.txt naming them all
allow_keys() {
    d=$1; shift
    mkdir -p "$d" && : >"$d/allow.txt" || fail "make $d"
    for n in "$@"; do
        test_key "$n" "$d"
        echo "$n $("$FEDNODE" pubkey "$d/$n")" >>"$d/allow.txt"
    done
}
# stranger PORT SECONDS HEX LEN GARBAGE: a raw TCP connection to PORT on
# 127.0.0.1 (bash's /dev/tcp: see need_bash) that sends the bytes HEX (an SP
# handshake: $SP_REQ0 is req0's), LEN as an 8-byte big-endian message length
# (LEN '-': none, the connection then idles), GARBAGE random bytes of the
# message, then holds the connection SECONDS; in the background, its pid in
# SPIDS. Every byte but the garbage is ready before it connects.
stranger() {
    lenhex="" i=56
    while [ "$4" != - ] && [ $i -ge 0 ]; do # octal escapes, without a fork
        b=$((($4 >> i) & 255)); lenhex="$lenhex\\$((b / 64))$((b / 8 % 8))$((b % 8))"; i=$((i - 8))
    done
    bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$0" || exit 0
        printf "$2$3" >&3 2>/dev/null
        [ "$4" -gt 0 ] && head -c "$4" /dev/urandom >&3 2>/dev/null
        sleep "$1"' "$1" "$2" "$3" "$lenhex" "$5" &
    SPIDS="$SPIDS $!"
}
# strangers_done: wait for the strangers alone (not the aggregator)
strangers_done() { for p in $SPIDS; do wait "$p"; done; SPIDS=""; }
SPIDS=""
SP_REQ0='\000SP\000\000\060\000\000'
# need_py MODULE PACKAGE: /usr/bin/python3 ($PY) imports MODULE, else skip (77)
need_py() {
    PY=/usr/bin/python3
    if [ ! -x "$PY" ]; then echo "skipped: no $PY"; exit 77; fi
    "$PY" -c "import $1" 2>/dev/null ||
        { echo "skipped: $PY has no $1 (Debian: apt-get install $2)"; exit 77; }
}
need_bash() { command -v bash >/dev/null 2>&1 || { echo "skipped: no bash (for /dev/tcp)"; exit 77; }; }
# refused DESC TEXT ARGS...: `fednode run ARGS` refuses its flags (exit 2,
# TEXT in what it says) before it opens anything
refused() {
    d=$1 text=$2; shift 2
    "$FEDNODE" run "$@" >"$TMP/refused.out" 2>&1
    rc=$?
    [ $rc -eq 2 ] && grep -q -- "$text" "$TMP/refused.out" ||
        fail "$d: exit 2 and '$text' (got $rc: $(cat "$TMP/refused.out"))"
    ok "$d"
}
