# Sourced by the simulator's checks (simulate_validation.sh, simulate_questions.sh): one ddpkit
# command on N ranks of a backend, traced, with every rank's trace merged into one file.
#   traced_ranks BACKEND N TRACE.json ddpkit-args...
# Threads ranks share one process; gloo ranks are processes started by `ddpkit launch`, mpi
# ranks by mpirun (their per-rank traces, TRACE.rankR.json, merged by `ddpkit trace merge`).
# mpi ranks are bound to cores round-robin, as mpirun binds up to 2 ranks by default: beyond
# the cores, unbound ranks took turns differently in every run (a 4-rank MLP step at cap 5:
# 19-28 ms over nine runs, 20-23 ms bound). Gloo ranks stay unbound: each has its own I/O
# threads, and pinned beside them a rank ran 1.6x slower (33-35 ms unbound over four runs).
# Uses $B, the ddpkit binary. Its output goes nowhere: the trace is what is read.
traced_ranks() {
  local be=$1 n=$2 trace=$3
  shift 3
  case $be in
    threads) $B "$@" --backend threads --world-size "$n" --trace "$trace" ;;
    gloo) $B launch --standalone --nproc-per-node "$n" -- $B "$@" --backend gloo --trace "$trace" ;;
    mpi) mpirun --allow-run-as-root --oversubscribe --bind-to core:overload-allowed \
      --map-by core:OVERSUBSCRIBE -np "$n" $B "$@" --backend mpi --trace "$trace" ;;
    *) echo "traced_ranks: unknown backend '$be' (threads, gloo or mpi)" >&2; return 2 ;;
  esac >/dev/null
  [ "$be" = threads ] && return
  $B trace merge --out "$trace" "${trace%.json}".rank*.json >/dev/null
  rm -f "${trace%.json}".rank*.json
}
