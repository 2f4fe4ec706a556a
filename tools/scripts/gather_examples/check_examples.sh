#!/bin/bash
# Runs check_gather.py on every shipped example and checks each layout's verdict and matching
# ddpkit mode against the known answer (docs/contrastive.md records this run's output).
# Usage: bash tools/scripts/gather_examples/check_examples.sh   (needs /usr/bin/python3 with torch)
set -u
cd "$(dirname "$0")/../../.." && here=tools/scripts/gather_examples  # print repo-relative paths
fails=0
expect() {  # expect "TARGET [--arg ...]" "LAYOUT VERDICT-AND-MODE-REGEX"...
  local target=$1; shift
  local out
  out=$(/usr/bin/python3 "$here/../check_gather.py" $target --ranks "${RANKS:-3}" 2>&1)
  echo "$out"
  for want in "$@"; do
    if ! grep -Eq "^   ${want%% *} .*${want#* }" <<<"$out"; then
      echo "FAIL: $target: expected '$want'"; fails=$((fails + 1))
    fi
  done
  echo
}
expect "$here/plain_all_gather.py:gather" \
  "local biased: not a rescale +local x none$" "global no encoder gradient +global x none$"
expect "$here/slice_gather_layer.py:GatherLayer" \
  "local biased: not a rescale +local x slice$" "global a rescale by .* global x slice = avg$"
expect "$here/torch_nn_all_gather.py:gather" \
  "local exact +local x sum = allreduce_slice$" "global exact +global x sum = allreduce_slice$"
expect "$here/allreduce_gather_layer.py:GatherLayer" \
  "local exact +local x sum = allreduce_slice$" "global exact +global x sum = allreduce_slice$"
oc="$here/open_clip_like.py:gather_features"
expect "$oc --arg local_loss=False --arg gather_with_grad=False" "global a rescale by .* global x slice = avg$"
expect "$oc --arg local_loss=False --arg gather_with_grad=True" "global exact +global x sum = allreduce_slice$"
expect "$oc --arg local_loss=True --arg gather_with_grad=False" "local biased: not a rescale +local x none$"
expect "$oc --arg local_loss=True --arg gather_with_grad=True" "local exact +local x sum = allreduce_slice$"
if [ "$fails" -eq 0 ]; then echo "all examples give their known verdict"; else echo "$fails FAILED"; exit 1; fi
