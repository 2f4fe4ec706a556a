#include "autograd/checkpoint.h"

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"

namespace ddpkit {
namespace {

class CheckpointBackward final : public Node {
 public:
  CheckpointBackward(std::vector<Edge> edges, uint32_t num_outputs, CheckpointFn fn,
                     TensorList saved_inputs)
      : Node(std::move(edges), num_outputs),
        fn_(std::move(fn)),
        saved_inputs_(std::move(saved_inputs)) {}

  std::string_view name() const override { return "CheckpointBackward"; }

  TensorList Apply(TensorList grad_outputs) override {
    // Fresh leaves standing in for the inputs, so the nested pass stops at them.
    TensorList inputs;
    for (size_t i = 0; i < saved_inputs_.size(); ++i) {
      Tensor leaf = saved_inputs_[i].Detach();
      if (next_edges()[i].valid()) leaf.set_requires_grad(true);
      inputs.push_back(leaf);
    }
    TensorList outputs;
    {
      GradModeGuard enable_grad(true);
      outputs = fn_(inputs);
    }
    DDPKIT_CHECK(outputs.size() == grad_outputs.size(), "[checkpoint] recomputation returned ",
                 outputs.size(), " outputs, the forward returned ", grad_outputs.size(),
                 ": the checkpointed function must be deterministic");
    TensorList roots, grads;
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (outputs[i].requires_grad() && grad_outputs[i].defined()) {
        roots.push_back(outputs[i]);
        grads.push_back(grad_outputs[i]);
      }
    }
    if (!roots.empty()) Engine::Backward(roots, grads);  // reentrant: hooks fire in here
    TensorList input_grads;
    for (const Tensor& leaf : inputs) input_grads.push_back(leaf.grad());
    return input_grads;
  }

 private:
  CheckpointFn fn_;
  TensorList saved_inputs_;
};

}  // namespace

TensorList Checkpoint(CheckpointFn fn, const TensorList& inputs) {
  TensorList outputs;
  {
    NoGradGuard no_grad;
    outputs = fn(inputs);
  }
  // New handles: an output may be one of the inputs, whose history must not change.
  for (Tensor& output : outputs) output = output.Detach();
  if (!GradMode::IsEnabled()) return outputs;

  std::vector<Edge> edges;
  TensorList saved;
  for (const Tensor& input : inputs) {
    edges.push_back(GradientEdge(input));
    saved.push_back(input.Detach());
  }
  auto node = std::make_shared<CheckpointBackward>(
      std::move(edges), static_cast<uint32_t>(outputs.size()), std::move(fn), std::move(saved));
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (IsFloatingPoint(outputs[i].dtype())) outputs[i].SetHistory(node, static_cast<uint32_t>(i));
  }
  return outputs;
}

Tensor Checkpoint(std::function<Tensor(const Tensor&)> fn, const Tensor& input) {
  return Checkpoint([fn = std::move(fn)](const TensorList& in) { return TensorList{fn(in[0])}; },
                    {input})[0];
}

}  // namespace ddpkit
