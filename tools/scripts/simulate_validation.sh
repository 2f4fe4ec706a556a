#!/usr/bin/env bash
# docs/simulate.md's table (a): `ddpkit simulate` fed with profiles measured here, beside the
# step measured in the same run. Per repeat, backend and world size: `bench ddp` at several
# bucket caps with --trace (the measured steps, and the compute and in-DDP allreduce profile),
# then `bench allreduce --json` (the standalone network profile), then `simulate` for each cap
# with both. Threads ranks share one process; gloo ranks are processes started by
# `ddpkit launch`, mpi ranks by mpirun (rank 0's report and trace are used). Prints one TSV row
# per (repeat, backend, world, cap). Run it holding the build lock.
#   tools/scripts/simulate_validation.sh [REPEATS] > rows.tsv
#   SPECS="threads:2 gloo:2 mpi:2" CAPS=1,25 KEEP=dir tools/scripts/simulate_validation.sh 1
set -euo pipefail
B=${DDPKIT:-build/bin/ddpkit}
MODEL=${MODEL:-mlp:784,1024,1024,1024,10}
CAPS=${CAPS:-1,5,25}
SPECS=${SPECS:-threads:2 gloo:2 mpi:2 threads:3 gloo:3 mpi:3 threads:4 gloo:4 mpi:4}
REPEATS=${1:-3}
OUT=$(mktemp -d)
field() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }
# Runs ddpkit on N ranks of backend BE; rank 0's stdout (the report) comes out.
ranks() {
  local be=$1 n=$2
  shift 2
  case $be in
    threads) $B "$@" --backend threads --world-size "$n" ;;
    gloo) $B launch --standalone --nproc-per-node "$n" -- $B "$@" --backend gloo |
      sed -n 's/^\[rank 0\] //p' ;;
    mpi) mpirun --allow-run-as-root --oversubscribe -np "$n" $B "$@" --backend mpi ;;
  esac
}
echo -e "repeat\tbackend\tworld\tcap_mb\tmeasured_ms\tpredicted_trace_ms\tpredicted_bench_ms"
for r in $(seq 1 "$REPEATS"); do
  for spec in $SPECS; do
    be=${spec%%:*} n=${spec##*:}
    ranks "$be" "$n" bench ddp --model "$MODEL" --batch-size 64 --bucket-caps "$CAPS" --iters 10 \
      --warmup-iters 3 --trace "$OUT/t.json" --json >"$OUT/d.json"
    trace="$OUT/t.json"
    [ "$be" = threads ] || trace="$OUT/t.rank0.json"
    ranks "$be" "$n" bench allreduce --min-bytes 4096 --max-bytes 8388608 --iters 10 --json \
      >"$OUT/a.json"
    for cap in ${CAPS//,/ }; do
      measured=$(field "$OUT/d.json" "[p['step_ms'] for p in d['sweep'] if p['bucket_cap_mb']==$cap][0]")
      sim() {
        $B simulate --model "$MODEL" --batch-size 64 --world-size "$n" --bucket-cap-mb "$cap" \
          --compute "trace=$trace" --network "$1" --json >"$OUT/s.json"
        field "$OUT/s.json" "d['worlds'][0]['step_ms']"
      }
      echo -e "$r\t$be\t$n\t$cap\t$measured\t$(sim "trace=$trace")\t$(sim "measured=$OUT/a.json")"
    done
    [ -z "${KEEP:-}" ] || cp "$trace" "$KEEP/trace-$be-$n-$r.json"  # for a closer look
    rm -f "$OUT"/t*.json
  done
done
rm -rf "$OUT"
