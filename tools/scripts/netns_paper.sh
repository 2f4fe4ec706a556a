#!/usr/bin/env bash
# The DDP paper's experiments across shaped links (docs/performance.md, "Across hosts"): for each
# link rate, N test hosts (netns_hosts.sh, tbf at RATE both ways on every host's link), one gloo
# rank per host; `bench allreduce` measures what the link really delivers, `bench paper` runs
# overlap on/off, the bucket-cap sweep and no_sync every K, and `simulate`, fed the measured
# allreduce and a compute trace taken on loopback, predicts each step beside it. Prints markdown
# tables. Needs root (namespaces); run it holding the build lock, nothing else measuring.
#   tools/scripts/netns_paper.sh [RATE...]     (default: 1gbit 10gbit 25gbit; "none": unshaped)
# Environment: HOSTS (2), MODEL, BATCH (64), CAPS (0,1,5,25), SYNC (1,2,4), ITERS (6),
# REPEATS (1), DDPKIT (build/bin/ddpkit), KEEP (a folder that keeps the JSON reports),
# TABLE_ONLY=1 (print the table again from KEEP's reports, measuring nothing),
# DELAYS (e.g. 0,0.5,2: each rate once per delay, h1's link through the delaying relay, which
# holds each frame D ms each way: `netns_hosts.sh --relay h1 --delay D`; default: no relay),
# BACKEND (gloo; or mpi: `mpirun` inside h0 starts rank k on host k through `netns_hosts.sh
# rsh`, MPI's TCP transport on eth0 only, so its traffic takes the shaped link).
set -euo pipefail
B=$(realpath "${DDPKIT:-build/bin/ddpkit}")
HOSTS_SH=$(realpath "$(dirname "$0")/netns_hosts.sh")
HOSTS=${HOSTS:-2}
MODEL=${MODEL:-mlp:784,1024,1024,1024,10}
BATCH=${BATCH:-64} CAPS=${CAPS:-0,1,5,25} SYNC=${SYNC:-1,2,4} ITERS=${ITERS:-6}
REPEATS=${REPEATS:-1} BACKEND=${BACKEND:-gloo}
RATES=("$@")
((${#RATES[@]})) || RATES=(1gbit 10gbit 25gbit)
CASES=()  # RATE, or RATE@D: h1's link through the relay at D ms each way
for rate in "${RATES[@]}"; do
  if [ -z "${DELAYS:-}" ]; then CASES+=("$rate"); else
    for d in ${DELAYS//,/ }; do CASES+=("$rate@$d"); done
  fi
done
OUT=${KEEP:-$(mktemp -d)}
mkdir -p "$OUT"
field() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }

# CMD on every host (rank k on host k), through `ddpkit launch`, or `mpirun` for BACKEND=mpi;
# rank 0's stdout to FILE.
across() {
  local file="$1" port="$2" pids=() k status=0
  shift 2
  [ "$BACKEND" = mpi ] && { across_mpi "$file" "$@"; return; }
  export DDPKIT_STORE_TOKEN="netns-paper-$$-$port"
  for ((k = 0; k < HOSTS; ++k)); do
    "$HOSTS_SH" exec "h$k" "$B" launch --nnodes "$HOSTS" --node-rank "$k" \
      --master-addr 10.77.0.1 --master-port "$port" --local-addr "10.77.0.$((k + 1))" \
      -- "$B" "$@" --backend gloo --timeout 60 >"$OUT/node$k.out" 2>"$OUT/node$k.err" &
    pids+=($!)
  done
  for k in "${pids[@]}"; do wait "$k" || status=1; done
  ((status == 0)) || { cat "$OUT"/node*.err >&2; return 1; }
  # The launcher prefixes each rank's lines; rank 0's JSON report is the one kept.
  sed -n 's/^\[rank 0\] //p' "$OUT/node0.out" >"$file"
  [ -s "$file" ] || cp "$OUT/node0.out" "$file"
}

# mpirun in h0, one slot on each host (the rsh agent enters it); rank 0's stdout to FILE. TCP on
# eth0 only: the hosts share this machine's /dev/shm, and MPI's shared memory would bypass the link.
# rtc_hwloc_vmhole none: no topology in shared memory, whose write at a fixed address crashed a
# remote orted now and then (SIGSEGV in hwloc_shmem_topology_write, in 1 of ~10 jobs here).
across_mpi() {
  local file="$1" dir hosts
  shift
  dir=$(mktemp -d -p "$OUT") hosts=$(seq -s, -f 'h%g' 0 $((HOSTS - 1)))
  "$HOSTS_SH" exec h0 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 300 \
    mpirun -np "$HOSTS" --host "$hosts" --mca plm_rsh_agent "$HOSTS_SH rsh" --mca btl tcp,self \
    --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 --mca rtc_hwloc_vmhole none \
    --output-filename "$dir" \
    "$B" "$@" --backend mpi --timeout 60 >"$OUT/mpirun.out" 2>&1 || {
    cat "$OUT/mpirun.out" >&2
    return 1
  }
  cp "$dir/1/rank.0/stdout" "$file"
}

# One case: hosts up, measure, hosts down (netns_hosts.sh run tears down also on failure).
measure_case() {
  local case="$1" r="$2" tag="$1-$2"
  local shape=()
  [ "${case%@*}" = none ] || shape=(--rate "${case%@*}")
  [ "$case" = "${case%@*}" ] || shape+=(--relay h1 --delay "${case#*@}")
  DDPKIT_BIN="$B" DDPKIT_NETNS_PREFIX="ddpkpaper$$" \
    "$HOSTS_SH" run "$HOSTS" "${shape[@]}" -- bash -c "
    set -e
    $(declare -f across across_mpi)
    B='$B' HOSTS_SH='$HOSTS_SH' HOSTS=$HOSTS OUT='$OUT' BACKEND=$BACKEND
    across '$OUT/a-$tag.json' 29600 bench allreduce --min-bytes 4096 --max-bytes 16777216 \
      --iters 20 --warmup-iters 3 --json
    across '$OUT/p-$tag.json' 29601 bench paper --model '$MODEL' --batch-size $BATCH \
      --bucket-caps '$CAPS' --sync-every '$SYNC' --iters $ITERS --warmup-iters 2 --json"
}

# simulate fed with the measured allreduce (`measured=`) and the loopback compute trace.
simulate() {
  "$B" simulate --model "$MODEL" --batch-size "$BATCH" --world-size "$HOSTS" \
    --compute "trace=$OUT/compute.json" --network "measured=$1" "${@:2}" --json
}

# The compute profile: DDP's step on HOSTS thread ranks, sharing the same 2 cores.
[ -n "${TABLE_ONLY:-}" ] || "$B" bench ddp --backend threads --world-size "$HOSTS" --model "$MODEL" --batch-size "$BATCH" \
  --bucket-caps 25 --iters 10 --warmup-iters 3 --trace "$OUT/compute.json" --json >/dev/null

for r in $(seq 1 "$REPEATS"); do
  for case in "${CASES[@]}"; do [ -n "${TABLE_ONLY:-}" ] || measure_case "$case" "$r" >&2; done
done
ip netns list | grep -q "ddpkpaper$$" && echo "netns_paper: hosts left behind" >&2


# Per case (median over repeats of each figure): the link, then the paper's three experiments
# with the simulator's prediction beside each.
median() { python3 -c "import statistics,sys; v=[float(x) for x in sys.argv[1:]]; print(f'{statistics.median(v):.3g}' + (f' ({min(v):.3g}–{max(v):.3g})' if len(v)>1 else ''))" "$@"; }
# The median over the repeats of EXPR in the case's report of KIND (a: allreduce, p: paper).
over_repeats() {
  local kind="$1" expr="$2" vals=() r
  for r in $(seq 1 "$REPEATS"); do vals+=("$(field "$OUT/$kind-$case-$r.json" "$expr")"); done
  median "${vals[@]}"
}
# simulate's EXPR (over its first world, w) at FLAGS, fed the first repeat's allreduce.
predict() {
  simulate "$OUT/a-$case-1.json" "${@:2}" >"$OUT/s.json"
  field "$OUT/s.json" "(lambda w: '%.1f' % ($1))(d['worlds'][0] if d['worlds'] else None)"
}
echo "| link (tbf$([ -z "${DELAYS:-}" ] || echo ", relay's delay each way")) | 4 KiB µs | 1 MiB busbw GB/s | 16 MiB busbw GB/s | overlap step ms (sim) | no overlap step ms (sim) | overlap gain | step ms at cap ${CAPS//,/ \/ } MB (sim) | best cap (sim) | ms/micro-batch K=${SYNC//,/ \/ } (sim) |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for case in "${CASES[@]}"; do
  cap_cells="" sync_cells=""
  for cap in ${CAPS//,/ }; do
    sim_cap="—"  # simulate has no one-bucket-per-tensor cap
    [ "$cap" = 0 ] || sim_cap=$(predict "w['step_ms']" --bucket-cap-mb "$cap")
    cap_cells+="$(over_repeats p "[c['step_ms'] for c in d['caps'] if c['bucket_cap_mb']==$cap][0]") ($sim_cap) / "
  done
  for k in ${SYNC//,/ }; do
    sync_cells+="$(over_repeats p "[s['iteration_ms'] for s in d['sync'] if s['sync_every']==$k][0]") ($(predict "w['iteration_ms']" --bucket-cap-mb 25 --no-sync-every "$k")) / "
  done
  best=$(python3 -c "import json,statistics,sys
caps={}
for f in sys.argv[1:]:
    for c in json.load(open(f))['caps']: caps.setdefault(c['bucket_cap_mb'], []).append(c['step_ms'])
print(min(caps, key=lambda k: statistics.median(caps[k])))" "$OUT"/p-"$case"-*.json)
  simulate "$OUT/a-$case-1.json" --sweep-caps >"$OUT/s.json"
  best_sim=$(field "$OUT/s.json" "d['sweeps'][0]['best_bucket_cap_mb']")
  label=${case%@*}
  [ "$case" = "$label" ] || label+=", ${case#*@} ms"
  echo "| $label | $(over_repeats a "[q['time_us'] for q in d['points'] if int(q['bytes'])==4096][0]") |" \
    "$(over_repeats a "[q['busbw_gbps'] for q in d['points'] if int(q['bytes'])==1048576][0]") |" \
    "$(over_repeats a "d['points'][-1]['busbw_gbps']") |" \
    "$(over_repeats p "[b['step_ms'] for b in d['breakdown'] if b['mode']=='overlap'][0]") ($(predict "w['step_ms']" --bucket-cap-mb 25)) |" \
    "$(over_repeats p "[b['step_ms'] for b in d['breakdown'] if b['mode']!='overlap'][0]") ($(predict "w['compute_ms'] + w['comm_ms']" --bucket-cap-mb 25)) |" \
    "$(over_repeats p "100*d['overlap_speedup']")% | ${cap_cells% / } | $best ($best_sim) | ${sync_cells% / } |"
done
[ -n "${KEEP:-}" ] || rm -rf "$OUT"
