#!/usr/bin/env bash
# Builds probe.cc (Debian's libgloo-dev only) and times a 2-rank Gloo allreduce on loopback:
# caller or hand-off thread × Gloo's loop thread as Gloo makes it or under SCHED_BATCH,
# interleaved, REPEATS times per size; prints the median (range) µs of each. See
# docs/performance.md ("Allreduce", Gloo) for what it showed.
#
#   tools/scripts/gloo_loop_probe/probe.sh [SIZES...]     # default: 4096 65536 1048576 16777216
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
g++ -O2 -std=c++20 -pthread "$here/probe.cc" -lgloo -o "$work/probe"
repeats=${REPEATS:-3}
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(4096 65536 1048576 16777216)
run() {  # mode policy bytes -> µs per call on rank 0
  local store="$work/store-$RANDOM$RANDOM"
  mkdir "$store"
  local iters=$(( $3 >= 1048576 ? 100 : 1000 ))
  "$work/probe" 1 "$store" "$1" "$2" "$3" "$iters" &
  local other=$!
  timeout 120 "$work/probe" 0 "$store" "$1" "$2" "$3" "$iters"
  wait "$other"
}
printf '%10s  %-24s %-24s %-24s %-24s\n' bytes "caller, Gloo's loop" "handoff, Gloo's loop" \
  "caller, batch loop" "handoff, batch loop"
for bytes in "${sizes[@]}"; do
  declare -A t=()
  for ((r = 0; r < repeats; r++)); do
    for v in "caller gloo" "handoff gloo" "caller batch" "handoff batch"; do
      t["$v"]+="$(run $v "$bytes") "
    done
  done
  line=$(printf '%10s' "$bytes")
  for v in "caller gloo" "handoff gloo" "caller batch" "handoff batch"; do
    line+=$(echo "${t[$v]}" | tr ' ' '\n' | sed '/^$/d' | sort -g |
      awk '{a[NR]=$1} END {printf "  %-24s", sprintf("%.0f (%.0f-%.0f)", a[int((NR+1)/2)], a[1], a[NR])}')
  done
  echo "$line"
  unset t
done
