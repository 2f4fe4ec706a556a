# Sourced by the simulator's checks (simulate_validation.sh, simulate_questions.sh): one ddpkit
# command on N ranks of a backend, traced, with every rank's trace merged into one file.
#   traced_ranks BACKEND N TRACE.json ddpkit-args...
# Threads ranks share one process; gloo ranks are processes started by `ddpkit launch`, mpi
# ranks by mpirun (their per-rank traces, TRACE.rankR.json, merged by `ddpkit trace merge`).
# Uses $B, the ddpkit binary. Its output goes nowhere: the trace is what is read.
traced_ranks() {
  local be=$1 n=$2 trace=$3
  shift 3
  case $be in
    threads) $B "$@" --backend threads --world-size "$n" --trace "$trace" ;;
    gloo) $B launch --standalone --nproc-per-node "$n" -- $B "$@" --backend gloo --trace "$trace" ;;
    mpi) mpirun --allow-run-as-root --oversubscribe -np "$n" $B "$@" --backend mpi --trace "$trace" ;;
    *) echo "traced_ranks: unknown backend '$be' (threads, gloo or mpi)" >&2; return 2 ;;
  esac >/dev/null
  [ "$be" = threads ] && return
  $B trace merge --out "$trace" "${trace%.json}".rank*.json >/dev/null
  rm -f "${trace%.json}".rank*.json
}
