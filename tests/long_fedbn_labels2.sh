#!/bin/sh
# long_fedbn_labels2.sh - `make test-long`: FedBN under label skew, where a
# batch norm over the logits (examples/models/resnet8_fedbn.cfg) lets each
# site keep a scale and shift per class; the run and its assertions are
# long_fedbn_resnet8.sh's FEDBN_CASE=labels2 (see there).
FEDBN_CASE=labels2 exec sh "$(dirname "$0")/long_fedbn_resnet8.sh"
