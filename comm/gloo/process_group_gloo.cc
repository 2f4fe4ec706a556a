#include "comm/gloo/process_group_gloo.h"

#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/attr.h>
#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <numeric>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "comm/failure_diagnosis.h"
#include "comm/gloo/connect_diagnosis.h"
#include "comm/gloo/loop_scheduling.h"
#include "comm/reduce.h"
#include "comm/widen.h"

namespace ddpkit::comm {
namespace {

// Gloo's rendezvous::Store on top of ours; Gloo's keys are namespaced under "gloo/".
class GlooStoreAdapter : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(std::shared_ptr<comm::Store> store, absl::Duration timeout)
      : store_(std::move(store)), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    Check(store_->Set("gloo/" + key, std::string(data.begin(), data.end())));
  }
  std::vector<char> get(const std::string& key) override {
    absl::StatusOr<std::string> value = store_->Get("gloo/" + key, timeout_);
    Check(value.status());
    return std::vector<char>(value->begin(), value->end());
  }
  void wait(const std::vector<std::string>& keys) override {
    wait(keys, absl::ToChronoMilliseconds(timeout_));
  }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> prefixed;
    for (const std::string& k : keys) prefixed.push_back("gloo/" + k);
    const absl::Status waited = store_->Wait(prefixed, absl::FromChrono(timeout));
    // Gloo's full-mesh keys are the ranks: say whose addresses never came.
    if (!waited.ok()) {
      throw std::runtime_error(StrCat(waited.message(), "; rank ", absl::StrJoin(keys, ", "),
                                      " did not publish its Gloo addresses in time (dead, stuck, "
                                      "or cut off from the store)"));
    }
  }

 private:
  static void Check(const absl::Status& status) {
    if (!status.ok()) throw std::runtime_error(std::string(status.message()));
  }
  std::shared_ptr<comm::Store> store_;
  absl::Duration timeout_;
};

template <typename F>
decltype(auto) DispatchAll(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32: return f.template operator()<float>();
    case DType::kFloat64: return f.template operator()<double>();
    case DType::kInt32: return f.template operator()<int32_t>();
    case DType::kInt64: return f.template operator()<int64_t>();
    default: throw Error(StrCat("[gloo] no native type for ", DTypeName(dtype)));
  }
}

using GlooAlgorithm = gloo::AllreduceOptions::Algorithm;

// DDPKIT_GLOO_ALGORITHM: ring (the default) or bcube, the two allreduce algorithms of Gloo's
// function API (the one whose calls take a tag and a timeout). Measured on this project's
// machines, neither wins at any size (docs/performance.md), so ring stays the default.
absl::StatusOr<GlooAlgorithm> GlooAlgorithmFromEnv() {
  const char* value = std::getenv("DDPKIT_GLOO_ALGORITHM");
  if (value == nullptr || *value == '\0' || std::string_view(value) == "ring") {
    return GlooAlgorithm::RING;
  }
  if (std::string_view(value) == "bcube") return GlooAlgorithm::BCUBE;
  return absl::InvalidArgumentError(StrCat(
      "DDPKIT_GLOO_ALGORITHM='", value, "' is not a Gloo allreduce algorithm; use ring or bcube"));
}

class ProcessGroupGloo final : public ProcessGroup {
 public:
  ProcessGroupGloo(int rank, int size, std::shared_ptr<gloo::Context> context,
                   std::shared_ptr<Store> store, ProcessGroupOptions options,
                   GlooAlgorithm algorithm, GlooLoopPolicy loop_policy)
      : ProcessGroup(rank, size, options),
        context_(std::move(context)),
        store_(std::move(store)),
        algorithm_(algorithm),
        loop_policy_(loop_policy) {
    WatchDeadlines();
    StartCommThread();
  }
  ~ProcessGroupGloo() override { StopCommThread(); }
  std::string_view backend_name() const override { return BackendName(Backend::kGloo); }
  // Gloo's loop thread moves every byte; a polling thread here would hold the core it needs
  // (comm/gloo/loop_scheduling.h; measured in docs/performance.md).
  bool SpinsOnHandOffs() const override { return false; }

 private:
  uint32_t Tag(uint64_t seq) const { return static_cast<uint32_t>(seq & 0x7fffffff); }

