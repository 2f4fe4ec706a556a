#include "comm/round_robin.h"

#include "autograd/base/error.h"
#include "comm/collective_tag.h"

namespace ddpkit::comm {
namespace {

// The groups' common rank and options, once they are checked to share rank and size.
const ProcessGroup& CheckedFirst(const std::vector<std::unique_ptr<ProcessGroup>>& groups) {
  const int k = static_cast<int>(groups.size());
  DDPKIT_CHECK(k >= 1 && k <= kMaxRoundRobinGroups, "[round_robin] takes 1 to ",
               kMaxRoundRobinGroups, " groups, got ", k);
  for (int i = 0; i < k; ++i) {
    DDPKIT_CHECK(groups[i] != nullptr, "[round_robin] group ", i, " is null");
    DDPKIT_CHECK(groups[i]->rank() == groups[0]->rank() && groups[i]->size() == groups[0]->size(),
                 "[round_robin] group ", i, " is rank ", groups[i]->rank(), " of ",
                 groups[i]->size(), " but group 0 is rank ", groups[0]->rank(), " of ",
                 groups[0]->size(), "; every group must span the same ranks");
  }
  return *groups[0];
}

}  // namespace

class ProcessGroupRoundRobin::Relay final : public CollectiveListener {
 public:
  Relay(ProcessGroupRoundRobin& owner, int group) : owner_(owner), group_(group) {}
  // On the issuing thread, inside the group's Submit (owner.issue_mu_ held): pairs the group's
  // number with the composite's call before the group's thread can start it.
  void OnQueued(const Collective& c) override {
    std::lock_guard<std::mutex> lock(owner_.flight_mu_);
    owner_.in_flight_[group_][c.sequence_number] = owner_.issuing_;
  }
  void OnStarted(uint64_t sequence_number) override { owner_.OnStarted(group_, sequence_number); }
  void OnFinished(uint64_t sequence_number, bool ok) override {
    owner_.OnFinished(group_, sequence_number, ok);
  }

 private:
  ProcessGroupRoundRobin& owner_;
  const int group_;
};

ProcessGroupRoundRobin::ProcessGroupRoundRobin(std::vector<std::unique_ptr<ProcessGroup>> groups,
                                               std::function<void(const ProcessGroup&)> on_closed)
    : ProcessGroup(CheckedFirst(groups).rank(), CheckedFirst(groups).size(),
                   CheckedFirst(groups).options()),
      groups_(std::move(groups)),
      name_(StrCat("round_robin(", groups_[0]->backend_name(), " x", groups_.size(), ")")),
      on_closed_(std::move(on_closed)),
      in_flight_(groups_.size()) {
  for (size_t i = 0; i < groups_.size(); ++i) {
    relays_.push_back(std::make_unique<Relay>(*this, static_cast<int>(i)));
    groups_[i]->SetListener(relays_.back().get());
  }
}

// The groups finish their queued collectives first; those still report through the relays.
ProcessGroupRoundRobin::~ProcessGroupRoundRobin() {
  groups_.clear();
  if (on_closed_) on_closed_(*this);
}

absl::Status ProcessGroupRoundRobin::health() const {
  for (const auto& group : groups_) {
    if (absl::Status status = group->health(); !status.ok()) return status;
  }
  return absl::OkStatus();
}

std::shared_ptr<Work> ProcessGroupRoundRobin::Submit(Collective c) {
  std::shared_ptr<Work> work, forwarded;
  {
    std::lock_guard<std::mutex> lock(issue_mu_);
    c.tag = ScopedCollectiveTag::Current();
    c.sequence_number = next_sequence_number_++;
    work = std::make_shared<Work>(c.op, c.sequence_number, SpinsOnHandOffs());
    recorder_.Queued(c);
    CollectiveListener* listener = listener_.load();
    if (listener != nullptr) listener->OnQueued(c);
    issuing_ = {c.sequence_number, work};
    ProcessGroup& group = *groups_[next_group_];
    next_group_ = (next_group_ + 1) % groups_.size();
    forwarded = group.Submit(std::move(c));
    issuing_ = {};
  }
  // Outside the lock: a broken group has already finished `forwarded`, so `work`'s callbacks
  // (a comm hook may issue collectives here) run now, on this thread.
  forwarded->OnCompletion([work](const absl::Status& s) { work->Finish(s); });
  return work;
}

void ProcessGroupRoundRobin::OnStarted(int group, uint64_t group_sequence_number) {
  InFlight call;
  {
    std::lock_guard<std::mutex> lock(flight_mu_);
    call = in_flight_[group].at(group_sequence_number);
  }
  recorder_.Started(call.sequence_number);
  CollectiveListener* listener = listener_.load();
  if (listener != nullptr) listener->OnStarted(call.sequence_number);
  call.work->MarkStarted();
}

void ProcessGroupRoundRobin::OnFinished(int group, uint64_t group_sequence_number, bool ok) {
  InFlight call;
  {
    std::lock_guard<std::mutex> lock(flight_mu_);
    auto it = in_flight_[group].find(group_sequence_number);
    DDPKIT_CHECK(it != in_flight_[group].end(), "[round_robin] group ", group,
                 " finished collective ", group_sequence_number, " that was never issued here");
    call = std::move(it->second);
    in_flight_[group].erase(it);
  }
  recorder_.Finished(call.sequence_number, ok);
  CollectiveListener* listener = listener_.load();
  if (listener != nullptr) listener->OnFinished(call.sequence_number, ok);
}

absl::Status ProcessGroupRoundRobin::Execute(const Collective& c) {
  return absl::InternalError(StrCat("[round_robin] ", Describe(c),
                                    " reached Execute, but the "
                                    "composite runs nothing itself (a bug)"));
}

absl::Status ProcessGroupRoundRobin::VerifyCallsMatch(const Collective& c) { return Execute(c); }

}  // namespace ddpkit::comm
