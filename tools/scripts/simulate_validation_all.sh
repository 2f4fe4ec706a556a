#!/usr/bin/env bash
# Every row of docs/simulate.md's validation (a), regenerated: the MLP, ResNet and GPT families
# on threads, gloo and mpi at 2-4 ranks over their bucket caps; DDP's options and the comm hooks
# (find_unused_parameters, static_graph, fp16, PowerSGD rank 1) at 2 ranks; then the questions'
# table; and, as root, the cross-host rows (netns_simulate_validation.sh). Each part writes its
# TSV into OUT and keeps its traces in OUT/traces; tools/scripts/simulate_table.py turns the TSVs
# into the tables, the error over all rows and OUT/validation.svg (docs/simulate_validation.svg),
# beside what bounds them: every row paired by repeat, the cap rows guessed unchanged from their
# calibration run, and each calibration's options run once more after its caps' runs (the
# "again" rows, AGAIN=0 leaves them out). About 60 minutes at 3 repeats on 2 cores, 95 at 5; run
# it holding the build lock, on a quiet machine. REUSE=1 runs nothing and predicts
# OUT/traces' runs again with the simulator built now (the questions and cross-host rows too,
# where their traces were kept); QUESTIONS=0 leaves the questions' table out, ACROSS=0 the
# cross-host rows, and PARTS="fp16 powersgd" runs only those loopback parts (the others' TSVs in
# OUT are kept: a batch resumed). REUSE=1 TWO_RUNS=1 calibrates each row from its calibration run
# and its largest cap's run together (`--calibrate A.json,B.json`) and writes only the rows
# neither run is into OUT/two_runs (the questions left out); TWO_RUNS=smallest, with its smallest
# cap's run instead, into OUT/two_runs_smallest. POOL="B1 B2 ..." (folders of earlier
# batches of the same rows) also writes OUT/pooled.md and OUT/pooled.svg: the tables and picture
# of this batch's repeats and theirs taken together (simulate_table.py --pool), each row a
# median over every batch's repeats.
#   tools/scripts/simulate_validation_all.sh OUT [REPEATS]
set -euo pipefail
OUT=${1:?usage: simulate_validation_all.sh OUT [REPEATS]}
REPEATS=${2:-3}
S=$(dirname "$0")
mkdir -p "$OUT"
case ${TWO_RUNS:-} in  # where the TSVs and tables go
  "") RESULTS=$OUT ;;
  smallest) RESULTS=$OUT/two_runs_smallest ;;
  1) RESULTS=$OUT/two_runs ;;
  *) echo "TWO_RUNS is 1 (the largest cap's run) or smallest, not '$TWO_RUNS'" >&2; exit 2 ;;
esac
mkdir -p "$RESULTS"
export STEPS=${STEPS:-20}
MLP=mlp:784,1024,1024,1024,10
RESNET=resnet:1,1,1,1,width=32,in=3,classes=10,stem=small
GPT=gpt:layers=2,heads=4,dim=128,ctx=64,vocab=256
VARIANT_SPECS="threads:2 gloo:2 mpi:2"
PARTS=${PARTS:-mlp resnet gpt find_unused static_graph fp16 powersgd}  # which to (re)run
run() {  # NAME, then VAR=value settings for simulate_validation.sh
  local name=$1
  shift
  [[ " $PARTS " == *" $name "* ]] || return 0
  echo "$(date -u +%H:%M:%S) $name" >&2
  env KEEP="$OUT/traces/$name" "$@" "$S/simulate_validation.sh" "$REPEATS" >"$RESULTS/$name.tsv.new"
  mv "$RESULTS/$name.tsv.new" "$RESULTS/$name.tsv"
}
run mlp MODEL=$MLP BATCH=64 CAPS=1,5,25
run resnet MODEL=$RESNET BATCH=32 CAPS=1,2,5
run gpt MODEL=$GPT BATCH=8 CAPS=0.25,0.5,1
run find_unused MODEL=$MLP BATCH=64 CAPS=1,5,25 SPECS="$VARIANT_SPECS" EXTRA=--find-unused-parameters
run static_graph MODEL=$MLP BATCH=64 CAPS=1,5,25 SPECS="$VARIANT_SPECS" EXTRA=--static-graph
run fp16 MODEL=$MLP BATCH=64 CAPS=1,5,25 SPECS="$VARIANT_SPECS" HOOK=fp16
run powersgd MODEL=$MLP BATCH=64 CAPS=1,5,25 SPECS="$VARIANT_SPECS" HOOK=powersgd:1
if [ "${QUESTIONS:-1}" = 1 ] && [ -z "${TWO_RUNS:-}" ] &&
  { [ -z "${REUSE:-}" ] || [ -d "$OUT/traces/questions" ]; }; then
  echo "$(date -u +%H:%M:%S) questions" >&2
  KEEP="$OUT/traces/questions" STEPS=30 "$S/simulate_questions.sh" "$REPEATS" \
    >"$OUT/questions.tsv.new"
  mv "$OUT/questions.tsv.new" "$OUT/questions.tsv"
fi
if [ -n "${REUSE:-}" ] && [ -d "$OUT/traces/netns" ]; then
  KEEP="$OUT/traces/netns" "$S/netns_simulate_validation.sh" "$REPEATS" >"$RESULTS/netns.tsv"
elif [ -z "${REUSE:-}" ] && [ "$(id -u)" = 0 ] && [ "${ACROSS:-1}" = 1 ]; then
  echo "$(date -u +%H:%M:%S) across hosts" >&2
  KEEP="$OUT/traces/netns" "$S/netns_simulate_validation.sh" "$REPEATS" >"$RESULTS/netns.tsv"
else
  echo "the cross-host rows left out (they need root; ACROSS=0 skips them)" >&2
fi
across=()
[ ! -s "$RESULTS/netns.tsv" ] || across=("across hosts=$RESULTS/netns.tsv")
R=$RESULTS
python3 "$S/simulate_table.py" --svg "$R/validation.svg" "MLP=$R/mlp.tsv" "ResNet=$R/resnet.tsv" \
  "GPT=$R/gpt.tsv" "find_unused_parameters=$R/find_unused.tsv" \
  "static_graph=$R/static_graph.tsv" "fp16 hook=$R/fp16.tsv" "PowerSGD rank 1=$R/powersgd.tsv" \
  "${across[@]}" | tee "$R/tables.md"
if [ -n "${POOL:-}" ]; then
  read -r -a pooled <<<"$R $POOL"  # POOL: a list of folders
  [ ${#across[@]} = 0 ] || across=("across hosts=netns.tsv")
  python3 "$S/simulate_table.py" --pool "${pooled[@]}" --svg "$R/pooled.svg" "MLP=mlp.tsv" \
    "ResNet=resnet.tsv" "GPT=gpt.tsv" "find_unused_parameters=find_unused.tsv" \
    "static_graph=static_graph.tsv" "fp16 hook=fp16.tsv" "PowerSGD rank 1=powersgd.tsv" \
    "${across[@]}" >"$R/pooled.md"
  echo "pooled with $POOL: $(grep '^all:' "$R/pooled.md")" >&2
fi