  absl::Status Execute(const Collective& c) override {
    if (!comm_thread_scheduled_) {  // Execute runs on the communication thread only
      ScheduleCommThread(loop_policy_);
      comm_thread_scheduled_ = true;
    }
    failing_.store(false);
    try {
      return Run(c);
    } catch (const Error&) {
      throw;  // ddpkit's own invariant, not a peer's failure: the base reports it as Internal
    } catch (const gloo::Exception& e) {
      failing_.store(true);
      return Diagnose(c, e.what(), /*close_links=*/true);
    } catch (const std::runtime_error& e) {
      failing_.store(true);
      return Diagnose(c, e.what(), /*close_links=*/true);
    }
  }

  absl::Status Run(const Collective& c) {
    const int64_t n = c.input.defined() ? c.input.numel() : 0;
    switch (c.op) {
      case OpType::kAllreduce:
        if (n == 0 || size() == 1) return absl::OkStatus();
        return ReduceWidened(c.output, c.reduce_op, size(), [&](const Tensor& acc) {
          Allreduce(acc, c.reduce_op, c.sequence_number);
          return absl::OkStatus();
        });
      case OpType::kBroadcast: {
        if (n == 0 || size() == 1) return absl::OkStatus();
        gloo::BroadcastOptions opts(context_);
        const size_t bytes = c.output.nbytes();
        opts.setOutput(static_cast<uint8_t*>(c.output.raw_data()), bytes);
        if (rank() == c.root) opts.setInput(static_cast<uint8_t*>(c.output.raw_data()), bytes);
        opts.setRoot(c.root);
        opts.setTag(Tag(c.sequence_number));
        opts.setTimeout(absl::ToChronoMilliseconds(options().timeout));
        gloo::broadcast(opts);
        return absl::OkStatus();
      }
      case OpType::kAllgather: {
        if (n == 0) return absl::OkStatus();
        gloo::AllgatherOptions opts(context_);
        opts.setInput(static_cast<uint8_t*>(c.input.raw_data()), c.input.nbytes());
        opts.setOutput(static_cast<uint8_t*>(c.output.raw_data()), c.output.nbytes());
        opts.setTag(Tag(c.sequence_number));
        opts.setTimeout(absl::ToChronoMilliseconds(options().timeout));
        gloo::allgather(opts);
        return absl::OkStatus();
      }
      case OpType::kAllgatherV: {
        gloo::AllgathervOptions opts(context_);
        std::vector<size_t> bytes;
        for (int64_t count : c.counts) bytes.push_back(count * ElementSize(c.input.dtype()));
        if (std::accumulate(bytes.begin(), bytes.end(), size_t{0}) == 0) return absl::OkStatus();
        opts.setInput(static_cast<uint8_t*>(c.input.raw_data()), bytes[rank()]);
        opts.setOutput(static_cast<uint8_t*>(c.output.raw_data()), bytes);
        opts.setTag(Tag(c.sequence_number));
        opts.setTimeout(absl::ToChronoMilliseconds(options().timeout));
        gloo::allgatherv(opts);
        return absl::OkStatus();
      }
      case OpType::kReduceScatter: {
        // Each rank sends segment j to rank j and receives every rank's copy of its own
        // segment: (n-1)/n of the data per rank, as a ring reduce-scatter.
        const int64_t mine = c.counts[rank()];
        Tensor received = Tensor::Empty({mine * size()}, c.input.dtype());
        AllToAll(c.input, received, c.counts, std::vector<int64_t>(size(), mine),
                 c.sequence_number);
        return ReduceWidened(c.output, c.reduce_op, size(), [&](const Tensor& acc) {
          acc.CopyFrom(received.Rows(0, mine));
          for (int r = 1; r < size(); ++r) {
            const Tensor part = AsType(received.Rows(r * mine, (r + 1) * mine), acc.dtype());
            ReduceInto(acc.raw_data(), part.raw_data(), mine, acc.dtype(), c.reduce_op);
          }
          return absl::OkStatus();
        });
      }
      case OpType::kAllToAllV:
        AllToAll(c.input, c.output, c.counts, c.recv_counts, c.sequence_number);
        return absl::OkStatus();
      case OpType::kBarrier: {
        gloo::BarrierOptions opts(context_);
        opts.setTag(Tag(c.sequence_number));
        opts.setTimeout(absl::ToChronoMilliseconds(options().timeout));
        gloo::barrier(opts);
        return absl::OkStatus();
      }
    }
    return NotHandled(c);
  }

