#!/bin/sh
# test_symbols.sh - the library's names say what a program may call. A
# header of a library module (the Makefile's MODULES) is internal when its
# name ends in _impl.h or _hooks.h, else public. Checked on $BUILD/libfednode.a
# (nm) against the headers' declarations (gcc -aux-info, each header alone;
# objects by their extern line): every global symbol starts with fed_ or fedi_;
# a fed_ one is declared in a public header, a fedi_ one in none; fed_log,
# fed_calloc and fed_free (what libfedcuda.so resolves from the program,
# -rdynamic) are exported, and where the plugin is built ./fednode exports
# every fed_ name it leaves undefined. The programs' code ($BUILD/libfedapp.a,
# the two main()s) defines only fed_ names and calls no fedi_ one.
# Skips (77) without the library, nm, gcc or perl.
set -u
BUILD=${BUILD:-build}
LIB=$BUILD/libfednode.a
APPLIB=$BUILD/libfedapp.a
skip() { echo "skipped: $1"; exit 77; }
[ -f "$LIB" ] || skip "no $LIB (run make)"
[ -f "$APPLIB" ] || skip "no $APPLIB (run make)"
for t in nm gcc perl; do
    command -v $t >/dev/null 2>&1 || skip "no $t"
done
TMP=$(mktemp -d) || exit 1
trap 'rm -rf "$TMP"' EXIT
bad=0
fail() { echo "FAIL: $1"; bad=1; }
ok() { echo "ok: $1"; }

MODULES=$(sed -n 's/^MODULES[[:space:]]*:=[[:space:]]*//p' Makefile)
[ -n "$MODULES" ] || { echo "FAIL: no MODULES line in Makefile"; exit 1; }
internal_header() { case "$1" in *_impl.h | *_hooks.h) return 0 ;; esac; return 1; }

