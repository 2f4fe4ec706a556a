#!/usr/bin/env bash
# docs/simulate.md's validation table: `ddpkit simulate --calibrate` against steps measured
# here. Per repeat, backend and world size: one short `ddpkit train --trace` at DDP's default
# options (the run a user calibrates from), then one `ddpkit train --trace` per bucket cap (the
# measured steps), then the calibration's options once more (the "again" row: how far the
# machine moves between two runs of one job), then `simulate --calibrate` with the first run's
# trace for each. Every row carries the calibration run's own measured step too. A
# measured step is forward's start to finalize's end (the optimizer left out on both sides),
# the slowest rank's per iteration, median over the iterations after DDP's rebuild. Threads
# ranks share one process; gloo ranks are processes started by `ddpkit launch`, mpi ranks by
# mpirun (their per-rank traces merged). Prints one TSV row per (repeat, backend, world, cap).
# Run it holding the build lock.
#   tools/scripts/simulate_validation.sh [REPEATS] > rows.tsv
#   SPECS="threads:2 gloo:2" CAPS=1,25 KEEP=dir tools/scripts/simulate_validation.sh 1
#   REUSE=1 KEEP=dir tools/scripts/simulate_validation.sh 1   (the same runs, predicted again)
#   HOOK=fp16 SPECS=gloo:2 tools/scripts/simulate_validation.sh 3   (the hook in every run)
#   REUSE=1 TWO_RUNS=1 KEEP=dir tools/scripts/simulate_validation.sh 1   (each calibrated from its
#     calibration run and its largest cap's run together, `--calibrate A.json,B.json`: only the
#     rows neither run is, the other caps; TWO_RUNS=smallest: its smallest cap's run)
set -euo pipefail
B=${DDPKIT:-build/bin/ddpkit}
MODEL=${MODEL:-mlp:784,1024,1024,1024,10}
BATCH=${BATCH:-64}
STEPS=${STEPS:-20}
CAPS=${CAPS:-1,5,25}
SPECS=${SPECS:-threads:2 gloo:2 mpi:2 threads:3 gloo:3 mpi:3 threads:4 gloo:4 mpi:4}
EXTRA=${EXTRA:-}  # more flags for every run and prediction (--find-unused-parameters, ...)
HOOK=${HOOK:-}    # a comm hook for every run and prediction: fp16, or powersgd:R
train_hook=() sim_hook=()
case "$HOOK" in
  "") ;;
  fp16) train_hook=(--comm-hook fp16) sim_hook=(--hook fp16) ;;
  powersgd:*)
    train_hook=(--comm-hook powersgd --powersgd-rank "${HOOK#powersgd:}" --powersgd-start-iter 2)
    sim_hook=(--hook "$HOOK") ;;
  *) echo "HOOK: fp16 or powersgd:R, not '$HOOK'" >&2; exit 2 ;;
esac
REPEATS=${1:-3}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
. "$(dirname "$0")/traced_ranks.sh"
# `ddpkit train` on N ranks of backend BE, traced to TRACE.
train() {
  local be=$1 n=$2 trace=$3
  shift 3
  traced_ranks "$be" "$n" "$trace" train --model "$MODEL" --batch-size "$BATCH" \
    --steps "$STEPS" $EXTRA "${train_hook[@]}" "$@"
}
measured() { python3 "$(dirname "$0")/trace_step_ms.py" "$1"; }
field() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }
# Where a run's trace goes: KEEP keeps every one (NAME-BACKEND-N-REPEAT.json), so that a later
# simulator predicts the same measured runs again (REUSE=1: run nothing, predict from KEEP).
trace_of() { echo "${KEEP:-$OUT}/$1-$2-$3-$4.json"; }
[ -z "${REUSE:-}" ] || [ -n "${KEEP:-}" ] || { echo "REUSE needs KEEP, the traces' folder" >&2; exit 2; }
[ -z "${KEEP:-}" ] || mkdir -p "$KEEP"
[ -z "${TWO_RUNS:-}" ] || [ -n "${REUSE:-}" ] ||
  { echo "TWO_RUNS predicts kept runs (REUSE=1, KEEP): the second is a cap's run" >&2; exit 2; }
