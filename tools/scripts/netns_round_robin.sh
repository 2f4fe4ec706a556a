#!/usr/bin/env bash
# docs/simulate.md's round-robin rows: does a second process group help, predicted and measured
# across shaped links between namespace hosts (netns_hosts.sh: one gloo rank per host, tbf at
# RATE both ways; with a delay, h1's link through the relay, which holds each frame D ms each
# way). Per case and repeat, hosts up, then:
#   1. `ddpkit bench allreduce --round-robin-groups K` over the link: one allreduce alone and K at
#      once (one per group), 1 to 8 MiB; the share one collective fills of the link is the
#      median over those sizes (collective_share in its JSON);
#   2. `ddpkit train --trace` at DDP's default options on one group: the calibration;
#   3. per bucket cap, `ddpkit train --trace` on one group and on K groups: the measured steps;
#   4. `ddpkit simulate --calibrate` with the calibration for each, the K-group ones with
#      `--round-robin-groups K --collective-share` the share of step 1.
# Prints one TSV row per (repeat, link, cap, groups): measured and predicted step (optimizer left
# out, tools/scripts/trace_step_ms.py), and the share. Needs root (namespaces); run it holding the
# build lock, nothing else measuring.
#   tools/scripts/netns_round_robin.sh [REPEATS] > rows.tsv
# Environment: RATES (1gbit 10gbit), DELAYS (none,2), GROUPS_K (2), MODEL, BATCH (64), STEPS
# (20), CAPS (1,5), DDPKIT (build/bin/ddpkit), KEEP (a folder that keeps every trace and bench
# report; REUSE=1 with it runs nothing and predicts them again).
set -euo pipefail
B=$(realpath "${DDPKIT:-build/bin/ddpkit}")
S=$(realpath "$(dirname "$0")")
MODEL=${MODEL:-mlp:784,1024,1024,1024,10}
BATCH=${BATCH:-64} STEPS=${STEPS:-20} CAPS=${CAPS:-1,5} K=${GROUPS_K:-2}
RATES=${RATES:-1gbit 10gbit}
DELAYS=${DELAYS:-none,2}
REPEATS=${1:-3}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
[ -z "${REUSE:-}" ] || [ -n "${KEEP:-}" ] || { echo "REUSE needs KEEP, the traces' folder" >&2; exit 2; }
field() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }

# Inside the hosts: one ddpkit command on one gloo rank per host. `train NAME PORT ARGS...`
# traces to $OUT/NAME.json (the ranks' files merged); `bench NAME PORT ARGS...` keeps rank 0's
# JSON report as $OUT/NAME.json. Run under `netns_hosts.sh run`, exported to the bash there.
on_hosts() {
  local kind=$1 name=$2 port=$3 pids=() k status=0
  shift 3
  export DDPKIT_STORE_TOKEN="netns-rr-$$-$port"
  local job=("$B" train --model "$MODEL" --batch-size "$BATCH" --steps "$STEPS" "$@"
    --backend gloo --timeout 60 --trace "$OUT/$name.json")
  [ "$kind" = train ] || job=("$B" bench allreduce --backend gloo --timeout 60 --json "$@")
  for ((k = 0; k < 2; ++k)); do
    "$S/netns_hosts.sh" exec "h$k" "$B" launch --nnodes 2 --node-rank "$k" \
      --master-addr 10.77.0.1 --master-port "$port" --local-addr "10.77.0.$((k + 1))" \
      -- "${job[@]}" >"$OUT/node$k.out" 2>"$OUT/node$k.err" &
    pids+=($!)
  done
  for k in "${pids[@]}"; do wait "$k" || status=1; done
  ((status == 0)) || { cat "$OUT"/node*.out "$OUT"/node*.err >&2; return 1; }
  if [ "$kind" = train ]; then
    "$B" trace merge --out "$OUT/$name.json" "$OUT/$name".rank*.json >/dev/null
    rm -f "$OUT/$name".rank*.json
  else  # launch tags each line with its rank: keep rank 0's report
    sed -n 's/^\[rank 0\] //p' "$OUT/node0.out" >"$OUT/$name.json"
  fi
}

# One case, one repeat: hosts up, the bench, the calibration and the cap runs, hosts down.
measure_case() {
  local rate=$1 delay=$2
  local shape=(--rate "$rate")
  [ "$delay" = none ] || shape+=(--relay h1 --delay "$delay")
  DDPKIT_BIN="$B" DDPKIT_NETNS_PREFIX="ddpkrr$$" "$S/netns_hosts.sh" run 2 "${shape[@]}" -- bash -c "
    set -e
    $(declare -f on_hosts)
    B='$B' S='$S' OUT='$OUT' MODEL='$MODEL' BATCH=$BATCH STEPS=$STEPS
    on_hosts bench bench 29710 --round-robin-groups $K --min-bytes 1048576 --max-bytes 8388608
    on_hosts train calibration 29711
    port=29712
    for cap in ${CAPS//,/ }; do
      for k in 1 $K; do
        on_hosts train cap\$cap-k\$k \$port --bucket-cap-mb \$cap --round-robin-groups \$k
        port=\$((port + 1))
      done
    done
  " >&2
}

echo -e "repeat\tlink\tcap_mb\tgroups\tmeasured_ms\tpredicted_ms\tshare"
for r in $(seq 1 "$REPEATS"); do
  for rate in $RATES; do
    for delay in ${DELAYS//,/ }; do
      kept=${KEEP:-$OUT}/$rate-$delay-$r
      if [ -z "${REUSE:-}" ]; then
        measure_case "$rate" "$delay"
        [ -z "${KEEP:-}" ] || { mkdir -p "$kept" && cp "$OUT"/bench.json "$OUT"/calibration.json \
          "$OUT"/cap*.json "$kept"; }
      fi
      [ -n "${KEEP:-}" ] || kept=$OUT
      label="gloo $rate$([ "$delay" = none ] || echo " +${delay}ms")"
      share=$(field "$kept/bench.json" \
        "sorted(p.get('collective_share', 1) for p in d['points'])[len(d['points']) // 2]")
      for cap in ${CAPS//,/ }; do
        for k in 1 "$K"; do
          measured=$(python3 "$S/trace_step_ms.py" "$kept/cap$cap-k$k.json")
          if "$B" simulate --model "$MODEL" --batch-size "$BATCH" --world-size 2 \
            --bucket-cap-mb "$cap" --round-robin-groups "$k" --collective-share "$share" \
            --calibrate "$kept/calibration.json" --json >"$OUT/s.json"; then
            predicted=$(field "$OUT/s.json" "d['worlds'][0]['step_ms'] - d.get('optimizer_ms', 0)")
          else  # a failed prediction is a row that says so (simulate's error on stderr)
            predicted=failed
          fi
          echo -e "$r\t$label\t$cap\t$k\t$measured\t$predicted\t$share"
        done
      done
      rm -f "$OUT"/*.json
    done
  done
done
ip netns list | grep -q "ddpkrr$$" && echo "netns_round_robin: hosts left behind" >&2
exit 0
