#include "comm/process_group.h"

#include <numeric>

#include "autograd/base/log.h"
#include "comm/spin_wait.h"

namespace ddpkit::comm {
namespace {

// "ALLREDUCE (reduce op SUM) on float32", with the raw value where an enum has no name.
std::string CallName(const Collective& c) {
  const auto named = [](std::string_view name, auto value) {
    return name != "?" ? std::string(name) : StrCat("#", static_cast<int>(value));
  };
  const Tensor& t = c.input.defined() ? c.input : c.output;
  std::string text = StrCat(named(OpTypeName(c.op), c.op), " (reduce op ",
                            named(ReduceOpName(c.reduce_op), c.reduce_op), ")");
  if (t.defined()) {
    StrAppend(&text, " on ",
              t.dtype() <= DType::kInt64 ? std::string(DTypeName(t.dtype()))
                                         : StrCat("dtype #", static_cast<int>(t.dtype())));
  }
  return text;
}

int64_t Total(const std::vector<int64_t>& counts) {
  return std::accumulate(counts.begin(), counts.end(), int64_t{0});
}

void CheckCounts(std::string_view op, const std::vector<int64_t>& counts, int size,
                 std::string_view what) {
  DDPKIT_CHECK(static_cast<int>(counts.size()) == size, "[", op, "] ", what, " has ", counts.size(),
               " entries for a world of ", size);
  for (int64_t c : counts) DDPKIT_CHECK(c >= 0, "[", op, "] ", what, " has a negative count ", c);
}

void CheckTensor(std::string_view op, const Tensor& t, std::string_view what) {
  DDPKIT_CHECK(t.defined(), "[", op, "] ", what, " is undefined");
}

void CheckSameDtype(std::string_view op, const Tensor& input, const Tensor& output) {
  DDPKIT_CHECK(input.dtype() == output.dtype(), "[", op, "] input is ", DTypeName(input.dtype()),
               " but output is ", DTypeName(output.dtype()));
}

}  // namespace

absl::Duration DiagnosisTime(const ProcessGroupOptions& options) {
  return std::min(absl::Seconds(1), options.timeout);
}

absl::Duration CompletionBound(const ProcessGroupOptions& options) {
  return options.timeout + DiagnosisTime(options) + absl::Seconds(1);  // + 1 s: scheduling
}

ProcessGroup::ProcessGroup(int rank, int size, ProcessGroupOptions options)
    : rank_(rank), size_(size), options_(options), recorder_(options.flight_recorder_size) {
  DDPKIT_CHECK(size >= 1 && rank >= 0 && rank < size, "[ProcessGroup] rank ", rank,
               " is not in a world of size ", size);
  DDPKIT_CHECK(options.timeout > absl::ZeroDuration(), "[ProcessGroup] timeout must be positive");
}

// A still-running comm thread here means a derived destructor forgot StopCommThread();
// std::thread's destructor then terminates the process, which is the right outcome for a bug.
ProcessGroup::~ProcessGroup() = default;

void ProcessGroup::StartCommThread() {
  comm_thread_ = std::thread([this] {
    SetThreadLogPrefix(StrCat("rank ", rank_, " comm"));
    CommLoop();
  });
}

void ProcessGroup::StopCommThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  deadline_cv_.notify_all();
  if (comm_thread_.joinable()) comm_thread_.join();
  if (deadline_thread_.joinable()) deadline_thread_.join();
}

void ProcessGroup::WatchDeadlines() {
  DDPKIT_CHECK(!comm_thread_.joinable(),
               "[ProcessGroup] WatchDeadlines comes before StartCommThread");
  watch_deadlines_ = true;
  deadline_thread_ = std::thread([this] {
    SetThreadLogPrefix(StrCat("rank ", rank_, " deadline"));
    DeadlineLoop();
  });
}

std::optional<absl::Status> ProcessGroup::Overdue(const Collective& c) {
  return absl::DeadlineExceededError(StrCat(Describe(c), " did not complete within its timeout of ",
                                            absl::FormatDuration(options_.timeout)));
}

