#!/bin/sh
# long_hostile_conns.sh - `make test-long` (about 50 s, most of it waiting out
# stalls; test_transport checks the limits' exact counts in `make test`): what
# a stranger who never authenticates can make an aggregator hold. It listens for a logreg model, so it takes requests up to
# about 126 KiB (its own largest frame), not the protocol's 16 MiB. Against a
# real fednode process on 127.0.0.1:
#  - 40 connections that announce 16 MiB messages: NNG drops each before
#    allocating (conn_dropped);
#  - 40 that send whole frames of garbage: refused as bad magic (rej_magic);
#  - 40 that announce a message within the limit and stall: closed after
#    --conn-stall-ms, 3 s (conn_stalled); the others deliver well within it;
#  - 10 with a bad handshake, one after another (conn_handshake: NNG 1.5.2
#    counts one only when its listener is waiting on an accept);
#  - 30 at once over --max-connections 16: the surplus closed (conn_refused;
#    the stalled ones closed meanwhile free places, so fewer than 14);
# then its resident memory is within 16 MiB of where it was before, two
# clients run two rounds on it, and status shows every counter.
# Needs ./fednode, bash and Fashion-MNIST; exits 77 (skipped) without them.
. "$(dirname "$0")/proc_lib.sh"
need_bash

K=$TMP/keys
mkdir -p "$K"
: >"$K/allow.txt"
for n in agg c0 c1; do test_key "$n" "$K"; echo "$n $("$FEDNODE" pubkey "$K/$n")" >>"$K/allow.txt"; done
start agg --role aggregator --keys "$K/agg" --allow "$K/allow.txt" --db "$TMP/agg.db" \
    --listen tcp://127.0.0.1:0 --port-file "$TMP/port" --model logreg --rounds 2 \
    --min-clients 2 --wait-clients 2 --threads 1 --max-connections 16 --conn-stall-ms 3000 \
    --data fashion-mnist
wait_for "aggregator writes its port" 30 test -s "$TMP/port"
port=$(cat "$TMP/port")
logged agg "requests up to 128552 bytes, 16 connections at once, a silent one closed after 3000 ms" ||
    fail "the aggregator states its limits (requests up to 128552 bytes, 16 connections)"
rss() { sed -n 's/^VmRSS:[^0-9]*\([0-9]*\) kB/\1/p' "/proc/$(pid agg)/status"; }
sleep 1
rss0=$(rss)

wave() { # COUNT SECONDS HEX LEN GARBAGE, 8 at a time (two waves fit the cap)
    n=$1; shift
    while [ "$n" -gt 0 ]; do
        k=0; while [ $k -lt 8 ] && [ "$n" -gt 0 ]; do stranger "$port" "$@"; k=$((k + 1)); n=$((n - 1)); done
        strangers_done
    done
}
wave 40 1 "$SP_REQ0" 16777216 65536      # announce 16 MiB: dropped at once
wave 40 1 "$SP_REQ0" 120000 120000       # whole frames of garbage
wave 40 5 "$SP_REQ0" 128000 4096         # stall inside the limit: closed after 3 s
# not SP at all, one at a time: NNG counts a bad handshake only while its
# listener waits on an accept, and it rests 100 ms after each it counts
n=0; while [ $n -lt 10 ]; do stranger "$port" 0.3 'GET / HTTP/1.1\r\n\r\n' 0 0; strangers_done; n=$((n + 1)); done
peak=$(rss)
n=0; while [ $n -lt 30 ]; do stranger "$port" 5 "$SP_REQ0" - 0; n=$((n + 1)); done # over the cap, idle
sleep 1
during=$(rss)
strangers_done
sleep 2
rss1=$(rss)
echo "aggregator RSS: before ${rss0} kB, after the waves ${peak} kB, 30 at once ${during} kB, after ${rss1} kB"
[ $((rss1 - rss0)) -le 16384 ] || fail "memory back within 16 MiB of before (${rss0} -> ${rss1} kB)"
ok "after 170 hostile connections the aggregator holds $(((rss1 - rss0) / 1024)) MiB more than before"

for i in 0 1; do
    start "c$i" --role client --keys "$K/c$i" --allow "$K/allow.txt" --db "$TMP/c$i.db" \
        --aggregator "tcp://127.0.0.1:$port" --aggregator-key agg --shard "$i/2" --threads 1
done
exits0 agg 120
exits0 c0 30
exits0 c1 30
rounds_once "$TMP/agg.db" 2
ok "two clients ran two rounds on it afterwards"
# at_least NAME N: status counter wire.NAME >= N; each is printed first
at_least() {
    v=$(counter "$TMP/agg.db" "wire.$1")
    [ -n "$v" ] && [ "$v" -ge "$2" ] || bad="$bad wire.$1 = '$v', want >= $2;"
    printf ' %s=%s' "$1" "$v"
}
bad=""
printf 'status counters:'
at_least conn_dropped 40
at_least rej_magic 36 # of 40: one whose connection closes before a context takes it is lost (39 seen under load)
at_least conn_stalled 40
at_least conn_handshake 1 # of 10: each should count, but a loaded host misses some (4 seen)
at_least conn_refused 1 # exact counts are test_transport's: here stalls free places too
echo
[ -z "$bad" ] || fail "status:$bad"
ok "status counts each kind of drop"
echo "all checks passed in $(($(date +%s) - T0)) s"
