// Fused gradient allreduce: synchronising gradients by hand, after backward, for training loops
// that keep DDP's reducer out of backward — the fix a user reaches for when reentrant recompute
// fires a parameter's hook more than once per backward ("marked ready twice"): run every
// forward/backward under no_sync, then average all the gradients at once before the optimizer
// step (Paddle's fused_allreduce_gradients). Correct, but nothing overlaps the allreduce: all of
// it is exposed. static_graph keeps the overlap instead (docs/recompute.md).
//
//   FusedGradientAllreduce fused(model->NamedParameters());   // once: the buffers
//   { auto no_sync = ddp->NoSync(); loss.Backward(); }
//   DDPKIT_RETURN_IF_ERROR(fused.Run(group));                 // every rank, every step
//   optimizer.Step();
#pragma once

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "autograd/nn/nn.h"
#include "comm/process_group.h"

namespace ddpkit::reducer {

class FusedGradientAllreduce {
 public:
  // Lays the parameters' gradients out in one flat buffer per dtype, in parameter order.
  explicit FusedGradientAllreduce(const NamedTensors& parameters);

  // Collective: every rank of `group` calls it with the same parameters. Replaces each
  // parameter's .grad with its average over the ranks — divided by the world size before the
  // sum, as DDP does, so the numbers are DDP's. A parameter with no gradient on this rank
  // contributes zeros and gets the average (every rank must send the same layout). The
  // collective's error (timeout, dead peer) comes back as it is.
  absl::Status Run(comm::ProcessGroup& group);

  // Bytes allreduced per Run (all dtypes).
  int64_t bytes() const;

 private:
  struct Flat {
    Tensor buffer;                                       // 1-D, one dtype
    std::vector<std::pair<Tensor, int64_t>> parameters;  // and each one's offset in `buffer`
  };
  std::vector<Flat> flats_;
};

}  // namespace ddpkit::reducer