  // SUM, MIN or MAX over the ranks, in place; AVG sums (ReduceWidened divides).
  void Allreduce(const Tensor& t, ReduceOp op, uint64_t seq) {
    DispatchAll(t.dtype(), [&]<typename T>() {
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(t.data<T>(), t.numel());
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAvg:
          opts.setReduceFunction(
              static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<T>));
          break;
        case ReduceOp::kMin:
          opts.setReduceFunction(
              static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::min<T>));
          break;
        case ReduceOp::kMax:
          opts.setReduceFunction(
              static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::max<T>));
          break;
      }
      opts.setAlgorithm(algorithm_);
      opts.setTag(Tag(seq));
      opts.setTimeout(absl::ToChronoMilliseconds(options().timeout));
      gloo::allreduce(opts);
    });
  }

  void AllToAll(const Tensor& input, const Tensor& output, const std::vector<int64_t>& send,
                const std::vector<int64_t>& recv, uint64_t seq) {
    const int64_t element = static_cast<int64_t>(ElementSize(input.dtype()));
    std::vector<int64_t> send_bytes, recv_bytes;
    for (int64_t s : send) send_bytes.push_back(s * element);
    for (int64_t r : recv) recv_bytes.push_back(r * element);
    // No shortcut for a rank with nothing to send or receive: gloo's alltoallv exchanges a
    // (possibly empty) message with every peer, and the peers wait for it.
    gloo::AlltoallvOptions opts(context_);
    opts.setInput(static_cast<uint8_t*>(input.raw_data()), send_bytes);
    opts.setOutput(static_cast<uint8_t*>(output.raw_data()), recv_bytes);
    opts.setTag(Tag(seq));
    opts.setTimeout(absl::ToChronoMilliseconds(options().timeout));
    gloo::alltoallv(opts);
  }

  // Every rank's fingerprint, gathered with a plain allgather, then compared.
  absl::Status VerifyCallsMatch(const Collective& c) override {
    return CheckCollectivesMatchByAllgather(
        c, size(), [&](std::vector<int64_t>& mine, std::vector<int64_t>& all) {
          try {
            gloo::AllgatherOptions opts(context_);
            opts.setInput(mine.data(), mine.size());
            opts.setOutput(all.data(), all.size());
            // apart from the collective's own tag
            opts.setTag(Tag(c.sequence_number) | 0x80000000u);
            opts.setTimeout(absl::ToChronoMilliseconds(options().timeout));
            gloo::allgather(opts);
          } catch (const std::exception& e) {
            return absl::UnavailableError(e.what());
          }
          return absl::OkStatus();
        });
  }

  // Gloo bounds each wait, not the call: under heavy loss a collective can creep on for minutes,
  // each wait just inside the timeout. At the timeout it fails here as if Gloo had timed out.
  std::optional<absl::Status> Overdue(const Collective& c) override {
    if (failing_.load()) return std::nullopt;  // Gloo's own error came first: it is being told
    return Diagnose(c, StrCat("Timed out: the call ran past the timeout as a whole (Gloo bounds "
                              "each of its waits, not the call)"));
  }

  // A peer has failed while this rank waits in `c`: say so in the store, once per collective, so
  // the peer does not name this live rank beside the dead one. The reply gets the diagnosis's
  // window, not less: a store request that times out leaves the connection unusable, and the
  // diagnosis needs it.
  void StillRunning(const Collective& c) override {
    if (waiting_recorded_ == c.sequence_number) return;
    if (RecordWaitingIfAPeerFailed(*store_, rank(), c.sequence_number, DiagnosisTime(options()))) {
      waiting_recorded_ = c.sequence_number;
    }
  }

  // Turns Gloo's exception into our error: which op, which sequence number, and — by asking the
  // store where every rank stopped — which ranks never answered (comm/failure_diagnosis.h).
  // With `close_links` (on the communication thread, after Gloo threw: nothing else is inside
  // Gloo) the group's connections close once this rank is recorded, so a live peer waiting on
  // this rank fails now and records itself instead of being named beside the dead rank. The
  // group is finished anyway: collectives behind a failed one fail at once.
  absl::Status Diagnose(const Collective& c, const std::string& gloo_error,
                        bool close_links = false) {
    const bool timed_out = absl::StrContains(gloo_error, "Timed out");
    const std::string who =
        RanksThatDidNotArrive(*store_, rank(), size(), c.sequence_number, options(), [&] {
          if (close_links) context_->closeConnections();
        });
    return absl::Status(
        timed_out ? absl::StatusCode::kDeadlineExceeded : absl::StatusCode::kUnavailable,
        StrCat(Describe(c),
               timed_out ? StrCat(" timed out after ", absl::FormatDuration(options().timeout))
                         : " failed",
               ": ", gloo_error, who));
  }

  std::shared_ptr<gloo::Context> context_;
  std::shared_ptr<Store> store_;
  const GlooAlgorithm algorithm_;
  const GlooLoopPolicy loop_policy_;
  bool comm_thread_scheduled_ = false;  // the communication thread's only
  uint64_t waiting_recorded_ = 0;       // StillRunning's: the collective it last recorded
  std::atomic<bool> failing_{false};    // Execute is diagnosing Gloo's own error
  friend absl::StatusOr<absl::Duration> comm::TimeRawGlooAllreduce(ProcessGroup&, int64_t, int);
};

