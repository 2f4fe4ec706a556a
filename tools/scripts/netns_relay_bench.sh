#!/usr/bin/env bash
# What the delaying relay (`ddpkit relay`, netns_hosts.sh --relay) delivers, measured, not set
# (docs/reliability.md, "Latency"): for each case, two test hosts, h1's link plain ("none") or
# through the relay holding each frame D ms each way; ping's round trip h1 -> h0, then `ddpkit
# bench allreduce` on one gloo rank per host (latency at 4 KiB, bus bandwidth at 16 MiB) and the
# relay's CPU time over the bench. Prints a markdown table. Needs root (and installs ping if it is
# missing); run it holding the build lock with nothing else measuring.
#   tools/scripts/netns_relay_bench.sh [CASE...]    (default: none 0 1 10; a case is none or D)
# Environment: DDPKIT (build/bin/ddpkit), REPEATS (1), PINGS (20).
set -euo pipefail
command -v ping >/dev/null || apt-get install -y -qq iputils-ping >/dev/null  # Debian's ping
B=$(realpath "${DDPKIT:-build/bin/ddpkit}")
HOSTS_SH=$(realpath "$(dirname "$0")/netns_hosts.sh")
REPEATS=${REPEATS:-1} PINGS=${PINGS:-20}
CASES=("$@")
((${#CASES[@]})) || CASES=(none 0 1 10)
OUT=$(mktemp -d)
export DDPKIT_BIN="$B"

# Inside the hosts: ping, then the bench with rank k on host k; prints "ping MIN AVG MAX" and
# keeps rank 0's JSON report as $OUT/bench.json, the relay's CPU seconds as $OUT/cpu.
inside() {
  local prefix="$1" relay_pid="" cpu0=0
  "$HOSTS_SH" --prefix "$prefix" exec h1 ping -q -c "$PINGS" -i 0.05 10.77.0.1 |
    sed -n 's|.* = \([0-9.]*\)/\([0-9.]*\)/\([0-9.]*\)/.*|ping \1 \2 \3|p'
  [ -f "/run/ddpkit-netns/$prefix/h1.relay.pid" ] && relay_pid=$(cat "/run/ddpkit-netns/$prefix/h1.relay.pid")
  cpu() { [ -n "$relay_pid" ] && awk '{print ($14 + $15) / 100}' "/proc/$relay_pid/stat" || echo 0; }
  cpu0=$(cpu)
  export DDPKIT_STORE_TOKEN="relay-bench-$$"
  for k in 0 1; do
    "$HOSTS_SH" --prefix "$prefix" exec "h$k" "$B" launch --nnodes 2 --node-rank "$k" \
      --master-addr 10.77.0.1 --local-addr "10.77.0.$((k + 1))" -- "$B" bench allreduce \
      --backend gloo --timeout 60 --min-bytes 4096 --max-bytes 16777216 --iters 20 \
      --warmup-iters 3 --json >"$OUT/node$k.out" 2>&1 &
  done
  wait
  sed -n 's/^\[rank 0\] //p' "$OUT/node0.out" >"$OUT/bench.json"
  python3 -c "print($(cpu) - $cpu0)" >"$OUT/cpu"
}

measure() {
  local case="$1" prefix="ddpkrb$$" relay=()
  [ "$case" = none ] || relay=(--relay h1 --delay "$case")
  DDPKIT_NETNS_PREFIX="$prefix" "$HOSTS_SH" run 2 "${relay[@]}" -- bash -c "
    set -e; B='$B' HOSTS_SH='$HOSTS_SH' OUT='$OUT' PINGS=$PINGS
    $(declare -f inside); inside $prefix" >"$OUT/ping"
  python3 - "$OUT" "$case" <<'PY'
import json, sys
out, case = sys.argv[1], sys.argv[2]
# The file also holds `up`'s "hK ADDRESS" lines.
ping = [l for l in open(f"{out}/ping") if l.startswith("ping ")][0].split()
rows = {int(r["bytes"]): r for r in json.load(open(f"{out}/bench.json"))["points"]}
cpu = float(open(f"{out}/cpu").read())
small, big = rows[4096], rows[16777216]
print(f"| {case} | {ping[1]} / {ping[2]} / {ping[3]} | {small['time_us'] / 1000:.2f} | "
      f"{big['busbw_gbps']:.2f} | {cpu:.2f} |")
PY
}

echo "| relay delay (ms, each way) | ping min / avg / max (ms) | allreduce 4 KiB (ms) | allreduce 16 MiB bus bandwidth (GB/s) | relay CPU over the bench (s) |"
echo "| --- | --- | --- | --- | --- |"
for _ in $(seq "$REPEATS"); do
  for c in "${CASES[@]}"; do measure "$c"; done
done
rm -rf "$OUT"
