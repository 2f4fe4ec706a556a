#include "join/join.h"

#include "autograd/base/error.h"
#include "autograd/base/log.h"

namespace ddpkit::join {
namespace {

// Allreduce (SUM) of one int64 and its result; failures become the comm layer's error.
int64_t AllreduceCount(comm::ProcessGroup& group, int64_t value, std::string_view purpose,
                       std::string_view what) {
  comm::ScopedCollectiveTag tag({.purpose = purpose});
  Tensor t = Tensor::Full({1}, static_cast<double>(value), DType::kInt64);
  if (absl::Status s = group.Allreduce(t)->Wait(); !s.ok()) {
    throw Error(StrCat("[join] rank ", group.rank(), ": ", what, " failed: ", s.message()),
                s.code());
  }
  return t.data<int64_t>()[0];
}

}  // namespace

std::shared_ptr<comm::Work> Join::NotifyJoinContext(const Joinable& joinable,
                                                    Tensor* active_ranks) {
  const JoinConfig& config = joinable.join_config();
  if (!config.enable || !config.is_first_joinable) return nullptr;
  comm::ProcessGroup& group = joinable.join_process_group();
  *active_ranks = Tensor::Full({1}, 1.0, DType::kInt64);
  std::shared_ptr<comm::Work> work;
  {
    comm::ScopedCollectiveTag tag({.purpose = "join_count"});
    work = group.Allreduce(*active_ranks);
  }
  if (config.throw_on_early_termination &&
      AllreduceCount(group, 0, "join_throw_check", "checking whether a rank exhausted its inputs") >
          0) {
    throw Error(StrCat("[join] rank ", group.rank(),
                       ": at least one rank exhausted its inputs; every rank stops in this "
                       "iteration (throw_on_early_termination)"),
                absl::StatusCode::kAborted);
  }
  return work;
}

void Join::Run(const std::vector<Joinable*>& joinables, const JoinOptions& options,
               const std::function<void()>& loop) {
  DDPKIT_CHECK(!joinables.empty(), "[join] Join needs at least one joinable");
  comm::ProcessGroup& group = joinables.front()->join_process_group();
  for (const Joinable* j : joinables) {
    DDPKIT_CHECK(&j->join_process_group() == &group,
                 "[join] all joinables must use one process group");
  }
  for (size_t i = 0; i < joinables.size(); ++i) {
    joinables[i]->join_config_ = {.enable = options.enable,
                                  .throw_on_early_termination = options.throw_on_early_termination,
                                  .is_first_joinable = i == 0};
  }
  struct Reset {
    const std::vector<Joinable*>& joinables;
    ~Reset() {
      for (Joinable* j : joinables) j->join_config_ = {};
    }
  } reset{joinables};
  std::vector<std::unique_ptr<JoinHook>> hooks;
  for (Joinable* j : joinables) hooks.push_back(j->MakeJoinHook());

  loop();  // an exception skips the protocol, as leaving PyTorch's context with one does
  if (!options.enable) return;

  bool is_last_joiner = true;
  int64_t shadowed = 0;
  while (true) {
    // Matches the active ranks' NotifyJoinContext allreduce of 1.
    comm::ScopedCollectiveTag shadow({.shadow = true});  // on behalf of the active ranks
    const int64_t active =
        AllreduceCount(group, 0, "join_count", "counting the ranks still active");
    if (active == 0) break;
    if (options.throw_on_early_termination) {
      AllreduceCount(group, 1, "join_throw_check",
                     "telling the active ranks that this rank exhausted its inputs");
      throw Error(
          StrCat("[join] rank ", group.rank(), ": this rank exhausted its inputs while ", active,
                 " rank(s) still had data; every rank stops in this iteration "
                 "(throw_on_early_termination)"),
          absl::StatusCode::kAborted);
    }
    for (auto& hook : hooks) hook->MainHook();
    is_last_joiner = false;
    if (++shadowed == options.skew_warning_iterations) {
      Log(LogLevel::kWarning,
          StrCat("rank ", group.rank(), " has shadowed ", shadowed,
                 " iterations of ranks that still have inputs: the input skew is large and the "
                 "joined rank only waits; balance the data across ranks"));
    }
  }
  for (auto& hook : hooks) hook->PostHook(is_last_joiner);
}

}  // namespace ddpkit::join
