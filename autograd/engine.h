// The backward engine: runs a graph's nodes in dependency order on the calling thread.
//
// One call to Backward is one "graph task":
//  1. count, for every node reachable from the roots, how many edges point at it;
//  2. run ready nodes (all their gradients arrived) highest priority first — the most recently
//     created op first, gradient accumulators as soon as they are ready — adding the gradients
//     a node produces into its successors' input buffers;
//  3. when no node is left, run the callbacks queued during the task, in order (DDP's reducer
//     queues its finalize step here: it must run once, after every hook of the pass).
//
// A Backward called from inside a node (reentrant backward — activation checkpointing does
// this) is a nested graph task on the same thread; callbacks queued while it runs belong to it.
// Each thread has its own stack of tasks, so rank threads run backward independently.
#pragma once

#include <functional>

#include "autograd/tensor.h"

namespace ddpkit {

class Engine {
 public:
  // Backpropagates from `roots`. `grad_roots[i]` is the gradient w.r.t. roots[i]; when it is
  // undefined (or grad_roots is empty) roots[i] must have one element and is seeded with 1.
  // The graph is kept, so calling Backward again accumulates into the leaves' .grad again.
  static void Backward(const TensorList& roots, const TensorList& grad_roots = {});

  // Runs `callback` once, after the innermost graph task on this thread has run its last node.
  // Callbacks may queue further callbacks. Throws when no backward is running on this thread.
  static void QueueCallback(std::function<void()> callback);
  // As QueueCallback, but on the outermost graph task of this thread: it runs once the whole
  // backward — every nested pass included — is over.
  static void QueueOuterCallback(std::function<void()> callback);

  // How many graph tasks are running on this thread (0 outside backward, 2 inside a
  // reentrant backward).
  static int Depth();
};

}  // namespace ddpkit
