// Small models that exercise the reducer's corner cases, shared by the DDP tests.
#pragma once

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "autograd/checkpoint.h"
#include "autograd/nn/nn.h"
#include "autograd/ops.h"
#include "autograd/random.h"

namespace ddpkit::reducer::testing {

inline Tensor RandomRows(int64_t rows, int64_t cols, uint64_t seed) {
  Tensor t = Tensor::Empty({rows, cols}, DType::kFloat64);
  Generator gen(seed);
  gen.FillNormal(t);
  return t;
}

inline Tensor Labels(int64_t rows, int64_t classes, uint64_t seed) {
  Tensor y = Tensor::Empty({rows}, DType::kInt64);
  for (int64_t i = 0; i < rows; ++i)
    y.data<int64_t>()[i] = static_cast<int64_t>((i * 7 + seed) % classes);
  return y;
}

// Iterations per rank for a Join test: each in [0, most], at least one rank above 0.
inline std::vector<int> RandomUnevenInputs(std::mt19937& rng, int world, int most = 4) {
  std::uniform_int_distribution<int> count(0, most);
  std::vector<int> inputs;
  do {
    inputs.clear();
    for (int r = 0; r < world; ++r) inputs.push_back(count(rng));
  } while (*std::max_element(inputs.begin(), inputs.end()) == 0);
  return inputs;
}

// "3 0 2 " — for SCOPED_TRACE.
inline std::string InputsString(const std::vector<int>& inputs) {
  std::string out;
  for (int n : inputs) out += std::to_string(n) + " ";
  return out;
}

// trunk -> (branch "a" on rank 0, branch "b" elsewhere) -> logits; "never" is never used.
class BranchyNet : public nn::Module {
 public:
  explicit BranchyNet(uint64_t seed) {
    Generator gen(seed);
    trunk_ =
        RegisterModule("trunk", std::make_shared<nn::Linear>(4, 5, true, gen, DType::kFloat64));
    a_ = RegisterModule("a", std::make_shared<nn::Linear>(5, 3, true, gen, DType::kFloat64));
    b_ = RegisterModule("b", std::make_shared<nn::Linear>(5, 3, true, gen, DType::kFloat64));
    never_ =
        RegisterModule("never", std::make_shared<nn::Linear>(5, 3, true, gen, DType::kFloat64));
  }
  bool use_a = true;
  Tensor Forward(const Tensor& x) override {
    Tensor h = Relu(trunk_->Forward(x));
    return use_a ? a_->Forward(h) : b_->Forward(h);
  }

 private:
  std::string Describe() const override { return "BranchyNet"; }
  std::shared_ptr<nn::Linear> trunk_, a_, b_, never_;
};

// Applies one Linear twice, each application under reentrant checkpointing: every backward
// fires the layer's hooks twice (once per nested pass).
class TwiceCheckpointedNet : public nn::Module {
 public:
  explicit TwiceCheckpointedNet(uint64_t seed, int applications = 2) : applications(applications) {
    Generator gen(seed);
    shared_ =
        RegisterModule("shared", std::make_shared<nn::Linear>(4, 4, true, gen, DType::kFloat64));
    head_ = RegisterModule("head", std::make_shared<nn::Linear>(4, 3, true, gen, DType::kFloat64));
  }
  int applications;  // how many checkpointed applications of the shared layer
  Tensor Forward(const Tensor& x) override {
    Tensor h = x;
    for (int i = 0; i < applications; ++i) {
      h = Checkpoint([this](const Tensor& in) { return Tanh(shared_->Forward(in)); }, h);
    }
    return head_->Forward(h);
  }

 private:
  std::string Describe() const override { return "TwiceCheckpointedNet"; }
  std::shared_ptr<nn::Linear> shared_, head_;
};

}  // namespace ddpkit::reducer::testing