case ${TWO_RUNS:-} in "" | 1 | smallest) ;; *)
  echo "TWO_RUNS is 1 (the largest cap's run) or smallest, not '$TWO_RUNS'" >&2; exit 2 ;; esac
SECOND=${CAPS##*,}  # the run calibrated from beside the calibration run: the largest cap's,
[ "${TWO_RUNS:-}" != smallest ] || SECOND=${CAPS%%,*}  # or with TWO_RUNS=smallest the smallest's
# The "again" row: the calibration's own options run once more after the caps' runs, predicted
# as the default row is. Beside the calibration's measured step (the calibration_ms column, in
# every row) it is how far this machine moves between two runs of one job: the error a
# prediction that knew the step exactly would show (simulate_table.py's "measured again").
# AGAIN=0 leaves it out; two-run rows have none.
again_row() { [ "${AGAIN:-1}" = 0 ] || [ -n "${TWO_RUNS:-}" ] || echo again; }
echo -e "repeat\tbackend\tworld\tcap_mb\tmeasured_ms\tpredicted_ms\tcomm_rate\tcompute_rate\tcalibration_spread\tcalibration_ms"
for r in $(seq 1 "$REPEATS"); do
  for spec in $SPECS; do
    be=${spec%%:*} n=${spec##*:}
    calibration=$(trace_of calibration "$be" "$n" "$r")
    [ -n "${REUSE:-}" ] || train "$be" "$n" "$calibration"
    calibrate=$calibration calibration_ms=$(measured "$calibration")
    [ -z "${TWO_RUNS:-}" ] || calibrate="$calibration,$(trace_of "cap$SECOND" "$be" "$n" "$r")"
    for cap in default ${CAPS//,/ } $(again_row); do
      if [ -n "${TWO_RUNS:-}" ] && { [ "$cap" = default ] || [ "$cap" = "$SECOND" ]; }; then
        continue  # a run calibrated from
      fi
      flags=() measured_trace=$calibration  # the default row: the calibration run itself
      if [ "$cap" = again ]; then  # the calibration's options once more, after the caps' runs
        measured_trace=$(trace_of again "$be" "$n" "$r")
        [ -n "${REUSE:-}" ] || train "$be" "$n" "$measured_trace"
        [ -f "$measured_trace" ] || continue  # a batch kept before the rerun was added
      elif [ "$cap" != default ]; then
        flags=(--bucket-cap-mb "$cap") measured_trace=$(trace_of "cap$cap" "$be" "$n" "$r")
        [ -n "${REUSE:-}" ] || train "$be" "$n" "$measured_trace" "${flags[@]}"
      fi
      # A prediction that fails (its error on stderr) is a row that says so, not the end of the batch.
      if $B simulate --model "$MODEL" --batch-size "$BATCH" --world-size "$n" "${flags[@]}" \
        $EXTRA "${sim_hook[@]}" --calibrate "$calibrate" --json >"$OUT/s.json"; then
        echo -e "$r\t$be\t$n\t$cap\t$(measured "$measured_trace")\t$(field "$OUT/s.json" \
          "d['worlds'][0]['step_ms'] - d.get('optimizer_ms', 0)")\t$(field "$OUT/s.json" \
          "d['interference_comm_rate']")\t$(field "$OUT/s.json" "d['interference_compute_rate']")\t$(
          field "$OUT/s.json" "d.get('replay_spread', 0)")\t$calibration_ms"
      else
        echo -e "$r\t$be\t$n\t$cap\t$(measured "$measured_trace")\tfailed\t\t\t\t$calibration_ms"
      fi
    done
    [ -n "${KEEP:-}" ] || rm -f "$OUT"/*.json
  done
done
