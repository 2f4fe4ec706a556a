#!/usr/bin/env bash
# docs/simulate.md's "questions users ask": for each, `ddpkit simulate --calibrate` predicts the
# step of a DDP variant from a short run without it, and `ddpkit train --trace` measures that
# variant here, same model, backend and world. Per repeat: the calibration runs (DDP's default
# options; find_unused_parameters on, whose trace times the graph search; each comm hook at
# another bucket cap, whose trace times the hook's own work), then one run per variant. Prints
# one TSV row per (repeat, question): predicted and measured step in ms, the optimizer left out
# (tools/scripts/trace_step_ms.py; per micro-batch for no_sync), and the calibration run's own
# step beside them; `simulate_table.py --questions rows.tsv` makes docs/simulate.md's table.
# Run it holding the build lock.
#   tools/scripts/simulate_questions.sh [REPEATS] > rows.tsv
#   BACKEND=gloo WORLD=2 tools/scripts/simulate_questions.sh 1
#   KEEP=dir ... keeps every repeat's traces (dir/R/NAME.json); REUSE=1 KEEP=dir runs nothing and
#   predicts them again with the simulator built now
set -euo pipefail
B=${DDPKIT:-build/bin/ddpkit}
MODEL=${MODEL:-mlp:784,1024,1024,1024,10}
BATCH=${BATCH:-64}
STEPS=${STEPS:-30}
BACKEND=${BACKEND:-gloo}
WORLD=${WORLD:-2}
REPEATS=${1:-3}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
. "$(dirname "$0")/traced_ranks.sh"
# `ddpkit train` on the world, traced to $OUT/NAME.json.
train() {
  local name=$1
  shift
  traced_ranks "$BACKEND" "$WORLD" "$OUT/$name.json" train --model "$MODEL" --batch-size "$BATCH" \
    --steps "$STEPS" "$@"
}
# The predicted step (optimizer left out; per micro-batch with --no-sync-every) from TRACE.
predict() {
  local trace=$1
  shift
  $B simulate --model "$MODEL" --batch-size "$BATCH" --world-size "$WORLD" \
    --calibrate "$OUT/$trace.json" --json "$@" >"$OUT/s.json"
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); k=d['no_sync_every']
print(d['worlds'][0]['iteration_ms'] - d.get('optimizer_ms', 0) / k)" "$OUT/s.json"
}
measured() { python3 "$(dirname "$0")/trace_step_ms.py" "$OUT/$1.json"; }
# A question's row: its prediction from the calibration run ($3), its measured run ($2), and
# that calibration run's own step (the guess that the variant changes nothing).
row() { echo -e "$r\t$1\t$(predict "${@:3}")\t$(measured "$2")\t$(measured "$3")"; }
# One repeat's runs: the calibrations and one per variant (kept in $KEEP/R when KEEP is set).
runs() {
  train base
  train find --find-unused-parameters
  train static --static-graph
  train view --gradient-as-bucket-view
  train fp16 --comm-hook fp16
  train powersgd --comm-hook powersgd --powersgd-rank 1 --powersgd-start-iter 2
  # A hook's own work is measured from a run with it: short runs at another bucket cap.
  train fp16cal --comm-hook fp16 --bucket-cap-mb 5
  train powersgdcal --comm-hook powersgd --powersgd-rank 1 --powersgd-start-iter 2 \
    --bucket-cap-mb 5
  train accum --grad-accum 4
  [ -z "${KEEP:-}" ] || { mkdir -p "$KEEP/$1" && cp "$OUT"/*.json "$KEEP/$1"; }
}
# One repeat's rows: each question's prediction beside its measured run.
rows() {
  row "default options (the calibration run)" base base
  row "find_unused_parameters on" find base --find-unused-parameters
  row "find_unused_parameters on, priced by its own run" find find --find-unused-parameters
  row "find_unused_parameters off, from a run with it on" base find
  row "static_graph" static base --static-graph
  row "gradient_as_bucket_view" view base --gradient-as-bucket-view
  row "fp16 compression hook, estimated from a run without it" fp16 base --hook fp16
  row "fp16 compression hook, calibrated from a run with it (cap 5)" fp16 fp16cal --hook fp16
  row "PowerSGD rank 1, estimated from a run without it" powersgd base --hook powersgd:1
  row "PowerSGD rank 1, calibrated from a run with it (cap 5)" powersgd powersgdcal \
    --hook powersgd:1
  row "no_sync, synced every 4th micro-batch" accum base --no-sync-every 4
}
[ -z "${REUSE:-}" ] || [ -n "${KEEP:-}" ] || { echo "REUSE needs KEEP, the traces' folder" >&2; exit 2; }
echo -e "repeat\tquestion\tpredicted_ms\tmeasured_ms\tcalibration_ms"
for r in $(seq 1 "$REPEATS"); do
  if [ -n "${REUSE:-}" ]; then
    cp "$KEEP/$r"/*.json "$OUT"
  else
    runs "$r"
  fi
  rows
  rm -f "$OUT"/*.json
done
