// Checkpoint: reentrant activation checkpointing, as torch.utils.checkpoint(use_reentrant=True).
//
// Forward runs `fn` without recording a graph, so its activations are not kept. Backward
// recomputes `fn` with grad enabled on detached copies of the inputs and runs a nested
// ("reentrant") Engine::Backward through the recomputed graph. The parameters used inside
// `fn` therefore get their gradient — and their accumulators' hooks fire — during that nested
// pass: once per checkpointed call. Under DDP a parameter used by two checkpointed calls is
// "marked ready twice", the case the reducer must diagnose (and static_graph supports).
//
// Unlike PyTorch, the outputs carry history whenever grad mode is on, even if no input
// requires grad: `fn` may use parameters, which is the whole point here.
#pragma once

#include <functional>

#include "autograd/tensor.h"

namespace ddpkit {

using CheckpointFn = std::function<TensorList(const TensorList& inputs)>;

// `fn` must be deterministic (it runs twice) and must not keep the inputs it is given.
TensorList Checkpoint(CheckpointFn fn, const TensorList& inputs);
Tensor Checkpoint(std::function<Tensor(const Tensor&)> fn, const Tensor& input);

}  // namespace ddpkit