// Gloo writes to its peers' sockets without MSG_NOSIGNAL, so a write to a peer that has just
// died raises SIGPIPE, whose default action ends this process before the failed collective can
// name the dead rank. (Python ignores SIGPIPE at start-up, which is why PyTorch's jobs never see
// this.) Ignored here, unless the program installed its own handler: the write then fails with
// EPIPE, and the collective with it.
void IgnoreSigpipe() {
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    ::signal(SIGPIPE, SIG_IGN);
  }
}

}  // namespace

absl::StatusOr<absl::Duration> TimeRawGlooAllreduce(ProcessGroup& group, int64_t count,
                                                    int iterations) {
  auto* gloo_group = dynamic_cast<ProcessGroupGloo*>(&group);
  if (gloo_group == nullptr)
    return absl::InvalidArgumentError("raw Gloo timing needs a gloo process group");
  std::vector<float> data(count, 1.0f);
  try {
    const absl::Time start = absl::Now();
    for (int i = 0; i < iterations; ++i) {
      gloo::AllreduceOptions opts(gloo_group->context_);
      opts.setOutput(data.data(), data.size());
      opts.setReduceFunction(
          static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
      opts.setAlgorithm(gloo_group->algorithm_);
      opts.setTag(0x40000000u + static_cast<uint32_t>(i));  // apart from sequence-number tags
      opts.setTimeout(absl::ToChronoMilliseconds(group.options().timeout));
      gloo::allreduce(opts);
    }
    return (absl::Now() - start) / std::max(iterations, 1);
  } catch (const std::exception& e) {
    return absl::UnavailableError(StrCat("raw gloo allreduce failed: ", e.what()));
  }
}

absl::StatusOr<std::unique_ptr<ProcessGroup>> CreateGlooProcessGroup(int rank, int size,
                                                                     std::shared_ptr<Store> store,
                                                                     const std::string& address,
                                                                     ProcessGroupOptions options) {
  DDPKIT_ASSIGN_OR_RETURN(const GlooAlgorithm algorithm, GlooAlgorithmFromEnv());
  DDPKIT_ASSIGN_OR_RETURN(const GlooLoopPolicy loop_policy, GlooLoopPolicyFromEnv());
  IgnoreSigpipe();
  gloo::transport::tcp::attr attr;
  if (const char* iface = std::getenv("GLOO_SOCKET_IFNAME"); iface != nullptr && *iface != '\0') {
    attr.iface = iface;
  } else {
    attr.hostname = address;
  }
  try {
    auto device = CreateGlooDevice(attr, loop_policy);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context->setTimeout(absl::ToChronoMilliseconds(options.timeout));
    GlooStoreAdapter adapter(store, options.timeout);
    context->connectFullMesh(adapter, device);
    return std::unique_ptr<ProcessGroup>(new ProcessGroupGloo(
        rank, size, std::move(context), std::move(store), options, algorithm, loop_policy));
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        StrCat("gloo: rank ", rank, " of ", size, " could not connect to its peers: ", e.what(),
               NameUnreachablePeer(*store, rank, size, e.what(), DiagnosisTime(options))));
  }
}

}  // namespace ddpkit::comm
