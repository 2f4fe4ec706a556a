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
# `--calibrate A.json,B.json`, and print only the other caps' rows).
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
  { echo "TWO_RUNS predicts kept runs (REUSE=1, KEEP): the second is the largest cap's" >&2; exit 2; }
LARGEST=${CAPS##*,}
field() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }

# Inside the hosts: `ddpkit train` on one gloo rank per host, each rank's trace merged into
# $OUT/NAME.json. Runs under `netns_hosts.sh run`, so it is exported to the bash started there.
across_train() {
  local name=$1 port=$2 pids=() k status=0
  shift 2
  export DDPKIT_STORE_TOKEN="netns-sim-$$-$port"
  for ((k = 0; k < HOSTS; ++k)); do
    "$S/netns_hosts.sh" exec "h$k" "$B" launch --nnodes "$HOSTS" --node-rank "$k" \
      --master-addr 10.77.0.1 --master-port "$port" --local-addr "10.77.0.$((k + 1))" \
      -- "$B" train --model "$MODEL" --batch-size "$BATCH" --steps "$STEPS" "$@" \
      --backend gloo --timeout 60 --trace "$OUT/$name.json" >"$OUT/node$k.out" 2>&1 &
    pids+=($!)
  done
  for k in "${pids[@]}"; do wait "$k" || status=1; done
  ((status == 0)) || { cat "$OUT"/node*.out >&2; return 1; }
  "$B" trace merge --out "$OUT/$name.json" "$OUT/$name".rank*.json >/dev/null
  rm -f "$OUT/$name".rank*.json
}

# One case, one repeat: hosts up, the calibration and one run per cap, hosts down.
measure_case() {
  local rate=$1 delay=$2
  local shape=(--rate "$rate")
  [ "$delay" = none ] || shape+=(--relay h1 --delay "$delay")
  DDPKIT_BIN="$B" DDPKIT_NETNS_PREFIX="ddpksim$$" "$S/netns_hosts.sh" run "$HOSTS" "${shape[@]}" \
    -- bash -c "
    set -e
    $(declare -f across_train)
    B='$B' S='$S' HOSTS=$HOSTS OUT='$OUT' MODEL='$MODEL' BATCH=$BATCH STEPS=$STEPS
    across_train calibration 29610
    port=29611
    for cap in ${CAPS//,/ }; do across_train cap\$cap \$port --bucket-cap-mb \$cap; port=\$((port + 1)); done
    [ '${AGAIN:-1}' = 0 ] || across_train again \$port
  " >&2
}

echo -e "repeat\tbackend\tworld\tcap_mb\tmeasured_ms\tpredicted_ms\tcomm_rate\tcompute_rate\tcalibration_spread\tcalibration_ms"
for r in $(seq 1 "$REPEATS"); do
  for rate in $RATES; do
    for delay in ${DELAYS//,/ }; do
      kept=${KEEP:-$OUT}/$rate-$delay-$r
      if [ -z "${REUSE:-}" ]; then
        measure_case "$rate" "$delay"
        [ -z "${KEEP:-}" ] || { mkdir -p "$kept" && cp "$OUT"/calibration.json "$OUT"/cap*.json "$OUT"/again*.json "$kept" 2>/dev/null || true; }
      fi
      [ -n "${KEEP:-}" ] || kept=$OUT
      label="gloo $rate$([ "$delay" = none ] || echo " +${delay}ms")"
      calibrate=$kept/calibration.json
      [ -z "${TWO_RUNS:-}" ] || calibrate="$calibrate,$kept/cap$LARGEST.json"
      calibration_ms=$(python3 "$S/trace_step_ms.py" "$kept/calibration.json")
      again=again
      [ "${AGAIN:-1}" != 0 ] && [ -z "${TWO_RUNS:-}" ] && [ -f "$kept/again.json" ] || again=
      for cap in default ${CAPS//,/ } $again; do
        if [ -n "${TWO_RUNS:-}" ] && { [ "$cap" = default ] || [ "$cap" = "$LARGEST" ]; }; then
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
      rm -f "$OUT"/*.json
    done
  done
done
ip netns list | grep -q "ddpksim$$" && echo "netns_simulate_validation: hosts left behind" >&2
exit 0
