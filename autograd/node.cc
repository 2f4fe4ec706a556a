#include "autograd/node.h"

#include <atomic>

#include "autograd/accumulate_grad.h"

namespace ddpkit {
namespace {
std::atomic<uint64_t> next_sequence_nr{0};
}  // namespace

Node::Node(std::vector<Edge> next_edges, uint32_t num_outputs)
    : next_edges_(std::move(next_edges)),
      num_outputs_(num_outputs),
      priority_(next_sequence_nr.fetch_add(1, std::memory_order_relaxed)) {}

Edge GradientEdge(const Tensor& t) {
  if (!t.requires_grad()) return {};
  if (t.grad_fn()) return {t.grad_fn(), t.output_nr()};
  return {t.grad_accumulator(), 0};
}

}  // namespace ddpkit
