#!/bin/sh
# test_man.sh - the man pages the build writes ($BUILD/man/fednode.1 and
# fedsim.1, their option sections from `PROG --help-man`, the tables --help
# prints) render without a warning (`mandoc -Tlint` prints nothing; man -l
# and groff with warnings on say nothing on stderr), and the options each
# lists equal --help's: per fednode command (each "fednode CMD" subsection
# against `fednode CMD --help`) and for fedsim, flag and type alike, read
# from the rendered page. Skips (77) with neither mandoc nor groff.
set -u
BUILD=${BUILD:-build}
FEDNODE=${FEDNODE:-./fednode}
FEDSIM=${FEDSIM:-./fedsim}
TMP=$(mktemp -d) || exit 1
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $1"; exit 1; }
ok() { echo "ok: $1"; }
for f in "$FEDNODE" "$FEDSIM"; do [ -x "$f" ] || { echo "skipped: no $f (run make)"; exit 77; }; done
if ! command -v mandoc >/dev/null 2>&1 && ! command -v groff >/dev/null 2>&1; then
    echo "skipped: neither mandoc nor groff to render the pages (make deps installs mandoc)"; exit 77
fi
FEDNODE_NO_REEXEC=1; export FEDNODE_NO_REEXEC

# render FILE: plain text, 100 columns, no overstrike
render() {
    if command -v mandoc >/dev/null 2>&1; then
        mandoc -Tascii -Owidth=100 "$1" | sed 's/.\x08//g'
    else
        groff -man -Tascii -rLL=100n -P-cbou "$1"
    fi
}
# the options --help lists: "--name T" or "--name", one a line
help_opts() { sed -n 's/^  \(--[a-z0-9-]*\)\( [NXS]\)\{0,1\}  .*/\1\2/p'; }
# the option tags of a rendered block (7 columns in: a .TP tag)
man_opts() { sed -n 's/^       \(--[a-z0-9-]*\)\( [NXS]\)\{0,1\}\( .*\)\{0,1\}$/\1\2/p'; }

for p in fednode fedsim; do
    page=$BUILD/man/$p.1
    [ -f "$page" ] || fail "$page was built (make builds the man pages)"
    if command -v mandoc >/dev/null 2>&1; then
        mandoc -Tlint "$page" >"$TMP/lint" 2>&1; rc=$?
        [ $rc -eq 0 ] && [ ! -s "$TMP/lint" ] || { cat "$TMP/lint"; fail "mandoc -Tlint $page is clean"; }
        ok "mandoc -Tlint $page: clean"
    fi
    if command -v groff >/dev/null 2>&1; then
        groff -man -ww -z "$page" >"$TMP/groff" 2>&1
        [ ! -s "$TMP/groff" ] || { cat "$TMP/groff"; fail "groff -man -ww $page warns"; }
        ok "groff -man -ww $page: no warning"
    fi
    if command -v man >/dev/null 2>&1; then
        MANWIDTH=80 man --warnings -l "$page" >"$TMP/man.out" 2>"$TMP/man.err"
        [ ! -s "$TMP/man.err" ] && [ -s "$TMP/man.out" ] || { cat "$TMP/man.err"; fail "man -l $page renders without a warning"; }
        ok "man --warnings -l $page: no warning"
    fi
    render "$page" >"$TMP/$p.txt"
    [ -s "$TMP/$p.txt" ] || fail "$page renders"
done

# fednode: each command's subsection against its --help
cmds=$("$FEDNODE" --help | sed -n 's/^  \([a-z][a-z]*\)  .*/\1/p')
[ "$(echo "$cmds" | wc -w)" -ge 10 ] || fail "fednode --help lists its commands"
for c in $cmds; do
    "$FEDNODE" "$c" --help | help_opts >"$TMP/help.$c"
    # the lines from "   fednode CMD" to the next subsection or section
    awk -v h="   fednode $c" '$0 == h { on = 1; next } on && (/^   [a-z]/ || /^[A-Z]/) { exit } on' \
        "$TMP/fednode.txt" | man_opts >"$TMP/man.$c"
    grep -q "^   fednode $c\$" "$TMP/fednode.txt" || fail "fednode(1) has a subsection for fednode $c"
    diff "$TMP/help.$c" "$TMP/man.$c" >"$TMP/diff" ||
        { cat "$TMP/diff"; fail "fednode(1)'s options of $c equal fednode $c --help's"; }
    n=$(grep -c . "$TMP/help.$c")
    ok "fednode $c: the page lists the $n options --help lists, in its order"
done
# fedsim: the OPTIONS section against --help
"$FEDSIM" --help | help_opts >"$TMP/help.fedsim"
awk '/^OPTIONS$/ { on = 1; next } on && /^[A-Z]/ { exit } on' "$TMP/fedsim.txt" | man_opts >"$TMP/man.fedsim"
[ "$(grep -c . "$TMP/help.fedsim")" -ge 30 ] || fail "fedsim --help lists its options"
diff "$TMP/help.fedsim" "$TMP/man.fedsim" >"$TMP/diff" ||
    { cat "$TMP/diff"; fail "fedsim(1)'s options equal fedsim --help's"; }
ok "fedsim: the page lists the $(grep -c . "$TMP/help.fedsim") options --help lists, in its order"
