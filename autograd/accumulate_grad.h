// AccumulateGrad: the node at the end of every path to a leaf that requires grad.
//
// It adds the incoming gradient into the leaf's .grad — setting it when undefined, otherwise
// adding in place into the existing storage, so a .grad that is a view into a DDP bucket stays
// one — and then runs its post-hooks in registration order. One accumulator exists per leaf for
// the leaf's whole life: DDP's reducer registers a hook on each parameter's accumulator once
// and is called back every time that parameter's gradient is ready.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "autograd/node.h"

namespace ddpkit {

class AccumulateGrad final : public Node {
 public:
  // Called after accumulation with the leaf; runs on the thread running backward.
  using PostHook = std::function<void(const Tensor& variable)>;
  using HookHandle = uint64_t;

  explicit AccumulateGrad(std::weak_ptr<TensorImpl> variable);
  std::string_view name() const override { return "AccumulateGrad"; }
  TensorList Apply(TensorList grad_outputs) override;

  // Hooks run in the order they were added, also when no gradient arrived (the leaf's grad is
  // then unchanged). Adding or removing hooks from inside a hook is not allowed.
  HookHandle AddPostHook(PostHook hook);
  // Returns false when `handle` is unknown (already removed).
  bool RemovePostHook(HookHandle handle);
  size_t num_post_hooks() const { return hooks_.size(); }

  // The leaf; undefined once the leaf is gone.
  Tensor variable() const;

 private:
  std::weak_ptr<TensorImpl> variable_;
  std::vector<std::pair<HookHandle, PostHook>> hooks_;
  HookHandle next_handle_ = 1;
};

}  // namespace ddpkit
