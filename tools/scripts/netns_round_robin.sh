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

HOSTS=2
. "$S/netns_jobs.sh"

# One case, one repeat (each_case): the bench, the calibration and the cap runs.
measure_case() {
  on_link "$1" "$2" "
    on_hosts bench bench 29710 allreduce --round-robin-groups $K --min-bytes 1048576 \
      --max-bytes 8388608
    on_hosts train calibration 29711
    port=29712
    for cap in ${CAPS//,/ }; do
      for k in 1 $K; do
        on_hosts train cap\$cap-k\$k \$port --bucket-cap-mb \$cap --round-robin-groups \$k
        port=\$((port + 1))
      done
    done"
}

# One case's rows: each cap's runs on one group and on K, beside their predictions.
case_rows() {
  local kept=$1 label=$2 r=$3 share measured predicted
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
}

echo -e "repeat\tlink\tcap_mb\tgroups\tmeasured_ms\tpredicted_ms\tshare"
each_case "bench.json calibration.json cap*.json" case_rows
exit 0