# "NAME HEADER" for each function and extern object each module header declares
CFLAGS="-std=c11 -D_GNU_SOURCE -I. $(pkg-config --cflags openblas 2>/dev/null)"
: >"$TMP/decl"
for m in $MODULES; do
    for h in "$m"/*.h; do
        [ -f "$h" ] || continue
        # shellcheck disable=SC2086
        if ! gcc $CFLAGS -fsyntax-only -aux-info "$TMP/aux" -x c "$h" 2>"$TMP/err"; then
            cat "$TMP/err"
            fail "$h compiles on its own"
            continue
        fi
        perl -ne 'print "$2 $1\n" if m{^/\* (?:\./)?([^:]+):\d+:\w+ \*/ .*?\b([A-Za-z_]\w*) \(}
                  && $1 !~ m{^/}' "$TMP/aux" >>"$TMP/decl"
        perl -0 -ne 's{/\*.*?\*/}{}gs; s{//[^\n]*}{}g;
            while (/\bextern\b[^;(){}]*?\b([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)*;/g) { print "$1 $ARGV\n" }' \
            "$h" >>"$TMP/decl"
    done
done
sort -u "$TMP/decl" -o "$TMP/decl"
awk '{print $2}' "$TMP/decl" | sort -u | while read -r h; do
    internal_header "$h" && echo "$h"
done >"$TMP/internal_headers"
[ -s "$TMP/internal_headers" ] || fail "some header is internal (*_impl.h, *_hooks.h)"

# the public and the internal names, by their headers
awk 'NR == FNR { internal[$1] = 1; next } !($2 in internal) { print $1 }' \
    "$TMP/internal_headers" "$TMP/decl" | sort -u >"$TMP/public"

# the code protobuf-c generates from onnx.proto (onnx__*, protobuf_c_*) keeps its names
nm -A -g --defined-only "$LIB" |
    awk 'NF == 3 && $2 ~ /^[A-Z]$/ && $1 !~ /:onnx\.pb-c\.o:/ { print $3 }' | sort -u >"$TMP/syms"
n=$(wc -l <"$TMP/syms")
[ "$n" -gt 100 ] || fail "$LIB has its global symbols ($n)"

grep -v '^fedi\{0,1\}_' "$TMP/syms" >"$TMP/unprefixed"
if [ -s "$TMP/unprefixed" ]; then
    fail "global symbols of $LIB without fed_ or fedi_: $(tr '\n' ' ' <"$TMP/unprefixed")"
else
    ok "each of the $n global symbols of $LIB starts with fed_ or fedi_"
fi

grep '^fed_' "$TMP/syms" | comm -23 - "$TMP/public" >"$TMP/fed_not_public"
if [ -s "$TMP/fed_not_public" ]; then
    fail "fed_ symbols declared in no public header (internal: fedi_ or static): $(tr '\n' ' ' <"$TMP/fed_not_public")"
else
    ok "every fed_ symbol ($(grep -c '^fed_' "$TMP/syms")) is declared in a public header"
fi

grep '^fedi_' "$TMP/syms" | comm -12 - "$TMP/public" >"$TMP/fedi_public"
if [ -s "$TMP/fedi_public" ]; then
    fail "fedi_ symbols declared in a public header: $(tr '\n' ' ' <"$TMP/fedi_public")"
else
    ok "no fedi_ symbol ($(grep -c '^fedi_' "$TMP/syms")) is declared in a public header"
fi

# what the CUDA plugin resolves from the program
for s in fed_log fed_calloc fed_free; do
    if nm -g --defined-only "$LIB" | grep -q " T $s\$" && grep -qx "$s" "$TMP/public"; then
        ok "$s exported and public (the CUDA plugin's)"
    else
        fail "$s is a global function of $LIB declared in a public header (libfedcuda.so needs it)"
    fi
done

# what the plugin (when built) leaves undefined, fednode exports (-rdynamic)
FEDNODE=${FEDNODE:-./fednode}
if [ -f "$BUILD/libfedcuda.so" ] && [ -x "$FEDNODE" ]; then
    nm -D -u "$BUILD/libfedcuda.so" | awk '{ print $NF }' | grep '^fed' | sort -u >"$TMP/plugin_needs"
    nm -D --defined-only "$FEDNODE" | awk '$2 == "T" { print $3 }' | sort -u >"$TMP/fednode_exports"
    comm -23 "$TMP/plugin_needs" "$TMP/fednode_exports" >"$TMP/plugin_missing"
    if [ -s "$TMP/plugin_missing" ]; then
        fail "$FEDNODE does not export what libfedcuda.so needs: $(tr '\n' ' ' <"$TMP/plugin_missing")"
    else
        ok "$FEDNODE exports what libfedcuda.so needs: $(tr '\n' ' ' <"$TMP/plugin_needs")"
    fi
else
    echo "(no $BUILD/libfedcuda.so or $FEDNODE: the plugin's needs not checked)"
fi

# the programs
progs="$APPLIB"
for o in "$BUILD/app/fednode.o" "$BUILD/app/fedsim.o"; do [ -f "$o" ] && progs="$progs $o"; done
# shellcheck disable=SC2086
nm -g --defined-only $progs 2>/dev/null | awk 'NF == 3 && $2 ~ /^[A-Z]$/ { print $3 }' |
    grep -v '^fed_' | grep -v '^main$' | sort -u >"$TMP/app_bad"
if [ -s "$TMP/app_bad" ]; then
    fail "the programs' code defines names other than fed_: $(tr '\n' ' ' <"$TMP/app_bad")"
else
    ok "the programs' code defines fed_ names only"
fi
# shellcheck disable=SC2086
nm -u $progs 2>/dev/null | awk '{ print $NF }' | grep '^fedi_' | sort -u >"$TMP/app_calls"
if [ -s "$TMP/app_calls" ]; then
    fail "the programs call internal names: $(tr '\n' ' ' <"$TMP/app_calls")"
else
    ok "the programs call no fedi_ name"
fi
exit $bad
