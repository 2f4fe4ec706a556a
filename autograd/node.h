// Node: one backward step of the graph. An op that produced outputs from inputs records a
// Node whose Apply() maps gradients w.r.t. the outputs to gradients w.r.t. the inputs, and
// whose next edges point at the nodes that produced those inputs (or at a leaf's
// AccumulateGrad). The engine walks these edges.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string_view>
#include <vector>

#include "autograd/tensor.h"

namespace ddpkit {

// Where one input's gradient goes: input slot `input_nr` of `node`. Null when the input
// needs no gradient.
struct Edge {
  std::shared_ptr<Node> node;
  uint32_t input_nr = 0;
  bool valid() const { return node != nullptr; }
};

class Node {
 public:
  // `num_outputs`: how many forward outputs, i.e. how many gradients Apply receives.
  Node(std::vector<Edge> next_edges, uint32_t num_outputs);
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // Debug label, e.g. "MatmulBackward".
  virtual std::string_view name() const = 0;
  // Gradients w.r.t. this node's forward outputs (undefined where none arrived) in; one
  // gradient per next edge out (undefined where there is none).
  virtual TensorList Apply(TensorList grad_outputs) = 0;

  const std::vector<Edge>& next_edges() const { return next_edges_; }
  uint32_t num_outputs() const { return num_outputs_; }
  // The engine runs ready nodes with the highest value first: creation order for ops (the
  // most recent op first, as PyTorch does), the maximum for gradient accumulators so a
  // parameter's gradient is final — and its hooks fire — as soon as it can be.
  uint64_t priority() const { return priority_; }

 protected:
  static constexpr uint64_t kHighestPriority = std::numeric_limits<uint64_t>::max();
  void set_priority(uint64_t p) { priority_ = p; }

 private:
  std::vector<Edge> next_edges_;
  uint32_t num_outputs_;
  uint64_t priority_;
};

// The edge through which gradient flows back into `t`: its grad_fn, its accumulator for a
// leaf that requires grad, or an invalid edge.
Edge GradientEdge(const Tensor& t);

}  // namespace ddpkit
