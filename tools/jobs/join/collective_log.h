// How `ddpkit join` makes the join protocol visible: the collectives each rank's DDP (and ZeRO)
// issued per iteration, read from its flight recorder, and a per-iteration log that every rank
// fills in its part of and two allreduces make whole.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "comm/process_group.h"
#include "join/join.h"
#include "tools/jobs/join/join_report.pb.h"

namespace ddpkit::jobs {

// One collective as a flight recorder saw it.
struct CollectiveRecord {
  comm::OpType op = comm::OpType::kAllreduce;
  comm::ReduceOp reduce_op = comm::ReduceOp::kSum;
  int root = 0;
  DType dtype = DType::kFloat32;
  int64_t count = 0;
  // "ALLREDUCE int64[1] SUM", "BROADCAST float32[96] from 1".
  std::string Describe() const;
};

// Reads a rank's flight recorder incrementally: the collectives issued since the last Take.
class CollectiveTap {
 public:
  explicit CollectiveTap(const comm::ProcessGroup& group);
  std::vector<CollectiveRecord> Take();

 private:
  const comm::ProcessGroup& group_;
  uint64_t last_seen_ = 0;
};

// A joinable without collectives of its own: listed last, its hook runs after DDP's (and the
// optimizer's) in each shadowed iteration, and calls `on_iteration` to record what they issued.
class ShadowRecorder final : public join::Joinable {
 public:
  ShadowRecorder(comm::ProcessGroup& group, std::function<void()> on_iteration);
  std::unique_ptr<join::JoinHook> MakeJoinHook() override;
  comm::ProcessGroup& join_process_group() const override { return group_; }

 private:
  comm::ProcessGroup& group_;
  std::function<void()> on_iteration_;
};

// The run's record, per iteration: the loss summed over the active ranks, the gradient norm and
// divide factor the lowest active rank saw, and the collectives of two reporters — the lowest
// active rank and the lowest shadowing rank. Each rank writes only what it saw; Combine sums the
// ranks' logs (every slot has exactly one writer).
class IterationLog {
 public:
  enum class Role { kActive = 0, kShadowing = 1 };
  static constexpr int kMaxCollectives = 64;  // per iteration and role; more are cut off

  // `inputs`: iterations per rank.
  IterationLog(std::vector<int> inputs, int rank);

  // The lowest rank that is active (or shadowing) in `iteration`, -1 when none is.
  int Reporter(int iteration, Role role) const;
  bool IsReporter(int iteration, Role role) const { return Reporter(iteration, role) == rank_; }

  void SetLoss(int iteration, double loss);  // this rank's; Combine sums the active ranks'
  void SetGradient(int iteration, double grad_norm, double divide_factor);
  void SetCollectives(int iteration, Role role, const std::vector<CollectiveRecord>& records);

  // Collective: every rank calls it once, after its loop.
  absl::Status Combine(comm::ProcessGroup& group);
  // Appends iterations [0, count) to the report; `stopped` (or -1) did not complete.
  void AddToReport(int count, int stopped, JoinReport& report) const;

 private:
  static constexpr int kWordsPerCollective = 5;
  static constexpr int kRoleWords = 1 + kMaxCollectives * kWordsPerCollective;  // count, records
  int64_t* Words(int iteration, Role role) const;

  std::vector<int> inputs_;
  int rank_;
  int iterations_;
  Tensor numbers_;      // float64 [iterations, 3]: loss sum, grad norm, divide factor
  Tensor collectives_;  // int64 [iterations, 2 roles, kRoleWords]
};

}  // namespace ddpkit::jobs
