#!/bin/sh
# test_systemd.sh - examples/systemd/fednode@.service lets the daemon work:
# a short job (an aggregator and two clients, logreg, 2 rounds on
# Fashion-MNIST; the aggregator sent SIGHUP once, the allow-list reload) runs
# with every process under strace -f, each with a fake NOTIFY_SOCKET (the
# listener of build/tests/test_sdnotify --listen) and WATCHDOG_USEC set, as
# systemd would start it. Then:
#  - every system call any of them made falls inside the unit's
#    SystemCallFilter= lines (allowed groups, minus the ~ ones), the groups
#    expanded by `systemd-analyze syscall-filter`;
#  - every socket they opened is of a family in RestrictAddressFamilies=;
#  - none mapped memory writable and executable, or made a mapping
#    executable (MemoryDenyWriteExecute=yes);
#  - each told its listener READY=1, WATCHDOG=1 and STOPPING=1.
# c1's key is sealed, its passphrase read from beside it as the unit reads
# an encrypted credential (the drop-in its comment gives). As root it runs
# the job as nobody (setpriv), as the unit's DynamicUser would. `systemd-analyze verify` of the installed unit is in test_install.sh.
# Skips (77) without strace, systemd-analyze or Fashion-MNIST (make deps
# installs them), or without build/tests/test_sdnotify (make test builds it).
. "$(dirname "$0")/proc_lib.sh"

BUILD=${BUILD:-build}
UNIT=examples/systemd/fednode@.service
LISTEN=$BUILD/tests/test_sdnotify
for t in strace systemd-analyze; do
    command -v "$t" >/dev/null 2>&1 || { echo "skipped: no $t (make deps installs it)"; exit 77; }
done
[ -x "$LISTEN" ] || { echo "skipped: no $LISTEN (make test builds it)"; exit 77; }
[ -f "$UNIT" ] || fail "$UNIT exists"

# ---- the unit's filter, expanded: allowed = (allow lines) - (~ lines)
# expand GROUP_OR_NAME...: the system call names, groups expanded recursively
expand() {
    for x in "$@"; do
        case "$x" in
        @*) systemd-analyze syscall-filter "$x" 2>/dev/null |
                sed -n 's/^    \([@a-z0-9_-]*\)$/\1/p' | while read -r y; do expand "$y"; done ;;
        *) echo "$x" ;;
        esac
    done
}
: >"$TMP/allow"; : >"$TMP/deny"
sed -n 's/^SystemCallFilter=//p' "$UNIT" >"$TMP/filter"
[ -s "$TMP/filter" ] || fail "$UNIT has SystemCallFilter= lines"
while read -r line; do
    case "$line" in
    "~"*) # shellcheck disable=SC2086
          expand ${line#"~"} >>"$TMP/deny" ;;
    *) # shellcheck disable=SC2086
       expand $line >>"$TMP/allow" ;;
    esac
done <"$TMP/filter"
sort -u "$TMP/allow" >"$TMP/allow.s"; sort -u "$TMP/deny" >"$TMP/deny.s"
comm -23 "$TMP/allow.s" "$TMP/deny.s" >"$TMP/allowed"
[ "$(wc -l <"$TMP/allowed")" -ge 200 ] || fail "systemd-analyze expanded the filter ($(wc -l <"$TMP/allowed") calls)"
ok "the unit's filter allows $(wc -l <"$TMP/allowed") system calls ($(tr '\n' ' ' <"$TMP/filter"))"
families=$(sed -n 's/^RestrictAddressFamilies=//p' "$UNIT")
[ -n "$families" ] || fail "$UNIT has RestrictAddressFamilies="

