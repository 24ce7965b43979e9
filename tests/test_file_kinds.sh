#!/bin/sh
# test_file_kinds.sh - what each command says of a file of a kind it does
# not take: `fednode --help` says export writes .safetensors or .onnx;
# import of an .onnx file and eval of one are refused (2) saying what each
# takes, an empty .onnx file is said to be empty, and a file that is no
# .safetensors is said not to be one.
# Needs ./fednode only.
set -u
FEDNODE=${FEDNODE:-./fednode}
[ -x "$FEDNODE" ] || { echo "skipped: no $FEDNODE (run make)"; exit 77; }
TMP=$(mktemp -d) || exit 1
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $1"; exit 1; }
ok() { echo "ok: $1"; }
FEDNODE_NO_REEXEC=1; export FEDNODE_NO_REEXEC

"$FEDNODE" --help >"$TMP/help.txt" 2>&1 || fail "fednode --help"
grep -q "^  export  *write a checkpoint's model as .safetensors or .onnx (--format)$" "$TMP/help.txt" ||
    { cat "$TMP/help.txt"; fail "--help says export writes .onnx too"; }
ok "fednode --help: export writes .safetensors or .onnx"

# check_refused NAME STATUS TEXT CMD...: CMD exits STATUS with the line TEXT
check_refused() {
    name=$1 want=$2 text=$3; shift 3
    "$@" >"$TMP/$name.log" 2>&1
    rc=$?
    [ "$rc" -eq "$want" ] || { cat "$TMP/$name.log"; fail "$name: exit status $rc, wanted $want"; }
    grep -qxF -- "$text" "$TMP/$name.log" || { cat "$TMP/$name.log"; fail "$name: says /$text/"; }
}

# 180 kB whose first 8 bytes, read as a .safetensors header length, are 2^64 - 1
{ printf '\377\377\377\377\377\377\377\377'; head -c 180000 /dev/zero; } >"$TMP/m.onnx"
: >"$TMP/e.onnx"
check_refused import_onnx 2 "fednode: import: --in $TMP/m.onnx: an ONNX file; import takes a .safetensors file (fednode export writes one) (an ONNX model goes in as --model FILE.onnx of train, run, aggregate and fedsim)" \
    "$FEDNODE" import --in "$TMP/m.onnx" --out "$TMP/x.bin"
ok "import --in FILE.onnx: refused, saying import takes .safetensors"
check_refused eval_onnx 2 "fednode: eval: --model $TMP/m.onnx: an ONNX file; eval takes a trained model: a model file (train --out, import --out) or an export (FILE.safetensors) (an ONNX model goes in as --model FILE.onnx of train, run, aggregate and fedsim)" \
    "$FEDNODE" eval --model "$TMP/m.onnx"
ok "eval --model FILE.onnx: refused, saying what eval takes"
check_refused empty_onnx 1 "fednode: model: $TMP/e.onnx: an empty file, not an ONNX model" \
    "$FEDNODE" model "$TMP/e.onnx"
ok "an empty .onnx file: said to be empty"
cp "$TMP/m.onnx" "$TMP/m.safetensors"
check_refused import_junk 1 "fednode: import: $TMP/m.safetensors: size over the limit (its first 8 bytes, a .safetensors file's header length, say over 100 MiB: not a .safetensors file?)" \
    "$FEDNODE" import --in "$TMP/m.safetensors" --out "$TMP/x.bin"
ok "import of a file that is no .safetensors: said it may not be one"
