#!/bin/sh
# test_ditto_export.sh - Ditto's personal models leave a client's database
# with `fednode export --personal`: a fedsim run under --ditto-lambda keeps
# each client's database (--db-dir); each client's personal model exports,
# differs from the global model the aggregator exports and from another
# client's, and exports the same twice; the aggregator's database, which
# holds no personal model, is refused saying so, and a client's without
# --personal is refused naming it.
# Needs ./fednode, ./fedsim and Fashion-MNIST; exits 77 (skipped) without.
. "$(dirname "$0")/proc_lib.sh"
FEDSIM=${FEDSIM:-./fedsim}
[ -x "$FEDSIM" ] || { echo "skipped: no $FEDSIM (run make)"; exit 77; }

mkdir -p "$TMP/db"
"$FEDSIM" --data fashion-mnist --model mlp:16 --nodes 3 --rounds 2 --partition labels:2 \
    --ditto-lambda 0.1 --db-dir "$TMP/db" >"$TMP/sim.log" 2>&1 ||
    { cat "$TMP/sim.log"; fail "fedsim --ditto-lambda 0.1 --db-dir failed"; }
for who in node-1 node-2; do
    "$FEDNODE" export --db "$TMP/db/$who.db" --personal --out "$TMP/$who.safetensors" \
        >"$TMP/$who.log" 2>&1 || { cat "$TMP/$who.log"; fail "export --personal of $who"; }
done
"$FEDNODE" export --db "$TMP/db/node-1.db" --personal --out "$TMP/again.safetensors" \
    >/dev/null 2>&1 || fail "export --personal of node-1 again"
"$FEDNODE" export --db "$TMP/db/aggregator.db" --out "$TMP/global.safetensors" >/dev/null 2>&1 ||
    fail "export of the aggregator's global model"
cmp -s "$TMP/node-1.safetensors" "$TMP/again.safetensors" || fail "two exports of node-1 differ"
cmp -s "$TMP/node-1.safetensors" "$TMP/global.safetensors" && fail "node-1's personal model is the global one"
cmp -s "$TMP/node-1.safetensors" "$TMP/node-2.safetensors" && fail "node-1's and node-2's personal models are the same"
grep -q "12730 parameters" "$TMP/node-1.log" || { cat "$TMP/node-1.log"; fail "the personal model is mlp:16's"; }
ok "each client's personal model exports, its own, the same twice"

if "$FEDNODE" export --db "$TMP/db/aggregator.db" --personal --out "$TMP/x.safetensors" \
    >"$TMP/agg.log" 2>&1; then
    fail "export --personal of the aggregator's database accepted"
fi
grep -q "holds no personal model" "$TMP/agg.log" || { cat "$TMP/agg.log"; fail "refused without saying why"; }
ok "an aggregator's database is refused: no personal model"

if "$FEDNODE" export --db "$TMP/db/node-1.db" --out "$TMP/y.safetensors" >"$TMP/plain.log" 2>&1; then
    fail "export without --personal of a Ditto client's database accepted"
fi
grep -q "holds a personal model only (a client's under Ditto, --ditto-lambda): add --personal to export it" \
    "$TMP/plain.log" || { cat "$TMP/plain.log"; fail "the refusal names --personal"; }
ok "a Ditto client's database without --personal: refused, naming --personal"
