#!/bin/sh
# make-keys.sh - identities for one aggregator and three clients, and the
# allow-list every one of them reads. Usage: make-keys.sh [DIR] (default
# ./keys). Keys are not passphrase-sealed here; set FEDNODE_PASSPHRASE or use
# --passphrase-file with fednode keygen for real sites.
set -eu
FEDNODE=${FEDNODE:-fednode}
dir=${1:-keys}
mkdir -p "$dir"
: > "$dir/allow.txt"
for name in aggregator hospital-a hospital-b hospital-c; do
    [ -f "$dir/$name/node.key" ] || FEDNODE_PASSPHRASE= "$FEDNODE" keygen --out "$dir/$name" >/dev/null
    echo "$name $("$FEDNODE" pubkey "$dir/$name")" >> "$dir/allow.txt"
done
chmod 600 "$dir/allow.txt"
echo "keys and allow-list in $dir:"
cat "$dir/allow.txt"
