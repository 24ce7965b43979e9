#!/bin/sh
# test_model_file.sh - a layer file as --model: `fednode model` prints
# SimpleCNN's 44,426 parameters and ResNet-8's 77,754 (batch norm's running
# statistics counted apart, as PyTorch's buffers); `fednode train --model FILE` trains the
# graph (its spec, "g:...", is what the saved model holds) and `fednode
# eval` of the saved model gives the accuracy train printed; `fedsim` runs
# it federated; a file with a shape that does not fit is refused naming its
# line and the shapes so far, and a graph too big for a spec is refused
# saying so; a net of layer and group norms and dropout prints, trains to
# the same bytes twice and trains under DP-SGD. Skips (77) without Fashion-MNIST.
. "$(dirname "$0")/proc_lib.sh"
FEDSIM=${FEDSIM:-./fedsim}
CFG="$(dirname "$0")/../examples/models/simplecnn.cfg"
export FEDNODE_NO_REEXEC=1

"$FEDNODE" model "$CFG" >"$TMP/model.txt" 2>&1 || { cat "$TMP/model.txt"; fail "fednode model"; }
grep -q '^ *total  *44426 ' "$TMP/model.txt" || { cat "$TMP/model.txt"; fail "SimpleCNN has 44426 parameters"; }
ok "fednode model: SimpleCNN, 44426 parameters"
R8="$(dirname "$0")/../examples/models/resnet8.cfg"
"$FEDNODE" model "$R8" >"$TMP/r8.txt" 2>&1 || { cat "$TMP/r8.txt"; fail "fednode model resnet8.cfg"; }
grep -q '^ *total  *77754 ' "$TMP/r8.txt" && grep -q '^# and 681 values not trained' "$TMP/r8.txt" ||
    { cat "$TMP/r8.txt"; fail "ResNet-8 has PyTorch's 77754 parameters, and 681 buffer values"; }
ok "fednode model: ResNet-8, 77754 parameters (PyTorch's count) and 681 running statistics"

"$FEDNODE" train --model "$CFG" --epochs 1 --shard 0/30 --out "$TMP/s.bin" >"$TMP/train.log" 2>&1 ||
    fail "fednode train --model FILE"
grep -q '^# fednode train: g:conv1=C6k5,R,Mk2,conv2=C16k5,R,Mk2,F,fc1=L120,R,fc2=L84,R,fc3=L ' \
    "$TMP/train.log" || fail "train runs the file's graph as its spec"
acc=$(sed -n 's/.*test_acc \([0-9.]*\).*/\1/p' "$TMP/train.log")
"$FEDNODE" eval --model "$TMP/s.bin" >"$TMP/eval.log" 2>&1 || fail "fednode eval of the saved model"
grep -q "accuracy $acc\$" "$TMP/eval.log" || { cat "$TMP/eval.log"; fail "eval gives train's $acc"; }
ok "train --model FILE, then eval of what it saved: accuracy $acc both"

"$FEDSIM" --model "$CFG" --nodes 4 --rounds 1 >"$TMP/sim.log" 2>&1 || fail "fedsim --model FILE"
grep -q '^round    1 ' "$TMP/sim.log" || fail "fedsim ran a round of the file's graph"
ok "fedsim --model FILE: a federated round"

# layer and group norms, dropout, a bias-free conv: printed by `fednode
# model`, trained twice from the same seed to the same bytes (dropout's
# masks are seeded), and trained under DP-SGD (every trainable layer has its
# per-sample norm)
cat >"$TMP/norms.cfg" <<CFG
[input] shape = 1,28,28
[conv] name = c1 out = 8 kernel = 5 stride = 2 bias = 0
[groupnorm] name = gn1 groups = 4
[relu]
[conv] name = c2 out = 8 kernel = 3 stride = 2
[layernorm] name = ln1
[relu]
[dropout] name = drop1 p = 0.25
[flatten]
[linear] name = fc1 out = 32
[layernorm] name = ln2
[relu]
[dropout] name = drop2
[linear] name = head out = classes
CFG
"$FEDNODE" model "$TMP/norms.cfg" >"$TMP/norms.txt" 2>&1 || { cat "$TMP/norms.txt"; fail "fednode model norms.cfg"; }
for row in '^ *0  conv  *c1  *8x12x12  *200 ' '^ *1  groupnorm  *gn1  *8x12x12  *16 ' \
    '^ *4  layernorm  *ln1  *8x5x5  *400 ' '^ *6  dropout  *drop1  *8x5x5  *0 ' \
    '^ *9  layernorm  *ln2  *32x1x1  *64 ' '^ *total  *8026 '; do
    grep -q "$row" "$TMP/norms.txt" || { cat "$TMP/norms.txt"; fail "fednode model prints /$row/"; }