// Wakes every 50 ms; fails the running collective once it is past its timeout and a grace
// (a tenth of it, at most 500 ms) in which a stall inside one wait ends with the backend's own
// error.
void ProcessGroup::DeadlineLoop() {
  const auto bound = absl::ToChronoNanoseconds(
      options_.timeout + std::min(options_.timeout / 10, absl::Milliseconds(500)));
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    deadline_cv_.wait_for(lock, std::chrono::milliseconds(50));
    if (!running_ || running_->overdue) continue;
    const auto now = std::chrono::steady_clock::now();
    if (now - running_->since < bound) {
      AskStillRunning(lock, now);
      continue;
    }
    running_->overdue = true;
    const Collective c = *running_->collective;  // copied only when overdue
    const std::shared_ptr<Work> work = running_->work;
    lock.unlock();
    const std::optional<absl::Status> status = Overdue(c);
    if (status) {
      RecordFailure(*status);
      work->Finish(*status);
    }
    lock.lock();
    if (!status && running_ && running_->work == work) running_->overdue = false;
  }
}

// StillRunning for a collective that has run kStillRunningEvery or more, at most that often.
void ProcessGroup::AskStillRunning(std::unique_lock<std::mutex>& lock,
                                   std::chrono::steady_clock::time_point now) {
  const auto every = absl::ToChronoNanoseconds(kStillRunningEvery);
  if (now - running_->since < every || now - running_->asked < every) return;
  running_->asked = now;
  const Collective c = *running_->collective;
  lock.unlock();
  StillRunning(c);
  lock.lock();
}

std::string ProcessGroup::Describe(const Collective& c) const {
  return StrCat(OpTypeName(c.op), " (sequence number ", c.sequence_number, ", world size ", size_,
                ")");
}

bool ProcessGroup::Handles(const Collective& c) const {
  const Tensor& t = c.input.defined() ? c.input : c.output;
  return c.op <= OpType::kBarrier && c.reduce_op <= ReduceOp::kMax &&
         (!t.defined() || t.dtype() <= DType::kInt64);
}

absl::Status ProcessGroup::NotHandled(const Collective& c) const {
  return absl::InternalError(StrCat(Describe(c), ": the ", backend_name(),
                                    " backend has no case for ", CallName(c),
                                    " (a call the base should have refused)"));
}

void ProcessGroup::PlaceOnDevice(Collective& c) const {
  const Tensor& t = c.input.defined() ? c.input : c.output;
  c.device = t.defined() ? t.device() : DefaultDevice();
  if (c.input.defined() && c.output.defined()) {
    DDPKIT_CHECK(c.input.device() == c.output.device(), "[", OpTypeName(c.op), "] input is on ",
                 c.input.device().ToString(), " but output on ", c.output.device().ToString(),
                 "; put both on one device");
  }
  // A GPU-only backend takes small host tensors (DDP's counts, flags and signatures, as
  // PyTorch's users move them by hand) through its GPU.
  if (c.device.is_cpu() && !SupportsDevice(c.device) && DefaultDevice().is_cuda()) {
    c.host_staged = true;
    c.device = DefaultDevice();
    return;
  }
  DDPKIT_CHECK(SupportsDevice(c.device), "[", OpTypeName(c.op), "] the ", backend_name(),
               " backend does not take tensors on ", c.device.ToString(),
               " (gloo and mpi: host tensors; threads: host or GPU tensors; nccl: the rank's own "
               "GPU)");
  if (c.device.is_cuda()) {
    c.ready = std::make_shared<cuda::Event>(c.device);
    c.ready->Record(cuda::CurrentStream(c.device));
  }
}

std::shared_ptr<Work> ProcessGroup::Submit(Collective c) {
  PlaceOnDevice(c);
  c.tag = ScopedCollectiveTag::Current();
  CollectiveListener* listener = listener_.load();
  std::unique_lock<std::mutex> lock(mu_);
  c.sequence_number = next_sequence_number_++;
  auto work = std::make_shared<Work>(c.op, c.sequence_number, SpinsOnHandOffs());
  recorder_.Queued(c);
  if (listener != nullptr) listener->OnQueued(c);
  if (!broken_.ok()) {
    recorder_.Finished(c.sequence_number, false);
    if (listener != nullptr) listener->OnFinished(c.sequence_number, false);
    work->Finish(absl::Status(broken_.code(), StrCat(Describe(c),
                                                     " was not run: the process group is unusable "
                                                     "after an earlier failure: ",
                                                     broken_.message())));
    return work;
  }
  queue_.emplace_back(std::move(c), work);
  queued_.store(queue_.size(), std::memory_order_release);
  lock.unlock();
  queue_cv_.notify_one();
  return work;
}

