// Round-robin process groups (Li et al., "PyTorch Distributed", VLDB 2020, §5.4; PyTorch's
// ProcessGroupRoundRobin): one ProcessGroup that owns K groups over the same ranks and hands
// collective i to group i mod K, so up to K collectives (DDP's gradient buckets) run at once, on
// K communication threads and K sets of connections. As in PyTorch, each call is simply forwarded
// to the next group; every rank issues the same calls in the same order, so every rank sends
// collective i to the same group.
//
// What the composite is, beside its groups:
//  * sequence numbers, Work, flight recorder and listener are the composite's own, over every
//    collective issued on it (each group's recorder still holds its share, under its own
//    numbers: groups() exposes them);
//  * health() is the first unhealthy group's (a failure breaks only the group it ran on, as
//    in PyTorch; later collectives on the others still run, but their peers may be gone);
//  * a Barrier is forwarded like any collective: it waits for every rank on ONE group and does
//    not order the collectives running on the others;
//  * SupportsDevice and DefaultDevice are group 0's; backend_name() reads "round_robin(gloo x2)".
//  * a group that fails writes its own flight-recorder dump, under its own numbers (the threads
//    world then rewrites each rank's with the composite's record, the same numbers everywhere).
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "comm/process_group.h"

namespace ddpkit::comm {

// The most groups a composite takes (--round-robin-groups): each is a thread and a connection
// per peer.
inline constexpr int kMaxRoundRobinGroups = 16;

class ProcessGroupRoundRobin final : public ProcessGroup {
 public:
  // `groups`: 1..kMaxRoundRobinGroups groups, all of one rank and size (checked).
  // Takes its options (timeout, recorder size) from group 0. `on_closed`, if set, runs in the
  // destructor once every group has finished its queued collectives (it sees the final record).
  explicit ProcessGroupRoundRobin(std::vector<std::unique_ptr<ProcessGroup>> groups,
                                  std::function<void(const ProcessGroup&)> on_closed = nullptr);
  ~ProcessGroupRoundRobin() override;

  std::string_view backend_name() const override { return name_; }
  absl::Status health() const override;
  bool SupportsDevice(Device device) const override { return groups_[0]->SupportsDevice(device); }
  Device DefaultDevice() const override { return groups_[0]->DefaultDevice(); }
  bool SpinsOnHandOffs() const override { return groups_[0]->SpinsOnHandOffs(); }

  int num_groups() const { return static_cast<int>(groups_.size()); }
  const ProcessGroup& group(int i) const { return *groups_.at(i); }

 private:
  // Sees one owned group's collectives and reports them under the composite's numbers.
  class Relay;

  std::shared_ptr<Work> Submit(Collective c) override;
  // Never called: the composite runs nothing itself.
  absl::Status Execute(const Collective& c) override;
  absl::Status VerifyCallsMatch(const Collective& c) override;

  // A collective issued on the composite, by the number its group gave it.
  struct InFlight {
    uint64_t sequence_number = 0;  // the composite's
    std::shared_ptr<Work> work;    // the composite's
  };
  void OnStarted(int group, uint64_t group_sequence_number);
  void OnFinished(int group, uint64_t group_sequence_number, bool ok);

  std::vector<std::unique_ptr<ProcessGroup>> groups_;
  std::vector<std::unique_ptr<Relay>> relays_;
  std::string name_;
  std::function<void(const ProcessGroup&)> on_closed_;

  std::mutex issue_mu_;  // one call issued at a time: the group order is the call order
  // Guarded by issue_mu_:
  uint64_t next_sequence_number_ = 1;
  size_t next_group_ = 0;
  InFlight issuing_;  // the call being handed to its group (read by the group's OnQueued)

  std::mutex flight_mu_;  // a leaf lock: taken on the groups' threads too
  // Guarded by flight_mu_: per group, its sequence number -> the composite's call.
  std::vector<absl::flat_hash_map<uint64_t, InFlight>> in_flight_;
};

}  // namespace ddpkit::comm
