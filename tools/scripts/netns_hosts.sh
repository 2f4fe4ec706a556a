#!/usr/bin/env bash
# Test hosts on one machine: N network namespaces ("hosts") joined by veth pairs to a bridge that
# lives in a namespace of its own ("switch"), so nothing touches this machine's own interfaces and
# nothing is routed out. Host k is 10.77.0.(k+1)/24 on its eth0; the addresses exist only inside
# the namespaces made here, so parallel runs (each with its own --prefix) do not collide.
#
#   netns_hosts.sh up N [--rate 1gbit] [--relay HOSTS] [--delay MS] [--prefix P] [--owner PID]
#                                         prints "hK ADDRESS" per host
#   netns_hosts.sh run N [UP'S OPTIONS] -- CMD...   up, CMD (with DDPKIT_NETNS_PREFIX set), down:
#                                                    also on failure/signal
#   netns_hosts.sh exec HOST CMD...       CMD inside host HOST (h0, h1, ... or 0, 1, ...)
#   netns_hosts.sh rsh HOST CMD...        as ssh runs it: CMD's words joined, run by a shell inside
#                                         HOST (mpirun --mca plm_rsh_agent "netns_hosts.sh rsh"),
#                                         with TMPDIR the host's own folder, $TMPDIR/<host's
#                                         namespace>, as on a machine of its own (Open MPI's
#                                         session folders are named by host name and job, and
#                                         the hosts share both: a remote orted and a local rank
#                                         raced to make the same one, "File exists")
#   netns_hosts.sh addr HOST              the host's address
#   netns_hosts.sh shape HOST RATE        tbf at RATE both ways on the host's link (e.g. 10gbit)
#   netns_hosts.sh fault HOST KIND        KIND: link-down | loss PCT | partition | flap [S] |
#                                         delay MS (a relayed host) | clear
#   netns_hosts.sh down                   every namespace and process of the prefix gone
#
# --prefix defaults to $DDPKIT_NETNS_PREFIX, else "ddpk". What this kernel offers (checked on
# Debian 12): tc tbf shapes bandwidth; netem is absent, so there is no delay or loss qdisc; loss
# and partition are nftables rules inside the host (numgen random / drop all); link-down sets the
# switch's end of the host's veth down; flap toggles that every S seconds (default 1) until
# cleared. Latency: --relay h1,h2 (or --delay MS alone: every host) cuts those hosts' links in
# two and joins the halves with `ddpkit relay` (tools/jobs/relay/packet_relay.h), a user-space
# process in the switch's namespace that holds each frame --delay MS (default 0) each way;
# `fault HOST delay MS` changes it while the relay runs, `clear` puts --delay back. The relay is
# $DDPKIT_BIN, default the repository's build/bin/ddpkit. `up` first removes what an earlier
# run left behind when its owner process (--owner, default the caller) is gone, so a run killed
# with SIGKILL is cleaned by the next.
# Exit 77 (with one line saying why) where namespaces cannot be made: no privilege, no iproute2.
set -euo pipefail

state_root=/run/ddpkit-netns
prefix="${DDPKIT_NETNS_PREFIX:-ddpk}"
die() { echo "netns_hosts: $*" >&2; exit 2; }

host_index() { local h="${1#h}"; [[ "$h" =~ ^[0-9]+$ ]] || die "no host '$1' (h0, h1, ...)"; echo "$h"; }
host_ns() { echo "$prefix-h$(host_index "$1")"; }
switch_ns() { echo "$prefix-sw"; }
host_addr() { echo "10.77.0.$(($(host_index "$1") + 1))"; }

# A process's start time: with its pid, who it is (pids are reused).
start_time() { awk '{print $22}' "/proc/$1/stat" 2>/dev/null || true; }

can_make_namespaces() {
  local why=""
  command -v ip >/dev/null || why="iproute2 (ip) is not installed"
  if [ -z "$why" ]; then
    local probe="ddpk-probe-$$"
    if ip netns add "$probe" 2>/dev/null; then ip netns del "$probe"; else
      why="cannot create network namespaces (need root or CAP_SYS_ADMIN; uid $(id -u))"
    fi
  fi
  [ -z "$why" ] && return 0
  echo "netns_hosts: skipped: $why" >&2
  exit 77
}

# Kills every process inside the prefix's namespaces, then deletes them and the state.
teardown() {
  local p="$1" ns pid
  [ -f "$state_root/$p/flap.pid" ] && kill "$(cat "$state_root/$p/flap.pid")" 2>/dev/null || true
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$p-(h[0-9]+|sw)$" || true); do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
  rm -rf "${state_root:?}/$p"
}

