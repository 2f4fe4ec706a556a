// Recording an op: the forward computes a plain tensor, then RecordOp attaches a backward
// closure to it. Keeping the two side by side in each op file is the point: one reads an op's
// forward and its derivative together (micrograd's shape, in C++).
#pragma once

#include <functional>
#include <string_view>
#include <utility>

#include "absl/types/span.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"

namespace ddpkit {

// Given the gradient w.r.t. the op's output, returns one gradient per input (undefined for
// inputs that need none). Runs under no-grad.
using BackwardFn = std::function<TensorList(const Tensor& grad_output)>;

// A single-output op's backward node, holding the closure.
class FunctionNode final : public Node {
 public:
  FunctionNode(std::string_view name, std::vector<Edge> next_edges, BackwardFn backward)
      : Node(std::move(next_edges), 1), name_(name), backward_(std::move(backward)) {}
  std::string_view name() const override { return name_; }
  TensorList Apply(TensorList grad_outputs) override;

 private:
  std::string_view name_;  // points at a string literal
  BackwardFn backward_;
};

// True when grad mode is on and any of `inputs` requires grad.
bool ShouldRecord(absl::Span<const Tensor* const> inputs);

// RecordOp with the node's edges given, for an op whose graph PyTorch shapes differently from
// its list of inputs (linear: autograd/ops/matmul.cc). The caller checked ShouldRecord; the
// backward returns one gradient per edge.
template <typename F>
void RecordOpWithEdges(const Tensor& output, std::string_view name, std::vector<Edge> edges,
                       F&& backward) {
  output.SetHistory(
      std::make_shared<FunctionNode>(name, std::move(edges), BackwardFn(std::forward<F>(backward))),
      0);
}

// Makes `output` the result of op `name` applied to `inputs`, with `backward` as its
// derivative, when ShouldRecord. `name` must be a string literal. Closures must not capture
// `output` itself (that would be a reference cycle): capture output.Detach() instead.
template <typename F>
void RecordOp(const Tensor& output, std::string_view name, absl::Span<const Tensor* const> inputs,
              F&& backward) {
  if (!ShouldRecord(inputs)) return;
  std::vector<Edge> edges;
  edges.reserve(inputs.size());
  for (const Tensor* input : inputs) edges.push_back(GradientEdge(*input));
  RecordOpWithEdges(output, name, std::move(edges), std::forward<F>(backward));
}

}  // namespace ddpkit
