// ProcessGroup: the collectives every backend provides, as in PyTorch's c10d.
//
// Every call returns at once with a Work; the collective is queued on the group's own
// communication thread and runs there in submission order, so the caller's computation
// (backward, in DDP) continues meanwhile. Each call gets the next sequence number; all ranks
// must issue the same collectives in the same order.
//
// Failures never hang: every collective is bounded by the group's timeout, and fails with an
// error naming the operation, its sequence number, the group size and — where the backend can
// tell — the ranks that did not arrive; the flight recorder's recent history is logged with it.
// After a failure the group is unusable (peers are in an unknown state): later collectives fail
// at once, citing the first error.
//
// Data: contiguous tensors of float32, float64, float16, bfloat16, int32 or int64. float16 and
// bfloat16 are reduced in float32. Tensors must not be touched until their Work completes.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "comm/backend.h"
#include "comm/collective_listener.h"
#include "comm/debug.h"
#include "comm/flight_recorder.h"
#include "comm/flight_recorder_dump.h"
#include "comm/gpu_stream_runner.h"
#include "comm/types.h"
#include "comm/work.h"

namespace ddpkit::comm {

inline constexpr absl::Duration kDefaultTimeout = absl::Seconds(300);

struct ProcessGroupOptions {
  absl::Duration timeout = kDefaultTimeout;
  DebugLevel debug_level = DebugLevelFromEnv();
  size_t flight_recorder_size = 64;
  // Where this rank writes its flight recorder when a collective fails ("": nowhere).
  std::string fr_dump_dir = FlightRecorderDumpDirFromEnv();
};

// One deadline per operation: a collective that has started completes its Work within
// CompletionBound() — its timeout, then at most DiagnosisTime() to find out which ranks did not
// arrive. Collectives queued behind a failed one fail at once. So a wait on a Work (or on a
// Future built on one) needs no clock of its own; where one is kept (against a hook that never
// completes its future) it is CompletionBound(), which the collective's own, better diagnosed
// error always beats.
absl::Duration DiagnosisTime(const ProcessGroupOptions& options);  // min(1 s, timeout)
absl::Duration CompletionBound(const ProcessGroupOptions& options);

class ProcessGroup {
 public:
  virtual ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual std::string_view backend_name() const = 0;
  const ProcessGroupOptions& options() const { return options_; }
  const FlightRecorder& flight_recorder() const { return recorder_; }
  // OK while the group is usable; after a failure, that first failure.
  virtual absl::Status health() const;
  // The flight-recorder dump this rank wrote after its first failure ("" if none).
  std::string flight_recorder_dump_path() const;

  // Every collective from now on is reported to `listener` (null: none). The listener must
  // outlive the group's collectives; set it while nothing is in flight.
  void SetListener(CollectiveListener* listener) { listener_.store(listener); }

  // In place on every rank: tensor <- op over all ranks' tensors.
  std::shared_ptr<Work> Allreduce(const Tensor& tensor, ReduceOp op = ReduceOp::kSum);
  // In place: every rank's tensor <- root's tensor.
  std::shared_ptr<Work> Broadcast(const Tensor& tensor, int root);
  // output (size * n elements) <- every rank's input (n elements), in rank order.
  std::shared_ptr<Work> Allgather(const Tensor& input, const Tensor& output);
  // As Allgather with counts[r] elements from rank r (every rank passes the same counts).
  std::shared_ptr<Work> AllgatherV(const Tensor& input, const Tensor& output,
                                   std::vector<int64_t> counts);
  // input holds one segment per rank (counts[r] elements for rank r); output (counts[rank]
  // elements) <- op over all ranks' segment for this rank.
  std::shared_ptr<Work> ReduceScatter(const Tensor& input, const Tensor& output,
                                      std::vector<int64_t> counts, ReduceOp op = ReduceOp::kSum);
  // input: send_counts[j] elements for each peer j in order; output: recv_counts[j] elements
  // from each peer j in order.
  std::shared_ptr<Work> AllToAllV(const Tensor& input, const Tensor& output,
                                  std::vector<int64_t> send_counts,
                                  std::vector<int64_t> recv_counts);
  std::shared_ptr<Work> Barrier();

  // Whether this backend takes tensors on `device`: gloo and mpi the host's, threads the host's
  // and any GPU's, nccl its rank's GPU only.
  virtual bool SupportsDevice(Device device) const { return device.is_cpu(); }
  // Where a barrier (a collective without tensors) runs.
  virtual Device DefaultDevice() const { return Device::Cpu(); }
  // Whether the communication thread and a Work's Wait poll briefly before they sleep
  // (comm/spin_wait.h). A backend whose collectives progress on another thread of this process
  // says no: where ranks' threads outnumber the cores, a poller holds the core that thread needs.
  virtual bool SpinsOnHandOffs() const { return true; }

 protected:
  ProcessGroup(int rank, int size, ProcessGroupOptions options);

  // Every public collective checks its arguments and ends here. The base queues `c` on this
  // group's communication thread; a composite (ProcessGroupRoundRobin) overrides it to hand the
  // checked call to one of the groups it owns — the one hook that lets it forward every
  // collective without redefining each.
  virtual std::shared_ptr<Work> Submit(Collective c);

