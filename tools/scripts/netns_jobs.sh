# shellcheck shell=bash
# Sourced by the simulator's cross-host checks (netns_simulate_validation.sh,
# netns_round_robin.sh): ddpkit on one gloo rank per namespace host, a link case's hosts up and
# down around it, and the loop over repeats and link cases. The sourcing script sets B (the
# ddpkit binary), S (this folder), OUT (its scratch folder), HOSTS, MODEL, BATCH, STEPS,
# REPEATS, RATES, DELAYS and, optionally, KEEP and REUSE, and defines measure_case RATE DELAY.

# Inside the hosts: `on_hosts train NAME PORT ARGS...` runs `ddpkit train ARGS` traced to
# $OUT/NAME.json (the ranks' files merged); `on_hosts bench NAME PORT ARGS...` runs `ddpkit
# bench ARGS --json` and keeps rank 0's report as $OUT/NAME.json. Run under `netns_hosts.sh run`
# (on_link), which exports it to the bash started there.
on_hosts() {
  local kind=$1 name=$2 port=$3 pids=() k status=0
  shift 3
  export DDPKIT_STORE_TOKEN="netns-$$-$port"
  local job=("$B" train --model "$MODEL" --batch-size "$BATCH" --steps "$STEPS" "$@"
    --backend gloo --timeout 60 --trace "$OUT/$name.json")
  [ "$kind" = train ] || job=("$B" bench "$@" --backend gloo --timeout 60 --json)
  for ((k = 0; k < HOSTS; ++k)); do
    "$S/netns_hosts.sh" exec "h$k" "$B" launch --nnodes "$HOSTS" --node-rank "$k" \
      --master-addr 10.77.0.1 --master-port "$port" --local-addr "10.77.0.$((k + 1))" \
      -- "${job[@]}" >"$OUT/node$k.out" 2>"$OUT/node$k.err" &
    pids+=($!)
  done
  for k in "${pids[@]}"; do wait "$k" || status=1; done
  ((status == 0)) || { cat "$OUT"/node*.out "$OUT"/node*.err >&2; return 1; }
  if [ "$kind" = train ]; then
    "$B" trace merge --out "$OUT/$name.json" "$OUT/$name".rank*.json >/dev/null
    rm -f "$OUT/$name".rank*.json
  else  # the launcher tags each line with its rank: rank 0's report
    sed -n 's/^\[rank 0\] //p' "$OUT/node0.out" >"$OUT/$name.json"
  fi
}

# on_link RATE DELAY SCRIPT: HOSTS hosts up, tbf at RATE both ways (with a DELAY in ms, h1's
# link through the relay, holding each frame that long each way; "none": no relay), SCRIPT run
# by a bash that has on_hosts and the job's settings, hosts down (also on failure).
on_link() {
  local rate=$1 delay=$2 script=$3 shape=(--rate "$1")
  [ "$delay" = none ] || shape+=(--relay h1 --delay "$delay")
  DDPKIT_BIN="$B" DDPKIT_NETNS_PREFIX="ddpk$$" "$S/netns_hosts.sh" run "$HOSTS" "${shape[@]}" \
    -- bash -c "
    set -e
    $(declare -f on_hosts)
    B='$B' S='$S' HOSTS=$HOSTS OUT='$OUT' MODEL='$MODEL' BATCH=$BATCH STEPS=$STEPS
    $script
  " >&2
}

# each_case FILES ROWS: per repeat, rate and delay: unless REUSE, measure_case RATE DELAY, and
# with KEEP the $OUT files FILES names (globs) kept in $KEEP/RATE-DELAY-REPEAT; then ROWS with
# that folder (the kept one, or $OUT), the link's label ("gloo 10gbit +2ms") and the repeat.
each_case() {
  local files=$1 rows=$2 r rate delay kept
  for r in $(seq 1 "$REPEATS"); do
    for rate in $RATES; do
      for delay in ${DELAYS//,/ }; do
        kept=${KEEP:-$OUT}/$rate-$delay-$r
        if [ -z "${REUSE:-}" ]; then
          measure_case "$rate" "$delay"
          [ -z "${KEEP:-}" ] || { mkdir -p "$kept" && (cd "$OUT" && cp $files "$kept" 2>/dev/null) || true; }
        fi
        [ -n "${KEEP:-}" ] || kept=$OUT
        "$rows" "$kept" "gloo $rate$([ "$delay" = none ] || echo " +${delay}ms")" "$r"
        rm -f "$OUT"/*.json
      done
    done
  done
  ! ip netns list 2>/dev/null | grep -q "ddpk$$" || echo "$0: hosts left behind" >&2
}
