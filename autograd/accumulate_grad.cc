#include "autograd/accumulate_grad.h"

#include <algorithm>

#include "autograd/kernels.h"

namespace ddpkit {
AccumulateGrad::AccumulateGrad(std::weak_ptr<TensorImpl> variable)
    : Node(/*next_edges=*/{}, /*num_outputs=*/1), variable_(std::move(variable)) {
  set_priority(kHighestPriority);
}

Tensor AccumulateGrad::variable() const { return Tensor(variable_.lock()); }

TensorList AccumulateGrad::Apply(TensorList grad_outputs) {
  Tensor variable = this->variable();
  if (!variable.defined()) return {};
  Tensor& incoming = grad_outputs[0];
  if (incoming.defined()) {
    DDPKIT_CHECK(incoming.dtype() == variable.dtype() && incoming.numel() == variable.numel() &&
                     incoming.device() == variable.device(),
                 "[AccumulateGrad] gradient ", DTypeName(incoming.dtype()),
                 ShapeString(incoming.shape()), " on ", incoming.device().ToString(),
                 " does not match its leaf ", DTypeName(variable.dtype()),
                 ShapeString(variable.shape()), " on ", variable.device().ToString());
    const Tensor& grad = variable.grad();
    if (!grad.defined()) {
      Tensor owned = IsSoleOwner(incoming) ? std::move(incoming) : incoming.Clone();
      variable.set_grad(owned.View(variable.shape()));
    } else {
      AddInPlace(grad, incoming);  // keeps .grad's storage: a bucket view stays a view
    }
  }
  for (auto& [handle, hook] : hooks_) hook(variable);
  return {};
}

AccumulateGrad::HookHandle AccumulateGrad::AddPostHook(PostHook hook) {
  const HookHandle handle = next_handle_++;
  hooks_.emplace_back(handle, std::move(hook));
  return handle;
}

bool AccumulateGrad::RemovePostHook(HookHandle handle) {
  auto it = std::find_if(hooks_.begin(), hooks_.end(),
                         [handle](const auto& entry) { return entry.first == handle; });
  if (it == hooks_.end()) return false;
  hooks_.erase(it);
  return true;
}

// Tensor's, defined here, in the graph's layer above the tensor's: a leaf's accumulator is a
// node of the graph.
std::shared_ptr<AccumulateGrad> Tensor::grad_accumulator() const {
  DDPKIT_CHECK(is_leaf() && requires_grad(),
               "[grad_accumulator] only leaves that require grad have an accumulator");
  AutogradMeta& meta = impl_->meta();
  if (!meta.grad_accumulator) meta.grad_accumulator = std::make_shared<AccumulateGrad>(impl_);
  return meta.grad_accumulator;
}

}  // namespace ddpkit