  // Derived constructors call StartCommThread() when ready; derived destructors call
  // StopCommThread() first (it finishes queued work) so Execute never runs on a dead object.
  void StartCommThread();
  void StopCommThread();

  // Runs one collective; called on the communication thread, one at a time, only for a call
  // Handles() accepts. The contract every backend keeps:
  //   * a call it does not handle never reaches Execute: the base fails it with Unimplemented,
  //     naming the backend, the op, the reduce op and the dtype;
  //   * a case its own switch lacks (which cannot happen) is NotHandled(c): Internal, as is a
  //     ddpkit::Error thrown inside it;
  //   * half precision is reduced in float32 and AVG divides a SUM (comm/widen.h);
  //   * DETAIL gathers fingerprints (CheckCollectivesMatchByAllgather where it has an allgather).
  virtual absl::Status Execute(const Collective& c) = 0;
  // Whether Execute handles `c`'s op, reduce op and dtype; the default: every one ddpkit has.
  virtual bool Handles(const Collective& c) const;
  absl::Status NotHandled(const Collective& c) const;
  // At DDPKIT_DEBUG=DETAIL, before `c` runs: OK when every rank is issuing a matching call,
  // else the error of CheckCollectivesMatch (on every rank alike).
  virtual absl::Status VerifyCallsMatch(const Collective& c) = 0;

  // "ALLREDUCE (sequence number 7, world size 4)" — the start of every error about `c`.
  std::string Describe(const Collective& c) const;

  // GPU collectives run through GpuStreamRunner (comm/gpu_stream_runner.h): Execute only queues
  // the work on the communication stream; the runner's watchdog asks AsyncError() each round and
  // calls AbortCommunication() at the timeout. Backends whose collectives finish on the host
  // (threads) keep the defaults.
  virtual absl::Status AsyncError() { return absl::OkStatus(); }
  virtual void AbortCommunication() {}

  // For a backend whose call can outlive the timeout — Gloo bounds each of its waits, not the
  // call, so a lossy link that delivers just often enough keeps a collective going for minutes:
  // WatchDeadlines() (before StartCommThread) fails a collective still running a little past its
  // timeout (OverdueGrace) with Overdue(c) — its Work completes and the group breaks — while the
  // backend's call runs on to its own end. Overdue returns nullopt where the backend is already
  // ending the call with its own error (its own timeout fired first). The default names only
  // the collective.
  void WatchDeadlines();
  virtual std::optional<absl::Status> Overdue(const Collective& c);
  // Also from the deadline watch, outside its lock: every kStillRunningEvery while a collective
  // has run that long or more. A backend whose failures are diagnosed through the store records
  // there, once a peer has failed, that this rank is alive and waiting in `c`
  // (comm/failure_diagnosis.h: RecordWaitingIfAPeerFailed).
  static constexpr absl::Duration kStillRunningEvery = absl::Milliseconds(200);
  virtual void StillRunning(const Collective& /*c*/) {}

 private:
  // The composite calls its groups' Submit and keeps its own recorder and listener.
  friend class ProcessGroupRoundRobin;

  void CommLoop();
  void DeadlineLoop();
  void AskStillRunning(std::unique_lock<std::mutex>& lock,
                       std::chrono::steady_clock::time_point now);
  // Around each collective, for DeadlineLoop.
  void SetRunning(const Collective& c, const std::shared_ptr<Work>& work);
  void ClearRunning();
  absl::Status RunOne(const Collective& c);
  // The issued tensors' device, checked against SupportsDevice; records c.ready for a GPU.
  void PlaceOnDevice(Collective& c) const;
  // The first failure: log it with the recorder's table, dump the recorder, break the group.
  void RecordFailure(const absl::Status& status);

  const int rank_;
  const int size_;
  const ProcessGroupOptions options_;
  FlightRecorder recorder_;
  std::atomic<CollectiveListener*> listener_{nullptr};

  mutable std::mutex mu_;
  std::condition_variable queue_cv_;
  // Guarded by mu_:
  uint64_t next_sequence_number_ = 1;
  std::deque<std::pair<Collective, std::shared_ptr<Work>>> queue_;
  std::atomic<size_t> queued_{0};  // queue_.size(), polled without mu_ by the idle comm thread
  bool stopping_ = false;
  absl::Status broken_;  // the first failure; OK while usable
  std::string dump_path_;
  std::thread comm_thread_;
  // The collective on the comm thread, for WatchDeadlines (guarded by mu_).
  struct Running {
    const Collective* collective;  // the comm thread's; valid until ClearRunning (under mu_)
    std::shared_ptr<Work> work;
    std::chrono::steady_clock::time_point since;
    bool overdue = false;  // the deadline watch is failing it (or asked the backend)
    std::chrono::steady_clock::time_point asked;  // StillRunning's last call
  };
  std::optional<Running> running_;
  bool watch_deadlines_ = false;  // set before the comm thread starts
  std::condition_variable deadline_cv_;
  std::thread deadline_thread_;
  // The backend's calls a GPU collective runs through.
  GpuStreamRunnerCalls RunnerCalls();
  GpuStreamRunner stream_runner_{RunnerCalls()};  // used by the comm thread only
};

}  // namespace ddpkit::comm
