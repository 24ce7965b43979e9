#!/bin/sh
# test_install.sh - what `make install` lays out, and that it works there.
#  A. `make install DESTDIR=TMP PREFIX=<this build's PREFIX>` (another PREFIX
#     would rebuild): PREFIX/bin/fednode and fedsim (0755), the man pages in
#     PREFIX/share/man/man1 (0644, the ones the build wrote), the systemd unit
#     in PREFIX/lib/systemd/system (0644) with ExecStart at PREFIX/bin, the
#     safetensors reader in PREFIX/share/fednode/python (0644).
#  B. `systemd-analyze verify` accepts the installed unit as a named instance
#     (fednode@site.service) with the binary in place (--root=TMP; it says
#     nothing, and it does complain once the binary is taken away), with the
#     passphrase drop-in its comment gives as well, its
#     Documentation= man page found in the tree; `systemd-analyze security`
#     rates its exposure at most 2.0. Skipped, saying why, without
#     systemd-analyze (make deps installs systemd).
#  C. where `make install` puts the CUDA plugin is where fednode looks: an
#     installed tree (PREFIX/bin/fednode, PREFIX/lib/fednode/libfedcuda.so)
#     loads the plugin from ../lib/fednode beside the binary, wherever the tree
#     sits; and the folder compiled into fednode is the PREFIX this build was
#     made for ($BUILD/prefix, from the Makefile), so `make install
#     PREFIX=/opt/x` needs no FEDNODE_PLUGIN_DIR. No GPU needed: the plugin
#     loads and then finds no device. Skipped without the plugin (no nvcc) or
#     without Fashion-MNIST, which the train command reads.
set -u
BUILD=${BUILD:-build}
FEDNODE=${FEDNODE:-./fednode}
DATA=${FEDNODE_DATA:-/usr/share/datasets/fashion-mnist}
if [ ! -x "$FEDNODE" ]; then echo "skipped: no $FEDNODE (run make)"; exit 77; fi
TMP=$(mktemp -d) || exit 1
trap 'if [ -n "${KEEP:-}" ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi' EXIT
trap 'exit 1' INT TERM HUP
fail() { echo "FAIL: $1"; exit 1; }
ok() { echo "ok: $1"; }
note() { echo "note: $1"; }
mode() { stat -c %a "$1"; }

# ---- A: the installed tree
prefix=$(cat "$BUILD/prefix" 2>/dev/null) || fail "no $BUILD/prefix (the Makefile writes it)"
ROOT=$TMP/root
env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory install BUILD="$BUILD" \
    PREFIX="$prefix" DESTDIR="$ROOT" >"$TMP/install.log" 2>&1 || {
    tail -n 20 "$TMP/install.log"; fail "make install DESTDIR=$ROOT PREFIX=$prefix"; }
P=$ROOT$prefix
for f in bin/fednode bin/fedsim; do
    [ -x "$P/$f" ] && [ "$(mode "$P/$f")" = 755 ] || fail "$prefix/$f installed, mode 0755"
done
for p in fednode fedsim; do
    f=$P/share/man/man1/$p.1
    [ -f "$f" ] && [ "$(mode "$f")" = 644 ] || fail "$prefix/share/man/man1/$p.1 installed, mode 0644"
    cmp -s "$f" "$BUILD/man/$p.1" || fail "the installed $p.1 is the one the build wrote"
done
UNIT=$P/lib/systemd/system/fednode@.service
[ -f "$UNIT" ] && [ "$(mode "$UNIT")" = 644 ] || fail "$prefix/lib/systemd/system/fednode@.service installed, mode 0644"
grep -q "^ExecStart=$prefix/bin/fednode run " "$UNIT" || fail "the installed unit starts $prefix/bin/fednode"
PYF=$P/share/fednode/python/safetensors/__init__.py
[ -f "$PYF" ] && [ "$(mode "$PYF")" = 644 ] || fail "$prefix/share/fednode/python/safetensors/__init__.py installed, mode 0644"
ok "make install: $prefix/bin/{fednode,fedsim}, share/man/man1/{fednode,fedsim}.1, lib/systemd/system/fednode@.service, share/fednode/python/safetensors"

# ---- B: systemd-analyze on the installed unit
if ! command -v systemd-analyze >/dev/null 2>&1; then
    note "skipped B: no systemd-analyze (make deps installs systemd)"