# Earlier runs whose owner has gone (killed before their own teardown ran).
sweep_stale() {
  local dir owner
  for dir in "$state_root"/*/; do
    [ -f "$dir/owner" ] || continue
    read -r pid started <"$dir/owner" || true
    [ -n "${pid:-}" ] && [ "$(start_time "$pid")" = "${started:-}" ] && continue
    teardown "$(basename "$dir")"
  done
}

relay_bin="${DDPKIT_BIN:-$(cd "$(dirname "$0")/../.." && pwd)/build/bin/ddpkit}"

# The relay between hK's two halves (hKr: the host's side, hKs: the switch's), in the switch's
# namespace, so `down` ends it with the namespace. Up once it says it is ready.
start_relay() {
  local k="$1" delay="$2" dir="$state_root/$prefix" log
  [ -x "$relay_bin" ] || die "up: no ddpkit at $relay_bin for the relay (set DDPKIT_BIN)"
  echo "$delay" >"$dir/h$k.delay"
  echo "$delay" >"$dir/h$k.base-delay"
  log="$dir/h$k.relay.log"
  ip netns exec "$(switch_ns)" "$relay_bin" relay --between "h${k}r,h${k}s" --delay "${delay}ms" \
    --control "$dir/h$k.delay" </dev/null >"$log" 2>&1 &
  echo $! >"$dir/h$k.relay.pid"
  disown  # `down` kills it; no "Killed" line from this shell then
  for _ in $(seq 100); do
    grep -q ready "$log" && return 0
    kill -0 "$(cat "$dir/h$k.relay.pid")" 2>/dev/null || break
    sleep 0.05
  done
  local why
  why="$(cat "$log")"
  teardown "$prefix"
  die "up: the relay of h$k did not start: $why"
}

# A relayed host's link: eth0 <-> hKr, the relay, hKs <-> hK (the bridge's port, as unrelayed).
add_link() {
  local k="$1" ns="$2" sw="$3" delay="$4"
  if [ -z "$delay" ]; then
    ip -n "$sw" link add "h$k" type veth peer name eth0 netns "$ns"
  else
    ip -n "$sw" link add "h${k}r" type veth peer name eth0 netns "$ns"
    ip -n "$sw" link add "h$k" type veth peer name "h${k}s"
    ip -n "$sw" link set "h${k}r" up
    ip -n "$sw" link set "h${k}s" up
    start_relay "$k" "$delay"
  fi
  ip -n "$sw" link set "h$k" master br0 up
}

# The hosts named in --relay ("h1,h2" or "1,2"; "all"), each with the relay's delay, else "".
relay_delay() {
  local k="$1" relay="$2" delay="$3" h
  [ "$relay" = all ] && { echo "$delay"; return; }
  for h in ${relay//,/ }; do [ "$(host_index "$h")" = "$k" ] && { echo "$delay"; return; }; done
  echo ""
}

add_host() {
  local k="$1" delay="$2" sw ns
  sw="$(switch_ns)" ns="$prefix-h$k"
  ip netns add "$ns"
  add_link "$k" "$ns" "$sw" "$delay"
  ip -n "$ns" addr add "10.77.0.$((k + 1))/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
}

cmd_up() {
  local n="$1" rate="" owner="$PPID" relay="" delay=""
  shift
  while (($#)); do
    case "$1" in
      --rate) rate="$2"; shift 2 ;;
      --relay) relay="$2"; shift 2 ;;
      --delay) delay="$2"; shift 2 ;;
      --prefix) prefix="$2"; shift 2 ;;
      --owner) owner="$2"; shift 2 ;;
      *) die "up: unknown argument '$1'" ;;
    esac
  done
  [[ "$n" =~ ^[0-9]+$ ]] && ((n >= 1 && n <= 200)) || die "up: need 1..200 hosts, got '$n'"
  [ -z "$delay" ] || [[ "$delay" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "up: --delay is in ms, got '$delay'"
  [ -n "$delay" ] && [ -z "$relay" ] && relay=all
  [ -n "$relay" ] && [ -z "$delay" ] && delay=0
  can_make_namespaces
  mkdir -p "$state_root"
  sweep_stale
  [ -d "$state_root/$prefix" ] && die "up: prefix '$prefix' is in use (netns_hosts.sh down)"
  mkdir -p "$state_root/$prefix"
  echo "$owner $(start_time "$owner")" >"$state_root/$prefix/owner"
  trap 'teardown "$prefix"' ERR
  ip netns add "$(switch_ns)"
  ip -n "$(switch_ns)" link add br0 type bridge
  ip -n "$(switch_ns)" link set br0 up
  for ((k = 0; k < n; ++k)); do
    add_host "$k" "$(relay_delay "$k" "$relay" "$delay")"
    [ -n "$rate" ] && cmd_shape "h$k" "$rate"
    echo "h$k $(host_addr "$k")"
  done
  trap - ERR
}

# Both directions: the host's eth0 (what it sends) and the switch's port (what it receives).
cmd_shape() {
  local ns sw port="h$(host_index "$1")" rate="$2"
  ns="$(host_ns "$1")" sw="$(switch_ns)"
  tc -n "$ns" qdisc replace dev eth0 root tbf rate "$rate" burst 256kb latency 50ms
  tc -n "$sw" qdisc replace dev "$port" root tbf rate "$rate" burst 256kb latency 50ms
}

# nftables inside the host: drop RULE's share of what goes in and out (never loopback).
nft_drop() {
  local ns="$1" rule="$2"
  ip netns exec "$ns" nft -f - <<EOF
table inet ddpkit_fault
delete table inet ddpkit_fault
table inet ddpkit_fault {
  chain in {
    type filter hook input priority 0; iifname "lo" accept
    $rule
  }
  chain out {
    type filter hook output priority 0; oifname "lo" accept
    $rule
  }
}
EOF
}

# A relayed host's delay, in ms, from now on (the relay reads its control file on SIGUSR1).
set_delay() {
  local port="h$(host_index "$1")" ms="$2" dir="$state_root/$prefix"
  [[ "$ms" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "fault delay: need milliseconds, got '$ms'"
  [ -f "$dir/$port.relay.pid" ] || die "fault delay: $port's link has no relay (up --relay $port)"
  echo "$ms" >"$dir/$port.delay"
  kill -USR1 "$(cat "$dir/$port.relay.pid")"
}

cmd_fault() {
  local host="$1" kind="$2" ns sw port dir
  ns="$(host_ns "$host")" sw="$(switch_ns)" port="h$(host_index "$host")"
  dir="$state_root/$prefix"
  [ -d "$dir" ] || die "fault: no hosts with prefix '$prefix' (netns_hosts.sh up)"
  case "$kind" in
    link-down) ip -n "$sw" link set "$port" down ;;
    loss)
      local pct="${3:-}"
      [[ "$pct" =~ ^[0-9]+$ ]] && ((pct <= 100)) || die "fault loss: need a percentage 0..100"
      nft_drop "$ns" "numgen random mod 100 < $pct drop" ;;
    partition) nft_drop "$ns" "drop" ;;
    flap)
      local period="${3:-1}"
      (trap 'exit 0' TERM
       while true; do
         ip -n "$sw" link set "$port" down; sleep "$period"
         ip -n "$sw" link set "$port" up; sleep "$period"
       done) </dev/null >/dev/null 2>&1 &
      echo $! >"$dir/flap.pid" ;;
    delay) set_delay "$host" "${3:-}" ;;
    clear)
      [ -f "$dir/$port.delay" ] && set_delay "$host" "$(cat "$dir/$port.base-delay")"
      if [ -f "$dir/flap.pid" ]; then
        kill "$(cat "$dir/flap.pid")" 2>/dev/null || true
        rm -f "$dir/flap.pid"
      fi
      ip netns exec "$ns" nft delete table inet ddpkit_fault 2>/dev/null || true
      ip -n "$sw" link set "$port" up ;;
    *) die "fault: KIND is link-down, loss PCT, partition, flap [S], delay MS or clear; got '$kind'" ;;
  esac
}

cmd_run() {
  local n="$1" up_args=()
  shift
  while (($#)) && [ "$1" != "--" ]; do up_args+=("$1"); shift; done
  [ "${1:-}" = "--" ] || die "run: put the command after '--'"
  shift
  [ -n "${DDPKIT_NETNS_PREFIX:-}" ] || prefix="ddpk$$"
  up_args+=(--prefix "$prefix" --owner $$)
  child=""
  # In the background, so a signal to this script is acted on at once (bash defers traps until
  # a foreground command ends); the command goes with the hosts.
  trap '[ -n "$child" ] && kill -TERM "$child" 2>/dev/null; teardown "$prefix"' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  cmd_up "$n" "${up_args[@]}"
  DDPKIT_NETNS_PREFIX="$prefix" "$@" &
  child=$!
  local status=0
  wait "$child" || status=$?
  child=""
  return "$status"
}

# --prefix may come before the subcommand too.
if [ "${1:-}" = "--prefix" ]; then prefix="$2"; shift 2; fi
case "${1:-}" in
  up) shift; cmd_up "$@" ;;
  run) shift; cmd_run "$@" ;;
  exec) shift; ns="$(host_ns "$1")"; shift; exec ip netns exec "$ns" "$@" ;;
  rsh) shift; ns="$(host_ns "$1")"; shift
    export TMPDIR="${TMPDIR:-/tmp}/$ns"; mkdir -p "$TMPDIR"
    exec ip netns exec "$ns" bash -c "$*" ;;
  addr) host_addr "$2" ;;
  shape) cmd_shape "$2" "$3" ;;
  fault) shift; cmd_fault "$@" ;;
  down) teardown "$prefix" ;;
  *) sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
