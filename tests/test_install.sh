#!/bin/sh
# test_install.sh - where `make install` puts the CUDA plugin is where fednode
# looks: an installed tree (PREFIX/bin/fednode, PREFIX/lib/fednode/
# libfedcuda.so) loads the plugin from ../lib/fednode beside the binary,
# wherever the tree sits; and the folder compiled into fednode is the
# PREFIX this build was made for ($BUILD/prefix, from the Makefile), so
# `make install PREFIX=/opt/x` needs no FEDNODE_PLUGIN_DIR. No GPU needed:
# the plugin loads and then finds no device. Skips (77) without the plugin
# (no nvcc) or without the data the train command reads.
. "$(dirname "$0")/proc_lib.sh"

BUILD=${BUILD:-build}
PLUGIN=$BUILD/libfedcuda.so
if [ ! -f "$PLUGIN" ]; then echo "skipped: no $PLUGIN (no nvcc)"; exit 77; fi

# the compiled-in folder is the Makefile's PREFIX
prefix=$(cat "$BUILD/prefix" 2>/dev/null) || fail "no $BUILD/prefix (the Makefile writes it)"
grep -aq "$prefix/lib/fednode" "$FEDNODE" || fail "$FEDNODE does not look in $prefix/lib/fednode"
ok "fednode looks in PREFIX/lib/fednode, PREFIX $prefix"

# an installed tree, as `make install PREFIX=$TMP/inst` lays it out
mkdir -p "$TMP/inst/bin" "$TMP/inst/lib/fednode"
cp "$FEDNODE" "$TMP/inst/bin/fednode"
cp "$PLUGIN" "$TMP/inst/lib/fednode/libfedcuda.so"
FEDNODE_NO_REEXEC=1 FEDNODE_LOG=debug FEDNODE_PLUGIN_DIR= \
    "$TMP/inst/bin/fednode" train --device cuda --epochs 1 --model logreg \
    >"$TMP/train.log" 2>&1
grep -q "backend: loaded $TMP/inst/bin/../lib/fednode/libfedcuda.so" "$TMP/train.log" ||
    fail "the installed fednode did not load its plugin from ../lib/fednode"
ok "an installed fednode loads PREFIX/lib/fednode/libfedcuda.so beside it"