else
    # the units it names (targets) and ExecReload's /bin/kill, inside the root
    mkdir -p "$ROOT/usr/lib/systemd" "$ROOT/bin"
    cp -r /usr/lib/systemd/system "$ROOT/usr/lib/systemd/" || fail "copy the system's units"
    kill_bin=""
    for k in /bin/kill /usr/bin/kill; do [ -x "$k" ] && { kill_bin=$k; break; }; done
    [ -n "$kill_bin" ] || fail "the unit's ExecReload needs /bin/kill (Debian: procps; make deps installs it)"
    cp "$kill_bin" "$ROOT/bin/kill"
    verify() { MANPATH=$P/share/man systemd-analyze verify --root="$ROOT" fednode@site.service >"$TMP/verify.out" 2>&1; }
    verify; rc=$?
    [ $rc -eq 0 ] && [ ! -s "$TMP/verify.out" ] || { cat "$TMP/verify.out"; fail "systemd-analyze verify fednode@site.service (rc $rc)"; }
    ok "systemd-analyze verify --root: fednode@site.service accepted, saying nothing"
    # a sealed key's passphrase: the drop-in the unit's comment gives (the
    # lines after its `systemctl edit`), as systemctl edit would write it
    grep -q '^ExecStart=.* --passphrase-file ${FEDNODE_PASSPHRASE_FILE}$' "$UNIT" ||
        fail "the unit's ExecStart reads --passphrase-file from \$FEDNODE_PASSPHRASE_FILE"
    D=$ROOT/etc/systemd/system/fednode@site.service.d
    mkdir -p "$D" || fail "mkdir $D"
    awk '/systemctl edit fednode@site.service/ { on = 1; next }
         on && /^#$/ { exit }
         on { sub(/^# */, ""); print }' "$UNIT" >"$D/passphrase.conf"
    grep -q '^LoadCredentialEncrypted=passphrase:' "$D/passphrase.conf" &&
        grep -q '^Environment=FEDNODE_PASSPHRASE_FILE=%d/passphrase$' "$D/passphrase.conf" ||
        { cat "$D/passphrase.conf"; fail "the unit's comment gives the passphrase drop-in"; }
    verify; rc=$?
    [ $rc -eq 0 ] && [ ! -s "$TMP/verify.out" ] || { cat "$TMP/verify.out"; fail "systemd-analyze verify with the passphrase drop-in (rc $rc)"; }
    ok "with the comment's passphrase drop-in (LoadCredentialEncrypted=) it is accepted too"
    rm -r "$D"
    mv "$P/bin/fednode" "$TMP/fednode.away"
    verify; rc=$?
    mv "$TMP/fednode.away" "$P/bin/fednode"
    [ $rc -ne 0 ] && grep -q "$prefix/bin/fednode" "$TMP/verify.out" ||
        { cat "$TMP/verify.out"; fail "without the binary in place, verify complains"; }
    ok "without $prefix/bin/fednode in place it complains: $(head -n 1 "$TMP/verify.out")"
    systemd-analyze security --offline=true --root="$ROOT" --threshold=20 fednode@site.service \
        >"$TMP/security.out" 2>&1; rc=$?
    level=$(sed -n 's/.*Overall exposure level for fednode@site.service: \([0-9.]*\).*/\1/p' "$TMP/security.out")
    [ $rc -eq 0 ] && [ -n "$level" ] || { tail -n 5 "$TMP/security.out"; fail "systemd-analyze security: exposure at most 2.0 (rc $rc)"; }
    ok "systemd-analyze security: exposure $level of 10"
fi

# ---- C: the plugin in an installed tree
PLUGIN=$BUILD/libfedcuda.so
if [ ! -f "$PLUGIN" ]; then note "skipped C: no $PLUGIN (no nvcc)"; exit 0; fi
if [ ! -e "$DATA/train-images-idx3-ubyte.gz" ] && [ ! -e "$DATA/train-images-idx3-ubyte" ]; then
    note "skipped C: no Fashion-MNIST in $DATA"; exit 0
fi
grep -aq "$prefix/lib/fednode" "$FEDNODE" || fail "$FEDNODE does not look in $prefix/lib/fednode"
ok "fednode looks in PREFIX/lib/fednode, PREFIX $prefix"
[ -f "$P/lib/fednode/libfedcuda.so" ] || fail "make install put the plugin in $prefix/lib/fednode"
# the installed tree moved elsewhere: ../lib/fednode beside the binary
mv "$P" "$TMP/inst"
FEDNODE_NO_REEXEC=1 FEDNODE_LOG=debug FEDNODE_PLUGIN_DIR= \
    "$TMP/inst/bin/fednode" train --device cuda --epochs 1 --model logreg \
    >"$TMP/train.log" 2>&1
grep -q "backend: loaded $TMP/inst/bin/../lib/fednode/libfedcuda.so" "$TMP/train.log" ||
    fail "the installed fednode did not load its plugin from ../lib/fednode"
ok "an installed fednode loads PREFIX/lib/fednode/libfedcuda.so beside it"
