#!/bin/sh
# test_http_prometheus.sh - `fednode run --http` scraped by a real Prometheus
# server (Debian's prometheus: its config written here, run on 127.0.0.1
# with a 1 s scrape interval and a temporary storage directory, stopped at
# the end): an aggregator and two clients run a 6-round job while a client
# whose key is not in the allow-list knocks; then Prometheus's HTTP API
# gives fednode_rounds_completed_total = 6 for all three nodes and the
# aggregator's unknown_sender rejections = what its /metrics and, after it
# stops, its database say. promtool checks each node's /metrics (check
# metrics), the example config and rules (check config, check rules) and
# the rules' own tests (test rules); /status.json equals `fednode status
# --json`; /healthz says 200 while the node lingers.
# Skips (77) without prometheus and promtool, curl, bash, ./fednode or the data.
. "$(dirname "$0")/proc_lib.sh"
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
    echo "skipped: no prometheus/promtool (apt-get install prometheus; make deps installs it)"
    exit 77
fi
need_bash
. "$(dirname "$0")/http_lib.sh"
EX=$(cd "$(dirname "$0")/../examples/prometheus" && pwd)

# ---- A: the examples
promtool check config "$EX/prometheus.yml" >"$TMP/promtool.out" 2>&1 &&
    promtool check rules "$EX/fednode.rules.yml" >>"$TMP/promtool.out" 2>&1 &&
    (cd "$EX" && promtool test rules fednode.rules.test.yml) >>"$TMP/promtool.out" 2>&1 || {
    sed 's/^/  | /' "$TMP/promtool.out"; fail "promtool accepts examples/prometheus"; }
ok "promtool: check config, check rules and test rules pass on examples/prometheus"

# ---- B: a job, scraped
"$FEDNODE" keygen --out "$K/rogue" >"$TMP/keygen.out" 2>&1 || fail "keygen rogue"
{ grep '^agg ' "$K/allow.txt"; echo "rogue $("$FEDNODE" pubkey "$K/rogue")"; } >"$K/rogue-allow.txt"
# rounds wait for a third client that never comes, gather-ms each: ~10 s
job 6 --wait-clients 3 --gather-ms 1200
start rogue --role client --keys "$K/rogue" --allow "$K/rogue-allow.txt" --db "$TMP/rogue.db" \
    --aggregator "tcp://127.0.0.1:$(cat "$TMP/agg.port")" --aggregator-key agg --partition iid \
    --shard 0/2 $COMMON --retry-ms 200 --poll-ms 200
PP=$((30000 + $$ % 20000))
while bash -c "exec 3<>/dev/tcp/127.0.0.1/$PP" 2>/dev/null; do PP=$((PP + 1)); done
cat >"$TMP/prometheus.yml" <<YML
global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}
rule_files: ["$EX/fednode.rules.yml"]
scrape_configs:
  - job_name: fednode
    static_configs:
      - targets: ["127.0.0.1:$PA", "127.0.0.1:$PC0", "127.0.0.1:$PC1"]
YML
prometheus --config.file="$TMP/prometheus.yml" --storage.tsdb.path="$TMP/prom" \
    --web.listen-address="127.0.0.1:$PP" --log.level=warn >"$TMP/prometheus.log" 2>&1 &
PROM=$!
PIDS="$PIDS $PROM"
wait_for "Prometheus is ready" 30 curl -sf "http://127.0.0.1:$PP/-/ready"
# prom QUERY: the value of QUERY's one sample ("" when none)
prom() {
    curl -sf --get --data-urlencode "query=$1" "http://127.0.0.1:$PP/api/v1/query" |
        sed -n 's/.*"value":\[[^,]*,"\([^"]*\)"\].*/\1/p'
}
prom_is() { [ "$(prom "$1")" = "$2" ]; }
wait_for "Prometheus scrapes all three nodes" 20 prom_is 'count(up{job="fednode"} == 1)' 3
ok "Prometheus scrapes the aggregator and both clients (during the job)"
wait_for "the aggregator refused the rogue" 30 logged agg "frame from a non-member"
kill -9 "$(pid rogue)"
wait_for "round 6 merged" 90 logged agg "round 6 merged"
during=$(prom 'min_over_time(fednode_rounds_completed_total{instance="127.0.0.1:'"$PA"'"}[5m])')
[ -n "$during" ] && [ "$during" -lt 6 ] || fail "Prometheus scraped the aggregator before its last round (got '$during')"
for p in "$PA" "$PC0" "$PC1"; do
    wait_for "127.0.0.1:$p has finished" 30 sh -c "curl -sf http://127.0.0.1:$p/metrics | grep -q '^fednode_finished 1'"
    wait_for "Prometheus has 6 rounds for 127.0.0.1:$p" 20 \
        prom_is "fednode_rounds_completed_total{instance=\"127.0.0.1:$p\"}" 6
done
ok "Prometheus: fednode_rounds_completed_total is 6 for the aggregator and both clients"
REJ=$(get "$PA" /metrics | sed -n 's/^fednode_frames_rejected_total{reason="unknown_sender"} //p')
[ -n "$REJ" ] && [ "$REJ" -gt 0 ] || fail "the aggregator's /metrics counts the rogue's frames (got '$REJ')"
wait_for "Prometheus has $REJ unknown_sender rejections" 20 \
    prom_is "fednode_frames_rejected_total{instance=\"127.0.0.1:$PA\",reason=\"unknown_sender\"}" "$REJ"
ok "Prometheus: fednode_frames_rejected_total{reason=\"unknown_sender\"} = $REJ, as /metrics says"
[ "$(prom 'fednode_client_rounds_since_merged{client="c0"}')" = 0 ] ||
    fail "c0's delta was merged in the last round"

# ---- C: the pages while the nodes linger
for p in "$PA" "$PC0"; do
    get "$p" /metrics >"$TMP/metrics.txt" || fail "GET /metrics from $p"
    promtool check metrics <"$TMP/metrics.txt" >"$TMP/check.out" 2>&1 || {
        sed 's/^/  | /' "$TMP/check.out"; fail "promtool check metrics accepts $p's /metrics"; }
    [ ! -s "$TMP/check.out" ] || { sed 's/^/  | /' "$TMP/check.out"; fail "promtool check metrics: no lint on $p"; }
done
ok "promtool check metrics accepts the aggregator's and a client's /metrics, no lint"
get "$PA" /status.json >"$TMP/live.json" || fail "GET /status.json"
status "$TMP/agg.db" >"$TMP/cli.json"
cmp -s "$TMP/live.json" "$TMP/cli.json" || fail "/status.json is what fednode status --json prints"
ok "/status.json = fednode status --json"
[ "$(code "$PA" /healthz)" = 200 ] || fail "/healthz is 200 for a finished aggregator"
[ "$(code "$PA" /nope)" = 404 ] || fail "an unknown path is 404"
ok "/healthz 200, an unknown path 404"
kill -TERM "$PROM"
kill -TERM "$(pid agg)"
exits0 agg 20
[ "$(counter "$TMP/agg.db" wire.rej_unknown_sender)" = "$REJ" ] ||
    fail "the database's wire.rej_unknown_sender is $REJ too (got $(counter "$TMP/agg.db" wire.rej_unknown_sender))"
logged agg "http: served" || fail "the aggregator logs what its HTTP thread served"
ok "the aggregator's database counted the same $REJ rejections; it logged: $(grep -o 'http: served.*' "$TMP/agg.log")"