done
ok "fednode model: groupnorm, layernorm and dropout rows, 8026 parameters"
for run in a b; do
    "$FEDNODE" train --model "$TMP/norms.cfg" --epochs 1 --shard 0/30 --out "$TMP/n$run.bin" \
        >"$TMP/n$run.log" 2>&1 || { cat "$TMP/n$run.log"; fail "train norms.cfg"; }
done
cmp -s "$TMP/na.bin" "$TMP/nb.bin" || fail "two runs of a dropout net from one seed give one model"
"$FEDNODE" train --model "$TMP/norms.cfg" --epochs 1 --shard 0/30 --dp-sgd >"$TMP/ndp.log" 2>&1 ||
    { cat "$TMP/ndp.log"; fail "train norms.cfg --dp-sgd"; }
ok "norms and dropout train, the same bytes twice, and under DP-SGD"

printf '[input] shape = 1,28,28\n[conv] name = c1 out = 4 kernel = 3 stride = 4\n[relu]\n[conv] name = c2 out = 4 kernel = 9\n[linear] out = classes\n' >"$TMP/bad.cfg"
if "$FEDNODE" train --model "$TMP/bad.cfg" --epochs 1 --shard 0/30 >"$TMP/bad.log" 2>&1; then
    fail "a shape that does not fit is refused"
fi
grep -q "bad.cfg:4: .*node 2 (conv 'c2') on input 4x7x7: the window is larger than the padded input; shapes so far: input 1x28x28, c1 4x7x7, relu 4x7x7\$" \
    "$TMP/bad.log" || { cat "$TMP/bad.log"; fail "the refusal names the line, the layer and the shapes so far"; }
ok "a shape that does not fit: $(tail -n 1 "$TMP/bad.log")"

{ echo '[input] features = 8'; i=0; while [ $i -lt 30 ]; do echo "[linear] name = layer$i out = 8"; i=$((i + 1)); done
  echo '[linear] out = classes'; } >"$TMP/big.cfg"
# a graph past a spec's 127 bytes: named by its id, built from its whole text
"$FEDNODE" train --model "$TMP/big.cfg" --epochs 1 --shard 0/30 >"$TMP/big.log" 2>&1 ||
    { cat "$TMP/big.log"; fail "a graph past a spec's 127 bytes trains"; }
grep -q "train: --model $TMP/big.cfg is g#[0-9a-f]\{32\}\$" "$TMP/big.log" ||
    { cat "$TMP/big.log"; fail "its id is g# and 32 hex digits"; }
ok "a graph past a spec's 127 bytes trains, named $(grep -o 'g#[0-9a-f]*' "$TMP/big.log" | head -n 1)"
"$FEDSIM" --model "$TMP/big.cfg" --nodes 3 --rounds 1 >"$TMP/bigsim.log" 2>&1 ||
    { cat "$TMP/bigsim.log"; fail "fedsim --model FILE of a graph past a spec's 127 bytes"; }
grep -q "merged 3" "$TMP/bigsim.log" ||
    { cat "$TMP/bigsim.log"; fail "every client built the graph its MODEL carried"; }
ok "fedsim: a graph past a spec's 127 bytes travels in the MODEL, every client merged"

# a --model that is neither a preset nor a file says so, once prefixed
if "$FEDNODE" train --model "$TMP/absent.cfg" --epochs 1 >"$TMP/absent.log" 2>&1; then
    fail "a --model that names no file is refused"
fi
grep -qx "fednode: train: --model '$TMP/absent.cfg': no such file, and not a preset (logreg, mlp:W1,W2,..., cnn)" \
    "$TMP/absent.log" || { cat "$TMP/absent.log"; fail "the refusal says no such file"; }
