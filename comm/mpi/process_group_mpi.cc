#include "comm/mpi/process_group_mpi.h"

#include <sched.h>

#include <chrono>
#include <climits>
#include <numeric>
#include <thread>
#include <vector>

#include "comm/failure_diagnosis.h"
#include "comm/mpi/allreduce_algorithm.h"
#include "comm/mpi/mpi_runtime.h"
#include "comm/widen.h"

namespace ddpkit::comm {
namespace {

MPI_Datatype MpiType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return MPI_FLOAT;
    case DType::kFloat64: return MPI_DOUBLE;
    case DType::kInt32: return MPI_INT32_T;
    case DType::kInt64: return MPI_INT64_T;
    case DType::kFloat16:
    case DType::kBFloat16: return MPI_UINT16_T;  // moved as bits; reduced in float32
  }
  // The base refuses unknown dtypes before a backend runs (ProcessGroup::RunOne); moving the
  // bytes as MPI_BYTE here would be silently wrong.
  throw Error(StrCat("[mpi] no MPI type for dtype ", static_cast<int>(dtype)));
}

MPI_Op MpiOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return MPI_SUM;
    case ReduceOp::kMin: return MPI_MIN;
    case ReduceOp::kMax: return MPI_MAX;
  }
  throw Error(StrCat("[mpi] no MPI op for reduce op ", static_cast<int>(op)));
}

// MPI counts are ints.
absl::StatusOr<std::vector<int>> IntCounts(const std::vector<int64_t>& counts,
                                           std::string_view op) {
  std::vector<int> out;
  for (int64_t c : counts) {
    if (c > INT_MAX) {
      return absl::InvalidArgumentError(
          StrCat("[", op, "] mpi takes at most ", INT_MAX, " elements per rank, got ", c));
    }
    out.push_back(static_cast<int>(c));
  }
  return out;
}

std::vector<int> Displacements(const std::vector<int>& counts) {
  std::vector<int> displs(counts.size(), 0);
  std::exclusive_scan(counts.begin(), counts.end(), displs.begin(), 0);
  return displs;
}

class ProcessGroupMpi final : public ProcessGroup {
 public:
  ProcessGroupMpi(MPI_Comm comm, int rank, int size, std::shared_ptr<Store> store,
                  ProcessGroupOptions options)
      : ProcessGroup(rank, size, options), comm_(comm), store_(std::move(store)) {
    StartCommThread();
  }
  ~ProcessGroupMpi() override {
    StopCommThread();
    if (!abandoned_) MPI_Comm_free(&comm_);  // a pending collective keeps it in use
  }
  std::string_view backend_name() const override { return BackendName(Backend::kMpi); }
  MPI_Comm comm() const { return comm_; }

 private:
  absl::Status Execute(const Collective& c) override {
    const int64_t n = c.input.defined() ? c.input.numel() : 0;
    switch (c.op) {
      case OpType::kAllreduce:
        if (n == 0 || size() == 1) return absl::OkStatus();
        return ReduceWidened(c.output, c.reduce_op, size(),
                             [&](const Tensor& acc) { return Allreduce(c, acc); });
      case OpType::kBroadcast: return Broadcast(c);
      case OpType::kAllgather:
        if (n == 0) return absl::OkStatus();
        return Await(c, [&](MPI_Request* r) {
          return MPI_Iallgather(c.input.raw_data(), static_cast<int>(n), MpiType(c.input.dtype()),
                                c.output.raw_data(), static_cast<int>(n), MpiType(c.input.dtype()),
                                comm_, r);
        });
      case OpType::kAllgatherV: {
        DDPKIT_ASSIGN_OR_RETURN(std::vector<int> counts, IntCounts(c.counts, "allgather_v"));
        const std::vector<int> displs = Displacements(counts);
        return Await(c, [&](MPI_Request* r) {
          return MPI_Iallgatherv(c.input.raw_data(), counts[rank()], MpiType(c.input.dtype()),
                                 c.output.raw_data(), counts.data(), displs.data(),
                                 MpiType(c.input.dtype()), comm_, r);
        });
      }
      case OpType::kReduceScatter: return ReduceScatter(c);
      case OpType::kAllToAllV: {
        DDPKIT_ASSIGN_OR_RETURN(std::vector<int> send, IntCounts(c.counts, "all_to_all_v"));
        DDPKIT_ASSIGN_OR_RETURN(std::vector<int> recv, IntCounts(c.recv_counts, "all_to_all_v"));
        const std::vector<int> send_displs = Displacements(send), recv_displs = Displacements(recv);
        const MPI_Datatype type = MpiType(c.input.dtype());
        return Await(c, [&](MPI_Request* r) {
          return MPI_Ialltoallv(c.input.raw_data(), send.data(), send_displs.data(), type,
                                c.output.raw_data(), recv.data(), recv_displs.data(), type, comm_,
                                r);
        });
      }
      case OpType::kBarrier:
        return Await(c, [&](MPI_Request* r) { return MPI_Ibarrier(comm_, r); });
    }
    return NotHandled(c);
  }

