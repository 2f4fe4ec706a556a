#include "autograd/function.h"

namespace ddpkit {

TensorList FunctionNode::Apply(TensorList grad_outputs) {
  // No gradient reached this op's output: none flows to its inputs either.
  if (!grad_outputs[0].defined()) return TensorList(next_edges().size());
  TensorList grads = backward_(grad_outputs[0]);
  DDPKIT_CHECK(grads.size() == next_edges().size(), "[", name_, "] backward returned ",
               grads.size(), " gradients for ", next_edges().size(), " inputs");
  return grads;
}

bool ShouldRecord(absl::Span<const Tensor* const> inputs) {
  if (!GradMode::IsEnabled()) return false;
  for (const Tensor* input : inputs) {
    if (input->defined() && input->requires_grad()) return true;
  }
  return false;
}

}  // namespace ddpkit
