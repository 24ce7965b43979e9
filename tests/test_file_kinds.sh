#!/bin/sh
# test_file_kinds.sh - what each command says of a file of a kind it does
# not take: `fednode --help` says export writes .safetensors or .onnx.
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