void ProcessGroup::CommLoop() {
  while (true) {
    std::pair<Collective, std::shared_ptr<Work>> item;
    absl::Status status;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // A collective issued right after is common: spin (where the backend lets us).
      if (queue_.empty() && !stopping_ && SpinsOnHandOffs()) {
        lock.unlock();
        SpinUntil([this] { return queued_.load(std::memory_order_acquire) > 0; });
        lock.lock();
      }
      queue_cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left to run
      item = std::move(queue_.front());
      queue_.pop_front();
      queued_.store(queue_.size(), std::memory_order_release);
      status = broken_;
    }
    auto& [collective, work] = item;
    if (!status.ok()) {
      status = absl::Status(status.code(), StrCat(Describe(collective),
                                                  " was not run: the process group is unusable "
                                                  "after an earlier failure: ",
                                                  status.message()));
    } else {
      CollectiveListener* listener = listener_.load();
      recorder_.Started(collective.sequence_number);
      if (listener != nullptr) listener->OnStarted(collective.sequence_number);
      work->MarkStarted();
      SetRunning(collective, work);
      status = RunOne(collective);
      ClearRunning();
      const bool overdue = work->IsCompleted();  // the deadline watch failed it already
      recorder_.Finished(collective.sequence_number, status.ok());
      if (listener != nullptr) listener->OnFinished(collective.sequence_number, status.ok());
      if (!status.ok() && !overdue) RecordFailure(status);
    }
    work->Finish(status);  // no effect when the deadline watch failed it first
  }
}

void ProcessGroup::SetRunning(const Collective& c, const std::shared_ptr<Work>& work) {
  if (!watch_deadlines_) return;
  std::lock_guard<std::mutex> lock(mu_);
  running_ = Running{
      .collective = &c, .work = work, .since = std::chrono::steady_clock::now(), .asked = {}};
}

void ProcessGroup::ClearRunning() {
  if (!watch_deadlines_) return;
  std::lock_guard<std::mutex> lock(mu_);
  running_.reset();
}

void ProcessGroup::RecordFailure(const absl::Status& status) {
  std::string where;
  if (!options_.fr_dump_dir.empty()) {
    absl::StatusOr<std::string> path =
        WriteFlightRecorderDump(options_.fr_dump_dir, recorder_.Entries(),
                                {.rank = rank_,
                                 .world_size = size_,
                                 .backend = std::string(backend_name()),
                                 .reason = std::string(status.message()),
                                 .timeout = options_.timeout});
    where = path.ok()
                ? StrCat("flight recorder written to ", *path, " (`ddpkit fr analyze ",
                         options_.fr_dump_dir, "` matches the ranks' dumps)\n")
                : StrCat("could not write the flight recorder: ", path.status().message(), "\n");
    if (path.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      dump_path_ = *path;
    }
  }
  Log(LogLevel::kError, StrCat(status.message(), "\nlast collectives on rank ", rank_, ":\n",
                               recorder_.Dump(), where));
  std::lock_guard<std::mutex> lock(mu_);
  if (broken_.ok()) broken_ = status;
}

absl::Status ProcessGroup::health() const {
  std::lock_guard<std::mutex> lock(mu_);
  return broken_;
}

std::string ProcessGroup::flight_recorder_dump_path() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dump_path_;
}

absl::Status ProcessGroup::RunOne(const Collective& c) {
  if (!Handles(c)) {
    return absl::UnimplementedError(
        StrCat(Describe(c), ": the ", backend_name(), " backend does not handle ", CallName(c)));
  }
  if (options_.debug_level == DebugLevel::kDetail && size_ > 1) {
    DDPKIT_RETURN_IF_ERROR(VerifyCallsMatch(c));
  }
  try {
    return c.device.is_cuda() ? stream_runner_.Run(c) : Execute(c);
  } catch (const Error& e) {  // a backend's invariant: report it on the Work, keep the thread
    return absl::InternalError(StrCat(Describe(c), " failed: ", e.what()));
  }
}

// --- The collectives: check the arguments here, run them on the comm thread ----------------

std::shared_ptr<Work> ProcessGroup::Allreduce(const Tensor& tensor, ReduceOp op) {
  CheckTensor("allreduce", tensor, "tensor");
  DDPKIT_CHECK(op != ReduceOp::kAvg || IsFloatingPoint(tensor.dtype()),
               "[allreduce] AVG needs a floating-point tensor, got ", DTypeName(tensor.dtype()));
  Collective c{.op = OpType::kAllreduce, .reduce_op = op, .input = tensor.Flatten()};
  c.output = c.input;
  return Submit(std::move(c));
}

std::shared_ptr<Work> ProcessGroup::Broadcast(const Tensor& tensor, int root) {
  CheckTensor("broadcast", tensor, "tensor");
  DDPKIT_CHECK(root >= 0 && root < size_, "[broadcast] root ", root,
               " is not a rank of a world of ", size_);
  Collective c{.op = OpType::kBroadcast, .input = tensor.Flatten(), .root = root};
  c.output = c.input;
  return Submit(std::move(c));
}

