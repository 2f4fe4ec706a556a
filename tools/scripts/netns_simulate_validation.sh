#!/usr/bin/env bash
# docs/simulate.md's cross-host rows: `ddpkit simulate --calibrate` against steps measured across
# shaped links between namespace hosts (netns_hosts.sh: one gloo rank per host, tbf at RATE both
# ways on every host's link; with a delay, h1's link runs through the relay, which holds each
# frame D ms each way). Per case and repeat, as simulate_validation.sh does on loopback: one
# `ddpkit train --trace` at DDP's default options (the calibration), one per bucket cap (the
# measured steps) and the calibration's options once more (the "again" row), then `simulate
# --calibrate` with the first run's trace for each. Prints the same TSV rows, the backend column
# naming the link ("gloo 1gbit", "gloo 10gbit +2ms"); AGAIN=0 leaves the "again" run out.
# Needs root (namespaces); run it holding the build lock, nothing else measuring.
#   tools/scripts/netns_simulate_validation.sh [REPEATS] > rows.tsv
# Environment: RATES (1gbit 10gbit 25gbit), DELAYS (none,2: "none" is no relay), HOSTS (2),
# MODEL, BATCH (64), STEPS (20), CAPS (1,5,25), DDPKIT (build/bin/ddpkit), KEEP (a folder that
# keeps every trace), REUSE=1 (run nothing: predict KEEP's traces again; no root needed),
# TWO_RUNS=1 with REUSE (calibrate from the calibration run and the largest cap's together,
# `--calibrate A.json,B.json`, and print only the other caps' rows; TWO_RUNS=smallest: the
# smallest cap's).
set -euo pipefail
B=$(realpath "${DDPKIT:-build/bin/ddpkit}")
S=$(realpath "$(dirname "$0")")
HOSTS=${HOSTS:-2}
MODEL=${MODEL:-mlp:784,1024,1024,1024,10}
BATCH=${BATCH:-64} STEPS=${STEPS:-20} CAPS=${CAPS:-1,5,25}
RATES=${RATES:-1gbit 10gbit 25gbit}
DELAYS=${DELAYS:-none,2}
REPEATS=${1:-3}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
[ -z "${REUSE:-}" ] || [ -n "${KEEP:-}" ] || { echo "REUSE needs KEEP, the traces' folder" >&2; exit 2; }
[ -z "${KEEP:-}" ] || mkdir -p "$KEEP"
[ -z "${TWO_RUNS:-}" ] || [ -n "${REUSE:-}" ] ||
  { echo "TWO_RUNS predicts kept runs (REUSE=1, KEEP): the second is a cap's run" >&2; exit 2; }
case ${TWO_RUNS:-} in "" | 1 | smallest) ;; *)
  echo "TWO_RUNS is 1 (the largest cap's run) or smallest, not '$TWO_RUNS'" >&2; exit 2 ;; esac
SECOND=${CAPS##*,}  # the run calibrated from beside the calibration run: the largest cap's,
[ "${TWO_RUNS:-}" != smallest ] || SECOND=${CAPS%%,*}  # or with TWO_RUNS=smallest the smallest's
field() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }

. "$S/netns_jobs.sh"

# One case, one repeat (each_case): the calibration, one run per cap and the calibration's
# options again.
measure_case() {
  on_link "$1" "$2" "
    on_hosts train calibration 29610
    port=29611
    for cap in ${CAPS//,/ }; do on_hosts train cap\$cap \$port --bucket-cap-mb \$cap; port=\$((port + 1)); done
    [ '${AGAIN:-1}' = 0 ] || on_hosts train again \$port"
}

# One case's rows: each cap's (and the again run's) measured step beside its prediction.
case_rows() {
  local kept=$1 label=$2 r=$3 calibrate=$1/calibration.json again=again calibration_ms
  calibration_ms=$(python3 "$S/trace_step_ms.py" "$kept/calibration.json")
  [ -z "${TWO_RUNS:-}" ] || calibrate="$calibrate,$kept/cap$SECOND.json"
  [ "${AGAIN:-1}" != 0 ] && [ -z "${TWO_RUNS:-}" ] && [ -f "$kept/again.json" ] || again=
  for cap in default ${CAPS//,/ } $again; do
    if [ -n "${TWO_RUNS:-}" ] && { [ "$cap" = default ] || [ "$cap" = "$SECOND" ]; }; then
      continue  # a run calibrated from
    fi
    flags=() trace=$kept/cap$cap.json
    case $cap in
      default) trace=$kept/calibration.json ;;
      again) trace=$kept/again.json ;;  # the calibration's options, run after the caps'
      *) flags=(--bucket-cap-mb "$cap") ;;
    esac
    measured=$(python3 "$S/trace_step_ms.py" "$trace")
    if "$B" simulate --model "$MODEL" --batch-size "$BATCH" --world-size "$HOSTS" \
      "${flags[@]}" --calibrate "$calibrate" --json >"$OUT/s.json"; then
      echo -e "$r\t$label\t$HOSTS\t$cap\t$measured\t$(field "$OUT/s.json" \
        "d['worlds'][0]['step_ms'] - d.get('optimizer_ms', 0)")\t$(field "$OUT/s.json" \
        "d['interference_comm_rate']")\t$(field "$OUT/s.json" "d['interference_compute_rate']")\t$(
        field "$OUT/s.json" "d.get('replay_spread', 0)")\t$calibration_ms"
    else  # a failed prediction is a row that says so (simulate's error on stderr)
      echo -e "$r\t$label\t$HOSTS\t$cap\t$measured\tfailed\t\t\t\t$calibration_ms"
    fi
  done
}

echo -e "repeat\tbackend\tworld\tcap_mb\tmeasured_ms\tpredicted_ms\tcomm_rate\tcompute_rate\tcalibration_spread\tcalibration_ms"
each_case "calibration.json cap*.json again*.json" case_rows
exit 0