if "$FEDSIM" --model "$TMP" --nodes 2 --rounds 1 >"$TMP/dir.log" 2>&1; then
    fail "fedsim --model DIR is refused"
fi
grep -qx "fedsim: --model '$TMP': not a regular file, and not a preset (logreg, mlp:W1,W2,..., cnn)" \
    "$TMP/dir.log" || { cat "$TMP/dir.log"; fail "fedsim's refusal is prefixed once"; }
ok "a --model naming no file, or a folder: refused, saying so"

# a file whose declared input the data replaces trains over the data's (as
# documented) and says so, naming the file; a build error names it too
{ echo 'f1,f2,f3,label'; i=0; while [ $i -lt 60 ]; do echo "$i.5,$((i % 7)),$((i % 3)),$((i % 2))"; i=$((i + 1)); done; } >"$TMP/three.csv"
printf '[input] features = 5\n[linear] out = 4\n[relu]\n[linear] out = classes\n[output] loss = cross_entropy\n' >"$TMP/five.cfg"
"$FEDNODE" train --model "$TMP/five.cfg" --data "$TMP/three.csv" --epochs 1 >"$TMP/five.log" 2>&1 ||
    { cat "$TMP/five.log"; fail "a declared input the data replaces still trains"; }
grep -q "warn: train: --model $TMP/five.cfg declares its input 5 features, --data $TMP/three.csv gives 3 features: the model is built over the data's" \
    "$TMP/five.log" || { cat "$TMP/five.log"; fail "the replaced input is said, naming the file"; }
if "$FEDNODE" train --model "$CFG" --data "$TMP/three.csv" --epochs 1 >"$TMP/cnn3.log" 2>&1; then
    fail "SimpleCNN over 3 features is refused"
fi
grep -q "fednode: train: $CFG: shape mismatch" "$TMP/cnn3.log" ||
    { cat "$TMP/cnn3.log"; fail "the build error names the file, not its graph's spec"; }
ok "train --model FILE: a declared input the data replaces is said; a build error names the file"

# fedsim over a regression (an mse model, --task regression): each row gives
# the global model's mse, not an accuracy of 0; --personal-eval, which
# scores accuracies, is refused
printf '[input] features = 3\n[linear] out = 1\n[output] loss = mse\n' >"$TMP/reg.cfg"
"$FEDSIM" --model "$TMP/reg.cfg" --data "$TMP/three.csv" --task regression --nodes 2 --rounds 3 \
    >"$TMP/regsim.log" 2>&1 || { cat "$TMP/regsim.log"; fail "fedsim of a regression"; }
m1=$(sed -n 's/^round    1 .* mse \([0-9.]*\) .*/\1/p' "$TMP/regsim.log")
m3=$(sed -n 's/^round    3 .* mse \([0-9.]*\) .*/\1/p' "$TMP/regsim.log")
[ -n "$m1" ] && [ -n "$m3" ] && awk -v a="$m1" -v b="$m3" 'BEGIN { exit !(a > 0 && b > 0 && b < a) }' ||
    { cat "$TMP/regsim.log"; fail "fedsim's rows give the regression's mse, falling (round 1 '$m1', round 3 '$m3')"; }
if "$FEDSIM" --model "$TMP/reg.cfg" --data "$TMP/three.csv" --task regression --nodes 2 --rounds 1 \
    --personal-eval >"$TMP/regpe.log" 2>&1; then
    fail "--personal-eval of a regression is refused"
fi
grep -q "personal-eval scores each client's accuracy: a regression (--task regression) has none" \
    "$TMP/regpe.log" || { cat "$TMP/regpe.log"; fail "the refusal says why"; }
if "$FEDSIM" --model "$TMP/reg.cfg" --data "$TMP/three.csv" --task regression --nodes 3 --rounds 1 \
    --role peer --topology ring >"$TMP/regpeer.log" 2>&1; then
    fail "peers over a regression are refused"
fi
grep -q "task regression runs with an aggregator" "$TMP/regpeer.log" ||
    { cat "$TMP/regpeer.log"; fail "the peers' refusal says why"; }
ok "fedsim of a regression: rows give the mse ($m1 to $m3); --personal-eval and peers refused, saying why"