std::shared_ptr<Work> ProcessGroup::Allgather(const Tensor& input, const Tensor& output) {
  CheckTensor("allgather", input, "input");
  CheckTensor("allgather", output, "output");
  CheckSameDtype("allgather", input, output);
  DDPKIT_CHECK(output.numel() == input.numel() * size_, "[allgather] output has ", output.numel(),
               " elements; ", size_, " ranks x ", input.numel(), " = ", input.numel() * size_,
               " expected");
  return Submit({.op = OpType::kAllgather, .input = input.Flatten(), .output = output.Flatten()});
}

std::shared_ptr<Work> ProcessGroup::AllgatherV(const Tensor& input, const Tensor& output,
                                               std::vector<int64_t> counts) {
  CheckTensor("allgather_v", input, "input");
  CheckTensor("allgather_v", output, "output");
  CheckSameDtype("allgather_v", input, output);
  CheckCounts("allgather_v", counts, size_, "counts");
  DDPKIT_CHECK(counts[rank_] == input.numel(), "[allgather_v] counts say rank ", rank_,
               " contributes ", counts[rank_], " elements but its input has ", input.numel());
  DDPKIT_CHECK(output.numel() == Total(counts), "[allgather_v] output has ", output.numel(),
               " elements but the counts add up to ", Total(counts));
  return Submit({.op = OpType::kAllgatherV,
                 .input = input.Flatten(),
                 .output = output.Flatten(),
                 .counts = std::move(counts)});
}

std::shared_ptr<Work> ProcessGroup::ReduceScatter(const Tensor& input, const Tensor& output,
                                                  std::vector<int64_t> counts, ReduceOp op) {
  CheckTensor("reduce_scatter", input, "input");
  CheckTensor("reduce_scatter", output, "output");
  CheckSameDtype("reduce_scatter", input, output);
  CheckCounts("reduce_scatter", counts, size_, "counts");
  DDPKIT_CHECK(op != ReduceOp::kAvg || IsFloatingPoint(input.dtype()),
               "[reduce_scatter] AVG needs a floating-point tensor, got ",
               DTypeName(input.dtype()));
  DDPKIT_CHECK(input.numel() == Total(counts), "[reduce_scatter] input has ", input.numel(),
               " elements but the counts add up to ", Total(counts));
  DDPKIT_CHECK(output.numel() == counts[rank_], "[reduce_scatter] output has ", output.numel(),
               " elements but rank ", rank_, "'s segment has ", counts[rank_]);
  return Submit({.op = OpType::kReduceScatter,
                 .reduce_op = op,
                 .input = input.Flatten(),
                 .output = output.Flatten(),
                 .counts = std::move(counts)});
}

std::shared_ptr<Work> ProcessGroup::AllToAllV(const Tensor& input, const Tensor& output,
                                              std::vector<int64_t> send_counts,
                                              std::vector<int64_t> recv_counts) {
  CheckTensor("all_to_all_v", input, "input");
  CheckTensor("all_to_all_v", output, "output");
  CheckSameDtype("all_to_all_v", input, output);
  CheckCounts("all_to_all_v", send_counts, size_, "send counts");
  CheckCounts("all_to_all_v", recv_counts, size_, "recv counts");
  DDPKIT_CHECK(input.numel() == Total(send_counts), "[all_to_all_v] input has ", input.numel(),
               " elements but the send counts add up to ", Total(send_counts));
  DDPKIT_CHECK(output.numel() == Total(recv_counts), "[all_to_all_v] output has ", output.numel(),
               " elements but the recv counts add up to ", Total(recv_counts));
  return Submit({.op = OpType::kAllToAllV,
                 .input = input.Flatten(),
                 .output = output.Flatten(),
                 .counts = std::move(send_counts),
                 .recv_counts = std::move(recv_counts)});
}

std::shared_ptr<Work> ProcessGroup::Barrier() { return Submit({.op = OpType::kBarrier}); }

GpuStreamRunnerCalls ProcessGroup::RunnerCalls() {
  return {.execute = [this](const Collective& c) { return Execute(c); },
          .async_error = [this] { return AsyncError(); },
          .abort_communication = [this] { AbortCommunication(); },
          .describe = [this](const Collective& c) { return Describe(c); },
          .timeout = [this] { return options_.timeout; }};
}

}  // namespace ddpkit::comm
