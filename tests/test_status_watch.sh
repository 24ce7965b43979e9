#!/bin/sh
# test_status_watch.sh - `fednode status --watch` redraws the status tables
# in place on a terminal (a pty from util-linux's script(1)): each frame
# starts with the cursor-home and clear-screen sequences, and a round
# recorded while it watches (a second `fednode train --resume` epoch, on a
# small CSV so no dataset is needed) appears in a later frame and not the
# first. Off a terminal the frames follow one another without escape codes
# (--json: one object a line); a database not there yet is waited for; and
# SIGINT (Ctrl-C) ends it at once with status 0. Skips (77) without script(1).
set -u
FEDNODE=${FEDNODE:-./fednode}
if [ ! -x "$FEDNODE" ]; then echo "skipped: no $FEDNODE (run make)"; exit 77; fi
if ! command -v script >/dev/null 2>&1; then echo "skipped: no script(1) (util-linux) for a pty"; exit 77; fi
TMP=$(mktemp -d) || exit 1
PIDS=""
trap 'for p in $PIDS; do kill -9 "$p" 2>/dev/null; done; rm -rf "$TMP"' EXIT
trap 'exit 1' INT TERM HUP
fail() { echo "FAIL: $1"; exit 1; }
ok() { echo "ok: $1"; }
FEDNODE_NO_REEXEC=1; export FEDNODE_NO_REEXEC
ESC=$(printf '\033')

printf 'a,b,label\n' >"$TMP/d.csv"
i=0; while [ $i -lt 200 ]; do echo "0.$((i % 10)),$((i % 2)),$((i % 2))" >>"$TMP/d.csv"; i=$((i + 1)); done
train() { "$FEDNODE" train --data "$TMP/d.csv" --model logreg --threads 1 --db "$TMP/n.db" "$@" \
    >>"$TMP/train.log" 2>&1 || { cat "$TMP/train.log"; fail "fednode train $*"; }; }
train --epochs 1

# a terminal: watch, add round 2 while it watches, stop it with SIGINT
script -qfec "echo \$\$ >$TMP/watch.pid; exec $FEDNODE status --watch --interval 0.2 --rounds 5 --db $TMP/n.db" /dev/null \
    </dev/null >"$TMP/tty.out" 2>&1 &
PIDS="$PIDS $!"; spid=$!
sleep 1.5
train --epochs 2 --resume
sleep 1.5
# SIGINT to fednode itself (script's child), as Ctrl-C on the terminal would send it
fpid=$(cat "$TMP/watch.pid" 2>/dev/null)
[ -n "$fpid" ] && kill -0 "$fpid" 2>/dev/null || fail "the watching fednode is running"
kill -INT "$fpid"
n=50; while kill -0 "$spid" 2>/dev/null && [ $n -gt 0 ]; do sleep 0.1; n=$((n - 1)); done
kill -0 "$spid" 2>/dev/null && fail "status --watch ended within 5 s of SIGINT"
wait "$spid"; rc=$?
[ "$rc" -eq 0 ] || { cat "$TMP/tty.out"; fail "status --watch exited $rc after SIGINT, wanted 0"; }
ok "SIGINT ends status --watch with status 0"

# frames: split at ESC[H ESC[2J; round rows look like "      2  2026-..."
frames=$(awk -v RS="${ESC}\\\\[H${ESC}\\\\[2J" 'NR > 1 { n++ } END { print n + 0 }' "$TMP/tty.out")
[ "$frames" -ge 5 ] || { od -c "$TMP/tty.out" | head -20; fail "at least 5 redraws in 3 s at 0.2 s (got $frames)"; }
ok "$frames frames, each starting with cursor home and clear screen"
first2=$(awk -v RS="${ESC}\\\\[H${ESC}\\\\[2J" 'NR > 1 && /\n +2  [0-9][0-9][0-9][0-9]-/ { print NR - 1; exit }' "$TMP/tty.out")
has1=$(awk -v RS="${ESC}\\\\[H${ESC}\\\\[2J" 'NR == 2 && /\n +1  [0-9][0-9][0-9][0-9]-/ { print 1 }' "$TMP/tty.out")
[ "$has1" = 1 ] || fail "the first frame shows round 1"
[ -n "$first2" ] || { tr -d '\r' <"$TMP/tty.out" | tail -30; fail "a later frame shows round 2"; }
[ "$first2" -gt 1 ] || fail "round 2 is not in the first frame (it came later)"
ok "round 2 appears in frame $first2 of $frames, after it was recorded"

# not a terminal: frames one after another, no escape codes; --json one object a line
timeout -s INT 1 "$FEDNODE" status --watch --interval 0.2 --db "$TMP/n.db" >"$TMP/pipe.out" 2>&1
grep -q "$ESC" "$TMP/pipe.out" && fail "no escape codes off a terminal"
[ "$(grep -c '^rounds (last 2, newest first)' "$TMP/pipe.out")" -ge 3 ] || fail "frames follow one another off a terminal"
timeout -s INT 1 "$FEDNODE" status --watch --json --interval 0.2 --db "$TMP/n.db" >"$TMP/json.out" 2>&1
[ "$(grep -c '^{"db":.*}$' "$TMP/json.out")" -ge 3 ] && [ "$(grep -vc '^{"db":.*}$' "$TMP/json.out")" -eq 0 ] ||
    { cat "$TMP/json.out"; fail "--watch --json prints one object a line"; }
ok "off a terminal: frames in sequence without escape codes; --json one object a line"

# a database that is not there yet is waited for
timeout -s INT 1 "$FEDNODE" status --watch --interval 0.2 --db "$TMP/later.db" >"$TMP/wait.out" 2>&1
grep -q "waiting for $TMP/later.db to appear" "$TMP/wait.out" || { cat "$TMP/wait.out"; fail "waits for a missing database"; }
ok "a missing database is waited for"
