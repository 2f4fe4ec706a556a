// Join: training with uneven inputs, as torch.distributed.algorithms.join.
//
// Every collective needs every rank. When ranks hold different numbers of batches, the rank
// that runs out first would leave the others waiting in their next allreduce forever (or, with
// ddpkit, until the timeout names it). Join keeps such a rank answering: after its training
// loop ends it *shadows* the collectives the still-active ranks issue per iteration, through
// each Joinable's JoinHook, until every rank has run out.
//
//   Join::Run({ddp.get()}, {}, [&] { for (batch : my_batches) train_step(batch); });
//
// Protocol, per iteration of the ranks still active:
//  * an active rank's first joinable calls Join::NotifyJoinContext before its per-iteration
//    collectives: an allreduce of 1 (async) — summed with the joined ranks' 0s it counts the
//    active ranks;
//  * a joined rank allreduces 0 to match it; a result of 0 means everyone has joined. Otherwise
//    it runs every hook's MainHook() (which issues what an active rank issues in one iteration)
//    and loops;
//  * at the end every hook's PostHook(is_last_joiner) runs once, where is_last_joiner says
//    whether this rank was among the last to run out.
// throw_on_early_termination: for models whose iterations have collectives no hook can shadow.
// Active ranks add a blocking allreduce per iteration; as soon as one rank runs out, every rank
// throws in that same iteration.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "comm/process_group.h"

namespace ddpkit::join {

// What a joined rank does on behalf of one Joinable.
class JoinHook {
 public:
  virtual ~JoinHook() = default;
  // Once per iteration that some rank is still active: issue that iteration's collectives.
  virtual void MainHook() {}
  // Once, after every rank has joined.
  virtual void PostHook(bool is_last_joiner) { (void)is_last_joiner; }
};

struct JoinConfig {
  bool enable = false;
  bool throw_on_early_termination = false;
  bool is_first_joinable = false;
};

// Something whose per-iteration collectives Join can shadow (DistributedDataParallel, the
// ZeRO optimizer, ...).
class Joinable {
 public:
  virtual ~Joinable() = default;
  virtual std::unique_ptr<JoinHook> MakeJoinHook() = 0;
  virtual comm::ProcessGroup& join_process_group() const = 0;
  const JoinConfig& join_config() const { return join_config_; }

 private:
  friend class Join;
  JoinConfig join_config_;
};

struct JoinOptions {
  bool enable = true;  // false: Run just runs the loop
  bool throw_on_early_termination = false;
  // The skew warning fires once a joined rank has shadowed this many iterations.
  int skew_warning_iterations = 1000;
};

class Join {
 public:
  // Runs `loop` (this rank's training loop) inside the join context, then — unless it threw —
  // the join protocol. Throws ddpkit::Error in throw mode (on every rank, the same iteration),
  // and propagates collective failures.
  static void Run(const std::vector<Joinable*>& joinables, const JoinOptions& options,
                  const std::function<void()>& loop);

  // Called by an active rank's joinable before its per-iteration collectives. Returns the
  // count-of-active-ranks allreduce (an int64 [1] result in `active_ranks`) for the first
  // enabled joinable, null otherwise. In throw mode it raises when any rank has run out.
  static std::shared_ptr<comm::Work> NotifyJoinContext(const Joinable& joinable,
                                                       Tensor* active_ranks);
};

}  // namespace ddpkit::join