  // In place, in pieces of at most INT_MAX elements; AVG sums (ReduceWidened divides). Each
  // piece at the algorithm its size gets (allreduce_algorithm.h).
  absl::Status Allreduce(const Collective& c, const Tensor& t) {
    const int64_t n = t.numel();
    const size_t element = ElementSize(t.dtype());
    for (int64_t begin = 0; begin < n; begin += INT_MAX) {
      const int count = static_cast<int>(std::min<int64_t>(INT_MAX, n - begin));
      void* data = static_cast<std::byte*>(t.raw_data()) + begin * element;
      absl::Status chosen;
      const absl::Status done = Await(c, [&](MPI_Request* r) {
        const auto lock = mpi::ChooseAllreduceAlgorithm(int64_t{count} * element, chosen);
        if (!chosen.ok()) return MPI_ERR_OTHER;
        return MPI_Iallreduce(MPI_IN_PLACE, data, count, MpiType(t.dtype()), MpiOp(c.reduce_op),
                              comm_, r);
      });
      if (!chosen.ok()) {
        return absl::Status(chosen.code(), StrCat(Describe(c), ": ", chosen.message()));
      }
      DDPKIT_RETURN_IF_ERROR(done);
    }
    return absl::OkStatus();
  }

  absl::Status Broadcast(const Collective& c) {
    const int64_t n = c.output.numel();
    if (n == 0 || size() == 1) return absl::OkStatus();
    const size_t element = ElementSize(c.output.dtype());
    for (int64_t begin = 0; begin < n; begin += INT_MAX) {
      const int count = static_cast<int>(std::min<int64_t>(INT_MAX, n - begin));
      void* data = static_cast<std::byte*>(c.output.raw_data()) + begin * element;
      DDPKIT_RETURN_IF_ERROR(Await(c, [&](MPI_Request* r) {
        return MPI_Ibcast(data, count, MpiType(c.output.dtype()), c.root, comm_, r);
      }));
    }
    return absl::OkStatus();
  }

  absl::Status ReduceScatter(const Collective& c) {
    DDPKIT_ASSIGN_OR_RETURN(std::vector<int> counts, IntCounts(c.counts, "reduce_scatter"));
    return ReduceWidened(c.output, c.reduce_op, size(), [&](const Tensor& acc) {
      const Tensor in = AsType(c.input, acc.dtype());
      return Await(c, [&](MPI_Request* r) {
        return MPI_Ireduce_scatter(in.raw_data(), acc.raw_data(), counts.data(),
                                   MpiType(in.dtype()), MpiOp(c.reduce_op), comm_, r);
      });
    });
  }

