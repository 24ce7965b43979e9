#!/bin/sh
# test_resnet8_procs.sh - ResNet-8 (examples/models/resnet8.cfg, batch norm
# in every block) federated over real fednode processes on 127.0.0.1: an
# aggregator with --model FILE (no evaluation) and three clients of 300
# Fashion-MNIST images each (--shard I/200), --max-steps 3 a round. Both
# rounds merge all three and commit; the exported model's running
# statistics moved from their initial 0 and 1 (averaged by sample weight,
# outside the merge strategy) and its num_batches_tracked is the
# aggregator's own (0: a counter is never averaged, and the aggregator does
# not train). Needs ./fednode (make) and Fashion-MNIST; exits 77 (skipped)
# without them; the statistics check needs /usr/bin/python3 with torch
# (skipped, said, without). KEEP=1 keeps the logs.
. "$(dirname "$0")/proc_lib.sh"

K=$TMP/keys
allow_keys "$K" agg c0 c1 c2
R8="$(dirname "$0")/../examples/models/resnet8.cfg"
COMMON="--data fashion-mnist --threads 1"
mkdir -p "$TMP/a"
# shellcheck disable=SC2086
start agg --role aggregator --keys "$K/agg" --allow "$K/allow.txt" --db "$TMP/a/agg.db" \
    --listen tcp://127.0.0.1:0 --port-file "$TMP/a/port" $COMMON --model "$R8" --no-eval \
    --rounds 2 --min-clients 3 --wait-clients 3 --deadline-ms 120000 --batch 32 --lr 0.05
wait_for "the aggregator wrote its port" 20 test -s "$TMP/a/port"
PORT=$(cat "$TMP/a/port")
for i in 0 1 2; do
    # shellcheck disable=SC2086
    start "c$i" --role client --keys "$K/c$i" --allow "$K/allow.txt" --db "$TMP/a/c$i.db" \
        --aggregator "tcp://127.0.0.1:$PORT" --aggregator-key agg --partition iid \
        --shard "$i/200" --max-steps 3 $COMMON
done
wait_for "round 2 merged" 300 logged agg "round 2 merged"
exits0 agg 60
for c in c0 c1 c2; do exits0 "$c" 60; done
for r in 1 2; do
    logged agg "round $r merged 3 of 3 (0 missing)" || fail "round $r merged the three"
done
"$FEDNODE" status --db "$TMP/a/agg.db" >"$TMP/status.txt" 2>&1 || fail "fednode status"
for r in 1 2; do # the round's row (900 samples) and its checkpoint
    awk -v r=$r '/^rounds/ { s = 1 } /^contributions/ { s = 0 } /^checkpoints/ { c = 1 }
        /^peers/ { c = 0 } s && $1 == r && $7 == 900 { n++ } c && $2 == r { n++ }
        END { exit n != 2 }' "$TMP/status.txt" ||
        { cat "$TMP/status.txt"; fail "round $r committed: its row of 900 samples and its checkpoint"; }
done
ok "ResNet-8 over 3 client processes: rounds 1 and 2 merged 3 of 3 (900 samples) and committed"

"$FEDNODE" export --db "$TMP/a/agg.db" --out "$TMP/r8.safetensors" >"$TMP/export.log" 2>&1 ||
    fail "fednode export: $(tail -n 2 "$TMP/export.log")"
PY=/usr/bin/python3
if [ ! -x "$PY" ] || ! "$PY" -c 'import torch' 2>/dev/null; then
    echo "skipped: the statistics check (no $PY with torch)"; exit 0
fi
if ! "$PY" -c 'import safetensors' 2>/dev/null; then
    PYTHONPATH="$(cd "$(dirname "$0")" && pwd)/support/py"; export PYTHONPATH
fi
"$PY" - "$TMP/r8.safetensors" <<'PY' || fail "ResNet-8's merged batch-norm statistics"
import sys
from safetensors import safe_open
with safe_open(sys.argv[1], framework="pt") as f:
    names = [k for k in f.keys() if k.endswith(".running_var")]
    assert len(names) == 9, names  # bn1, two per block, three shortcuts
    for k in names:
        base = k[: -len("running_var")]
        var, mean = f.get_tensor(k), f.get_tensor(base + "running_mean")
        n = f.get_tensor(base + "num_batches_tracked")
        assert (var != 1).any() and (mean != 0).any(), base + " did not move"
        assert n.dtype.is_floating_point is False and int(n) == 0, (base, n)
print("9 batch norms: running statistics merged, counters the aggregator's own (0)")
PY
ok "ResNet-8's exported statistics moved; every num_batches_tracked is the aggregator's 0"
