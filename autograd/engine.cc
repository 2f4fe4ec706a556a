#include "autograd/engine.h"

#include <queue>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "autograd/grad_mode.h"
#include "autograd/kernels.h"
#include "autograd/node.h"

namespace ddpkit {
namespace {

struct GraphTask {
  std::vector<std::function<void()>> callbacks;
};

thread_local std::vector<GraphTask*> running_tasks;

// Pushes a task on this thread's stack for the duration of a Backward call.
class ScopedGraphTask {
 public:
  explicit ScopedGraphTask(GraphTask* task) { running_tasks.push_back(task); }
  ~ScopedGraphTask() { running_tasks.pop_back(); }
};

// The node that feeds the user's seed gradients into the roots' edges.
class GraphRoot final : public Node {
 public:
  GraphRoot(std::vector<Edge> edges, TensorList seeds)
      : Node(std::move(edges), /*num_outputs=*/0), seeds_(std::move(seeds)) {}
  std::string_view name() const override { return "GraphRoot"; }
  TensorList Apply(TensorList) override { return std::move(seeds_); }

 private:
  TensorList seeds_;
};

// Adds `grad` into an input buffer slot.
void AccumulateInto(Tensor& slot, Tensor grad) {
  if (!grad.defined()) return;
  if (!slot.defined()) {
    slot = std::move(grad);
    return;
  }
  if (!IsSoleOwner(slot)) slot = slot.Clone();  // never write into a tensor someone else holds
  AddInPlace(slot, grad);
}

// Number of edges pointing at each node reachable from `root`.
absl::flat_hash_map<Node*, int> CountDependencies(Node* root) {
  absl::flat_hash_map<Node*, int> dependencies;
  std::vector<Node*> stack = {root};
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const Edge& edge : node->next_edges()) {
      if (!edge.valid()) continue;
      if (dependencies[edge.node.get()]++ == 0) stack.push_back(edge.node.get());
    }
  }
  return dependencies;
}

TensorList SeedGradients(const TensorList& roots, const TensorList& grad_roots) {
  DDPKIT_CHECK(grad_roots.empty() || grad_roots.size() == roots.size(), "[backward] got ",
               roots.size(), " roots but ", grad_roots.size(), " root gradients");
  TensorList seeds(roots.size());
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& root = roots[i];
    DDPKIT_CHECK(root.defined() && root.requires_grad(), "[backward] root ", i,
                 " does not require grad and has no grad_fn: nothing to differentiate");
    if (i < grad_roots.size() && grad_roots[i].defined()) {
      const Tensor& g = grad_roots[i];
      DDPKIT_CHECK(
          g.dtype() == root.dtype() && g.shape() == root.shape() && g.device() == root.device(),
          "[backward] gradient for root ", i, " is ", DTypeName(g.dtype()), ShapeString(g.shape()),
          " on ", g.device().ToString(), ", root is ", DTypeName(root.dtype()),
          ShapeString(root.shape()), " on ", root.device().ToString());
      seeds[i] = g;
    } else {
      DDPKIT_CHECK(root.numel() == 1, "[backward] root ", i, " has shape ",
                   ShapeString(root.shape()),
                   ": an implicit gradient of 1 is only defined for one-element outputs; "
                   "pass its gradient explicitly");
      seeds[i] = Tensor::Full(root.shape(), 1.0, root.dtype(), root.device());
    }
  }
  return seeds;
}

}  // namespace

void Engine::Backward(const TensorList& roots, const TensorList& grad_roots) {
  TensorList seeds = SeedGradients(roots, grad_roots);
  std::vector<Edge> root_edges;
  root_edges.reserve(roots.size());
  for (const Tensor& root : roots) root_edges.push_back(GradientEdge(root));
  auto graph_root = std::make_shared<GraphRoot>(std::move(root_edges), std::move(seeds));

  GraphTask task;
  ScopedGraphTask scoped_task(&task);
  NoGradGuard no_grad;  // backward formulas build no graph

  absl::flat_hash_map<Node*, int> dependencies = CountDependencies(graph_root.get());
  absl::flat_hash_map<Node*, TensorList> input_buffers;

  // Highest priority first; ties (gradient accumulators) in the order they became ready.
  struct Ready {
    uint64_t priority;
    uint64_t arrival;
    Node* node;
    bool operator<(const Ready& other) const {
      return priority != other.priority ? priority < other.priority : arrival > other.arrival;
    }
  };
  std::priority_queue<Ready> ready;
  uint64_t arrivals = 0;
  ready.push({graph_root->priority(), arrivals++, graph_root.get()});

  while (!ready.empty()) {
    Node* node = ready.top().node;
    ready.pop();
    TensorList inputs(node->num_outputs());
    if (auto it = input_buffers.find(node); it != input_buffers.end()) {
      inputs = std::move(it->second);
      input_buffers.erase(it);
    }
    TensorList grads = node->Apply(std::move(inputs));

    const std::vector<Edge>& edges = node->next_edges();
    for (size_t i = 0; i < edges.size(); ++i) {
      const Edge& edge = edges[i];
      if (!edge.valid()) continue;
      Node* next = edge.node.get();
      TensorList& buffer = input_buffers[next];
      if (buffer.empty()) buffer.resize(next->num_outputs());
      if (i < grads.size()) AccumulateInto(buffer[edge.input_nr], std::move(grads[i]));
      if (--dependencies[next] == 0) ready.push({next->priority(), arrivals++, next});
    }
  }

  // Index loop: a callback may queue more callbacks, which run in this same pass.
  for (size_t i = 0; i < task.callbacks.size(); ++i) {
    std::function<void()> callback = std::move(task.callbacks[i]);
    callback();
  }
}

void Engine::QueueCallback(std::function<void()> callback) {
  DDPKIT_CHECK(!running_tasks.empty(),
               "[QueueCallback] no backward is running on this thread; callbacks can only be "
               "queued from inside a backward pass (e.g. from a gradient hook)");
  running_tasks.back()->callbacks.push_back(std::move(callback));
}

void Engine::QueueOuterCallback(std::function<void()> callback) {
  DDPKIT_CHECK(!running_tasks.empty(),
               "[QueueOuterCallback] no backward is running on this thread; callbacks can only "
               "be queued from inside a backward pass (e.g. from a gradient hook)");
  running_tasks.front()->callbacks.push_back(std::move(callback));
}

int Engine::Depth() { return static_cast<int>(running_tasks.size()); }

// Tensor's, defined here, in the engine's layer above the tensor's.
void Tensor::Backward(const Tensor& grad) const { Engine::Backward({*this}, {grad}); }

}  // namespace ddpkit