  // Starts a nonblocking call and polls it to completion. MPI moves data only inside MPI calls,
  // so the thread keeps polling while a transfer may be under way: tightly at first (a small
  // collective takes microseconds), yielding its core to compute after 100 µs, and only after
  // 100 ms (a peer that is late, not a transfer) sleeping 50 µs between polls — sleeping
  // sooner stalls a 16 MB allreduce eightfold. At the timeout the collective is abandoned and
  // the ranks that never reached it are named.
  template <typename Start>
  absl::Status Await(const Collective& c, Start start) {
    MPI_Request request = MPI_REQUEST_NULL;
    if (absl::Status s = mpi::Check(start(&request), OpTypeName(c.op)); !s.ok()) {
      return absl::Status(s.code(), StrCat(Describe(c), ": ", s.message()));
    }
    const auto begin = std::chrono::steady_clock::now();
    const auto deadline = begin + absl::ToChronoNanoseconds(options().timeout);
    for (int done = 0, polls = 0;; ++polls) {
      if (absl::Status s = mpi::Check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
          !s.ok()) {
        return absl::Status(s.code(), StrCat(Describe(c), " failed: ", s.message()));
      }
      if (done) return absl::OkStatus();
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) return Abandon(c);
      if (now - begin > std::chrono::milliseconds(100)) {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      } else if (now - begin > std::chrono::microseconds(100) && polls % 16 == 0) {
        sched_yield();
      }
    }
  }

  absl::Status Abandon(const Collective& c) {
    abandoned_ = true;
    mpi::MarkAbandoned();
    const std::string who =
        RanksThatDidNotArrive(*store_, rank(), size(), c.sequence_number, options());
    return absl::DeadlineExceededError(
        StrCat(Describe(c), " timed out after ", absl::FormatDuration(options().timeout), who,
               "; MPI cannot cancel a collective, so this process will end without "
               "MPI_Finalize and the launcher will end the others"));
  }

  // Every rank's fingerprint, gathered with a plain allgather, then compared.
  absl::Status VerifyCallsMatch(const Collective& c) override {
    return CheckCollectivesMatchByAllgather(
        c, size(), [&](std::vector<int64_t>& mine, std::vector<int64_t>& all) {
          const int words = static_cast<int>(mine.size());
          return Await(c, [&](MPI_Request* r) {
            return MPI_Iallgather(mine.data(), words, MPI_INT64_T, all.data(), words, MPI_INT64_T,
                                  comm_, r);
          });
        });
  }

  MPI_Comm comm_;
  std::shared_ptr<Store> store_;
  bool abandoned_ = false;  // written by the communication thread, read after it stopped
};

}  // namespace

absl::StatusOr<std::unique_ptr<ProcessGroup>> CreateMpiProcessGroup(MPI_Comm comm,
                                                                    std::shared_ptr<Store> store,
                                                                    ProcessGroupOptions options) {
  DDPKIT_RETURN_IF_ERROR(mpi::EnsureInitialized());
  MPI_Comm own;
  DDPKIT_RETURN_IF_ERROR(mpi::Check(MPI_Comm_dup(comm, &own), "MPI_Comm_dup"));
  MPI_Comm_set_errhandler(own, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  MPI_Comm_rank(own, &rank);
  MPI_Comm_size(own, &size);
  return std::unique_ptr<ProcessGroup>(
      new ProcessGroupMpi(own, rank, size, std::move(store), options));
}

absl::StatusOr<absl::Duration> TimeRawMpiAllreduce(ProcessGroup& group, int64_t count,
                                                   int iterations) {
  auto* mpi_group = dynamic_cast<ProcessGroupMpi*>(&group);
  if (mpi_group == nullptr) {
    return absl::InvalidArgumentError("raw MPI timing needs an mpi process group");
  }
  if (count > INT_MAX) return absl::InvalidArgumentError("raw MPI timing: count beyond INT_MAX");
  std::vector<float> data(count, 1.0f);
  const absl::Time start = absl::Now();
  for (int i = 0; i < iterations; ++i) {
    DDPKIT_RETURN_IF_ERROR(
        mpi::Check(MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(count), MPI_FLOAT,
                                 MPI_SUM, mpi_group->comm()),
                   "raw MPI_Allreduce"));
  }
  return (absl::Now() - start) / std::max(iterations, 1);
}

}  // namespace ddpkit::comm
