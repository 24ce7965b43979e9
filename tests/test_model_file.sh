#!/bin/sh
# test_model_file.sh - a layer file as --model: `fednode model` prints
# SimpleCNN's 44,426 parameters and ResNet-8's 77,754 (batch norm's running
# statistics counted apart, as PyTorch's buffers); `fednode train --model FILE` trains the
# graph (its spec, "g:...", is what the saved model holds) and `fednode
# eval` of the saved model gives the accuracy train printed; `fedsim` runs
# it federated; a file with a shape that does not fit is refused naming its
# line and the shapes so far, and a graph too big for a spec is refused
# saying so. Skips (77) without Fashion-MNIST.
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