# ---- a short job, every process under strace and a fake NOTIFY_SOCKET,
# as the unit runs it: not as root (DynamicUser=yes; as root SQLite would
# chown its journal, a call the unit does not need), FEDNODE_CACHE set
K=$TMP/keys
mkdir -p "$K" "$TMP/bin" "$TMP/cache"
: >"$K/allow.txt"
for n in agg c0; do test_key "$n" "$K"; echo "$n $("$FEDNODE" pubkey "$K/$n")" >>"$K/allow.txt"; done
# c1's key is sealed with a passphrase, which it reads as the unit reads it
# with the passphrase drop-in its comment gives: a credential beside node.key
# in $CREDENTIALS_DIRECTORY (%d, the unit's --keys), named by ExecStart's
# --passphrase-file ${FEDNODE_PASSPHRASE_FILE} (%d/passphrase)
grep -q '^ExecStart=.* --keys %d .*--passphrase-file ${FEDNODE_PASSPHRASE_FILE}$' "$UNIT" ||
    fail "the unit's ExecStart takes the key from %d and --passphrase-file from \$FEDNODE_PASSPHRASE_FILE"
grep -q '^#  *Environment=FEDNODE_PASSPHRASE_FILE=%d/passphrase$' "$UNIT" &&
    grep -q '^#  *LoadCredentialEncrypted=passphrase:' "$UNIT" ||
    fail "the unit's comment gives the encrypted passphrase credential's drop-in"
printf 'a site passphrase\n' >"$TMP/c1.pass"
"$FEDNODE" keygen --out "$K/c1" --passphrase-file "$TMP/c1.pass" >"$TMP/keygen.out" 2>&1 ||
    { cat "$TMP/keygen.out"; fail "keygen c1, sealed"; }
mv "$TMP/c1.pass" "$K/c1/passphrase" && chmod 600 "$K/c1/passphrase" || fail "c1's passphrase credential"
echo "c1 $("$FEDNODE" pubkey "$K/c1")" >>"$K/allow.txt"
cp "$FEDNODE" "$TMP/bin/fednode" && chmod 755 "$TMP" "$TMP/bin" "$TMP/bin/fednode" || fail "copy fednode"
AS=""
if [ "$(id -u)" -eq 0 ]; then
    command -v setpriv >/dev/null 2>&1 || { echo "skipped: root, and no setpriv (util-linux) to drop it"; exit 77; }
    chown -R 65534:65534 "$TMP/keys" "$TMP/cache" && chown 65534:65534 "$TMP" || fail "chown to nobody"
    AS="setpriv --reuid=65534 --regid=65534 --clear-groups"
fi
FEDNODE_CACHE=$TMP/cache; export FEDNODE_CACHE
# traced NAME ARGS...: fednode run ARGS under strace, notifying @NAME's listener
traced() {
    name=$1; shift
    sock="@fednode_test_systemd_$$_$name"
    "$LISTEN" --listen "$sock" 120 >"$TMP/$name.notify" 2>&1 &
    PIDS="$PIDS $!"
    wait_for "the $name listener is up" 10 grep -q listening "$TMP/$name.notify"
    # shellcheck disable=SC2086
    NOTIFY_SOCKET=$sock WATCHDOG_USEC=100000 \
        $AS strace -f -qq -o "$TMP/$name.trace" "$TMP/bin/fednode" run "$@" >"$TMP/$name.log" 2>&1 &
    echo $! >"$TMP/$name.pid"
    PIDS="$PIDS $!"
}
COMMON="--data fashion-mnist --threads 1 --model logreg --allow $K/allow.txt"
# shellcheck disable=SC2086
traced agg --role aggregator --keys "$K/agg" --db "$TMP/agg.db" --listen tcp://127.0.0.1:0 \
    --port-file "$TMP/port" --rounds 2 --min-clients 2 --linger-ms 500 $COMMON
wait_for "the aggregator wrote its port" 60 test -s "$TMP/port"
for i in 0 1; do
    pass=""
    [ "$i" = 1 ] && pass="$K/c1/passphrase"
    # shellcheck disable=SC2086
    traced "c$i" --role client --keys "$K/c$i" --db "$TMP/c$i.db" \
        --aggregator "tcp://127.0.0.1:$(cat "$TMP/port")" --aggregator-key agg --shard "$i/2" $COMMON \
        --passphrase-file "$pass"
