#!/bin/sh
# long_soak.sh - `make test-long`: an aggregator and four clients for
# SOAK_MINUTES (30) minutes of mlp:64 rounds on Fashion-MNIST. Every
# SOAK_KILL_EVERY (3) minutes one client (in turn) is killed with SIGKILL and
# restarted 10 s later on its database; at the start of every minute a burst
# of 30 garbage connections (16 MiB announced, whole garbage frames, stalls,
# bad handshakes) hits the aggregator. Each minute, half-way, the
# aggregator's resident memory and open file descriptors are sampled and
# printed. Checks: after the first five minutes both stay flat (RSS within
# 8 MiB, descriptors within 4 of their range's low end); every round merged
# at least the three clients alive through it (at most one is down at a
# time); the aggregator stops on SIGTERM with exit 0 and verify passes.
# Needs ./fednode, bash, sqlite3 and Fashion-MNIST; exits 77 without them.
. "$(dirname "$0")/proc_lib.sh"
need_bash
command -v sqlite3 >/dev/null 2>&1 || { echo "skipped: no sqlite3"; exit 77; }
MIN=${SOAK_MINUTES:-30}
KILL_EVERY=${SOAK_KILL_EVERY:-3}
[ "$MIN" -gt 5 ] || { echo "FAIL: SOAK_MINUTES must be over 5 (the first five are warm-up)"; exit 1; }

K=$TMP/keys
mkdir -p "$K"
: >"$K/allow.txt"
for n in agg c0 c1 c2 c3; do test_key "$n" "$K"; echo "$n $("$FEDNODE" pubkey "$K/$n")" >>"$K/allow.txt"; done
start agg --role aggregator --keys "$K/agg" --allow "$K/allow.txt" --db "$TMP/agg.db" \
    --listen tcp://127.0.0.1:0 --port-file "$TMP/port" --model mlp:64 --rounds 1000000 \
    --min-clients 3 --wait-clients 4 --gather-ms 500 --deadline-ms 5000 --threads 1 \
    --conn-stall-ms 2000 --data fashion-mnist
wait_for "aggregator writes its port" 30 test -s "$TMP/port"
port=$(cat "$TMP/port")
client() {
    start "c$1" --role client --keys "$K/c$1" --allow "$K/allow.txt" --db "$TMP/c$1.db" \
        --aggregator "tcp://127.0.0.1:$port" --aggregator-key agg --shard "$1/4" --threads 1
}
for i in 0 1 2 3; do client "$i"; done

burst() {
    for i in 1 2 3 4 5 6; do
        stranger "$port" 1 "$SP_REQ0" 16777216 65536
        stranger "$port" 1 "$SP_REQ0" 60000 60000
        stranger "$port" 4 "$SP_REQ0" 60000 1024
        stranger "$port" 1 'GET / HTTP/1.1\r\n\r\n' 0 0
        stranger "$port" 1 "$SP_REQ0" 0 0
    done
}
rss() { sed -n 's/^VmRSS:[^0-9]*\([0-9]*\) kB/\1/p' "/proc/$(pid agg)/status"; }
fds() { ls "/proc/$(pid agg)/fd" | wc -l; }
rounds() { sqlite3 "$TMP/agg.db" "SELECT count(*) FROM rounds" 2>/dev/null || echo "?"; }

echo "minute  rss_kB  fds  rounds  event"
m=1
down=""
while [ "$m" -le "$MIN" ]; do
    t_min=$(date +%s)
    alive agg || fail "the aggregator is alive in minute $m"
    burst
    event="burst"
    if [ $((m % KILL_EVERY)) -eq 0 ]; then
        victim=$(((m / KILL_EVERY - 1) % 4))
        kill -9 "$(pid "c$victim")" 2>/dev/null
        down=$victim
        event="$event, c$victim killed"
    fi
    sleep 10
    strangers_done
    if [ -n "$down" ]; then
        client "$down"
        event="$event and restarted"
        down=""
    fi
    sleep $((30 - ($(date +%s) - t_min)))
    r=$(rss) f=$(fds)
    echo "$m $r $f $(rounds) $event" | awk '{ printf "%6s  %6s  %3s  %6s  ", $1, $2, $3, $4;
        for (i = 5; i <= NF; i++) printf "%s%s", $i, i < NF ? " " : "\n" }'
    [ "$m" -gt 5 ] && echo "$r $f" >>"$TMP/series"
    left=$((60 - ($(date +%s) - t_min)))
    [ "$left" -gt 0 ] && sleep "$left"
    m=$((m + 1))
done
kill -TERM "$(pid agg)"
exits0 agg 60
for i in 0 1 2 3; do kill -TERM "$(pid "c$i")" 2>/dev/null; done

awk '{ if (NR == 1 || $1 < rlo) rlo = $1; if ($1 > rhi) rhi = $1;
       if (NR == 1 || $2 < flo) flo = $2; if ($2 > fhi) fhi = $2 }
     END { printf "after minute 5: RSS %d..%d kB, descriptors %d..%d\n", rlo, rhi, flo, fhi;
           exit !(rhi - rlo <= 8192 && fhi - flo <= 4) }' "$TMP/series" ||
    fail "RSS (within 8 MiB) and descriptors (within 4) flat after the first five minutes"
ok "resident memory and descriptors flat after the first five minutes"

n=$(sqlite3 "$TMP/agg.db" "SELECT count(*) FROM rounds")
low=$(sqlite3 "$TMP/agg.db" "SELECT count(*) FROM rounds WHERE peers < 3")
[ "$n" -gt 0 ] && [ "$low" -eq 0 ] ||
    fail "every round merged its live clients (3 or 4): $low of $n rounds merged fewer"
ok "$n rounds, each merged its live clients (at least 3)"
verify "$TMP/agg.db"
ok "verify passes"
echo "all checks passed in $(($(date +%s) - T0)) s"
