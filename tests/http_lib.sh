# http_lib.sh - what the --http process tests (tests/test_http_*.sh) share,
# on top of proc_lib.sh: the fixed identities agg, c0 and c1 in one
# allow-list, a short job (an aggregator and two clients, each with --http on
# a free port of 127.0.0.1), and reading a node's HTTP port from its log.
# Sourced after proc_lib.sh, never run.
command -v curl >/dev/null 2>&1 || { echo "skipped: no curl (apt-get install curl)"; exit 77; }
K=$TMP/keys
mkdir -p "$K"
: >"$K/allow.txt"
for n in agg c0 c1; do
    test_key "$n" "$K"
    echo "$n $("$FEDNODE" pubkey "$K/$n")" >>"$K/allow.txt"
done
COMMON="--data fashion-mnist --threads 1 --model mlp:64 --batch 64"

# http_port NAME: the port NAME's log says it serves HTTP on (empty: not yet)
http_port() { sed -n 's|.*http: serving http://127\.0\.0\.1:\([0-9]*\)/.*|\1|p' "$TMP/$1.log" | head -n 1; }
# wait_http NAME: until NAME serves HTTP; its port in $HP
serves_http() { [ -n "$(http_port "$1")" ]; }
wait_http() {
    wait_for "$1 serves HTTP" 20 serves_http "$1"
    HP=$(http_port "$1")
}
# get PORT PATH: the body of GET PATH (curl's status: non-zero on no answer
# or an HTTP error)
get() { curl -sf --max-time 10 "http://127.0.0.1:$1$2"; }
# code PORT PATH: the HTTP status of GET PATH
code() { curl -s -o /dev/null -w '%{http_code}' --max-time 10 "http://127.0.0.1:$1$2"; }

# job ROUNDS ARGS...: the aggregator (agg, ARGS added) and clients c0 and
# c1, every one with --http 127.0.0.1:0 and lingering 60 s after the end;
# their HTTP ports in PA, PC0, PC1
job() {
    rounds=$1; shift
    # shellcheck disable=SC2086
    start agg --role aggregator --keys "$K/agg" --allow "$K/allow.txt" --db "$TMP/agg.db" \
        --listen tcp://127.0.0.1:0 --port-file "$TMP/agg.port" $COMMON --rounds "$rounds" \
        --min-clients 2 --linger-ms 60000 --http 127.0.0.1:0 "$@"
    wait_for "the aggregator wrote its port" 20 test -s "$TMP/agg.port"
    wait_http agg; PA=$HP
    for i in 0 1; do
        # shellcheck disable=SC2086
        start "c$i" --role client --keys "$K/c$i" --allow "$K/allow.txt" --db "$TMP/c$i.db" \
            --aggregator "tcp://127.0.0.1:$(cat "$TMP/agg.port")" --aggregator-key agg \
            --partition iid --shard "$i/2" $COMMON --linger-ms 60000 --http 127.0.0.1:0
    done
    wait_http c0; PC0=$HP
    wait_http c1; PC1=$HP
}
