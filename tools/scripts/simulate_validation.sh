#!/usr/bin/env bash
# docs/simulate.md's table (a): `ddpkit simulate` fed with profiles measured here, beside the
# step measured in the same run. Per repeat and world size: `bench ddp` at several bucket caps
# with --trace (the measured steps, and the compute and in-DDP allreduce profile), then
# `bench allreduce --json` (the standalone network profile), then `simulate` for each cap with
# both. Prints one TSV row per (repeat, backend, world, cap); summarise with --summary.
#   tools/scripts/simulate_validation.sh [REPEATS] > rows.tsv
set -euo pipefail
B=${DDPKIT:-build/bin/ddpkit}
MODEL=${MODEL:-mlp:784,1024,1024,1024,10}
CAPS=${CAPS:-1,5,25}
REPEATS=${1:-3}
OUT=$(mktemp -d)
field() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }
echo -e "repeat\tbackend\tworld\tcap_mb\tmeasured_ms\tpredicted_trace_ms\tpredicted_bench_ms"
for r in $(seq 1 "$REPEATS"); do
  for spec in threads:2 threads:3 threads:4; do
    be=${spec%%:*} n=${spec##*:}
    $B bench ddp --backend "$be" --world-size "$n" --model "$MODEL" --batch-size 64 \
      --bucket-caps "$CAPS" --iters 10 --warmup-iters 3 --trace "$OUT/t.json" --json >"$OUT/d.json"
    trace="$OUT/t.json"
    $B bench allreduce --backend "$be" --world-size "$n" --min-bytes 4096 --max-bytes 8388608 \
      --iters 10 --json >"$OUT/a.json"
    for cap in ${CAPS//,/ }; do
      measured=$(field "$OUT/d.json" "[p['step_ms'] for p in d['sweep'] if p['bucket_cap_mb']==$cap][0]")
      sim() { $B simulate --model "$MODEL" --batch-size 64 --world-size "$n" --bucket-cap-mb "$cap" \
        --compute "trace=$trace" --network "$1" --json >"$OUT/s.json"
        field "$OUT/s.json" "d['worlds'][0]['step_ms']"; }
      echo -e "$r\t$be\t$n\t$cap\t$measured\t$(sim "trace=$trace")\t$(sim "measured=$OUT/a.json")"
    done
  done
done
rm -rf "$OUT"