done
wait_for "the aggregator listens" 30 grep -q READY=1 "$TMP/agg.notify"
# the traced fednode's pid: the first line of its trace (strace's is $(pid agg))
kill -HUP "$(sed -n '1s/^\([0-9]*\) .*/\1/p' "$TMP/agg.trace")"
wait_for "the aggregator reloaded its allow-list" 30 logged agg "reloaded"
exits0 agg 180
exits0 c0 60
exits0 c1 60
logged agg "round 2 merged 2 of 2" || fail "the job ran its 2 rounds under strace"
ok "a 2-round job under strace -f: aggregator (SIGHUP once) and 2 clients (c1's key sealed, its passphrase a credential as the unit's drop-in gives it) exited 0"

for who in agg c0 c1; do # (wait_for uses $n)
    wait_for "$who's listener got STOPPING=1" 10 grep -q '^STOPPING=1' "$TMP/$who.notify"
    for m in READY=1 WATCHDOG=1; do
        grep -q "^$m" "$TMP/$who.notify" || { cat "$TMP/$who.notify"; fail "$who sent $m"; }
    done
done
ok "each sent READY=1, WATCHDOG=1 and STOPPING=1 to its NOTIFY_SOCKET"

# ---- what they called: names (a call and a resumed one), sockets, mappings
cat "$TMP"/agg.trace "$TMP"/c0.trace "$TMP"/c1.trace >"$TMP/all.trace"
sed -n -e 's/^[0-9][0-9]*  *\([a-z0-9_]*\)(.*/\1/p' -e 's/^[0-9][0-9]*  *<\.\.\. \([a-z0-9_]*\) resumed>.*/\1/p' \
    "$TMP/all.trace" | sort -u >"$TMP/used"
[ "$(wc -l <"$TMP/used")" -ge 20 ] || fail "strace recorded the calls ($(wc -l <"$TMP/used"))"
comm -23 "$TMP/used" "$TMP/allowed" >"$TMP/outside"
if [ -s "$TMP/outside" ]; then
    for s in $(cat "$TMP/outside"); do
        echo "  $s: $(grep -m 1 " $s(" "$TMP/all.trace" | cut -c 1-160)"
    done
    fail "system calls outside the unit's SystemCallFilter: $(tr '\n' ' ' <"$TMP/outside")"
fi
ok "all $(wc -l <"$TMP/used") system calls the job made are inside the filter: $(tr '\n' ' ' <"$TMP/used")"

sed -n 's/.* socket(\(AF_[A-Z0-9]*\),.*/\1/p' "$TMP/all.trace" | sort -u >"$TMP/families"
[ -s "$TMP/families" ] || fail "strace recorded the sockets opened"
for f in $(cat "$TMP/families"); do
    case " $families " in *" $f "*) ;; *) fail "a socket of $f, outside RestrictAddressFamilies=$families" ;; esac
done
ok "sockets opened: $(tr '\n' ' ' <"$TMP/families")(all in RestrictAddressFamilies=)"

if grep -qE ' (mmap|mmap2)\(.*PROT_WRITE\|PROT_EXEC|PROT_EXEC\|PROT_WRITE' "$TMP/all.trace" ||
    grep -qE ' (mprotect|pkey_mprotect)\([^,]*, [^,]*, [^)]*PROT_EXEC' "$TMP/all.trace"; then
    grep -E ' (mmap|mprotect|pkey_mprotect)\(.*PROT_EXEC' "$TMP/all.trace" | head -5
    fail "memory mapped writable and executable, or made executable (MemoryDenyWriteExecute=yes)"
fi
ok "no writable-and-executable or made-executable memory (MemoryDenyWriteExecute=yes holds)"
