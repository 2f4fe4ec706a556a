// Helpers for the DDP tests on the real model families (autograd/models): tiny float64 models,
// their data split by rank, and each rank's BatchNorm buffers kept apart for a one-process
// reference (tests/reducer/ddp_model_equivalence_test.cc, ddp_model_join_test.cc).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "autograd/nn/models/gpt.h"
#include "autograd/nn/models/resnet.h"
#include "autograd/random.h"
#include "tests/reducer/ddp_test_util.h"

namespace ddpkit::reducer::testing {

inline constexpr int kRowsPerRank = 2;  // sequences or images; BatchNorm needs two per channel
inline constexpr double kLr = 0.1;
inline constexpr int64_t kVocab = 11, kInputVocab = 8, kTokens = 6;  // inputs never use 8..10
inline constexpr int64_t kClasses = 3, kImage = 8;

enum class Family { kGpt, kResNet };

inline std::string FamilyName(Family family) { return family == Family::kGpt ? "gpt" : "resnet"; }

inline std::shared_ptr<nn::Module> MakeModel(Family family, uint64_t seed) {
  if (family == Family::kGpt) {
    return models::MakeGpt(*models::ParseGptSpec("gpt:layers=2,heads=2,dim=16,ctx=8,vocab=11"),
                           seed, DType::kFloat64);
  }
  return nn::MakeResNet(*nn::ParseResNetSpec("resnet:1,1,1,1,width=4,in=1,classes=3,stem=small"),
                        seed, DType::kFloat64);
}

inline Tensor Loss(Family family, const Tensor& output, const Tensor& targets) {
  return family == Family::kGpt ? models::GptLoss(output, targets) : CrossEntropy(output, targets);
}

// Rows for (micro-batch g, rank): distinct on every rank. GPT: tokens [rows, 6] below
// kInputVocab, targets [rows, 6] over the whole vocabulary; ResNet: images [rows, 1, 8, 8] and
// labels [rows].
struct Data {
  Tensor x, y;
  int world;
  // `batches` global micro-batches.
  Data(Family family, int world, int batches) : world(world) {
    const int64_t rows = static_cast<int64_t>(batches) * world * kRowsPerRank;
    Generator gen(1234);
    auto uniform = [&](int64_t n) { return static_cast<int64_t>(gen.Uniform() * n) % n; };
    if (family == Family::kGpt) {
      x = Tensor::Empty({rows, kTokens}, DType::kInt64);
      y = Tensor::Empty({rows, kTokens}, DType::kInt64);
      for (int64_t i = 0; i < x.numel(); ++i) x.data<int64_t>()[i] = uniform(kInputVocab);
      for (int64_t i = 0; i < y.numel(); ++i) y.data<int64_t>()[i] = uniform(kVocab);
    } else {
      x = Tensor::Empty({rows, 1, kImage, kImage}, DType::kFloat64);
      y = Tensor::Empty({rows}, DType::kInt64);
      for (int64_t i = 0; i < x.numel(); ++i) x.data<double>()[i] = gen.Normal();
      for (int64_t i = 0; i < rows; ++i) y.data<int64_t>()[i] = uniform(kClasses);
    }
  }
  Tensor X(int64_t g, int rank) const { return Shard(x, g, rank, 1); }
  Tensor Y(int64_t g, int rank) const { return Shard(y, g, rank, 1); }
  Tensor GlobalX(int64_t g) const { return Shard(x, g, 0, world); }
  Tensor GlobalY(int64_t g) const { return Shard(y, g, 0, world); }
  // `ranks` consecutive shards of global micro-batch g from `rank` on.
  Tensor Shard(const Tensor& t, int64_t g, int rank, int ranks) const {
    const int64_t begin = (g * world + rank) * kRowsPerRank;
    return t.Rows(begin, begin + ranks * kRowsPerRank).Clone();
  }
};

inline Grads WeightsOf(const nn::Module& module) {
  Grads out;
  for (const auto& [name, p] : module.NamedParameters()) out[name] = p.ToDoubles();
  return out;
}

inline Grads BuffersOf(const nn::Module& module) {
  Grads out;
  for (const auto& [name, b] : module.NamedBuffers()) out[name] = b.ToDoubles();
  return out;
}

// Rank r > 0 changes its floating buffers after DDP's construction (which copied rank 0's), so
// a rank that never received rank 0's would show.
inline void PerturbBuffers(const nn::Module& module, int rank) {
  if (rank == 0) return;
  for (const auto& [name, b] : module.NamedBuffers()) {
    if (b.dtype() != DType::kInt64)
      b.CopyFrom(Tensor::Full(b.shape(), 1.0 + 0.25 * rank, b.dtype()));
  }
}

inline std::vector<Tensor> SaveBuffers(const nn::Module& module) {
  std::vector<Tensor> out;
  for (const auto& [name, b] : module.NamedBuffers()) out.push_back(b.Clone());
  return out;
}

inline void LoadBuffers(const nn::Module& module, const std::vector<Tensor>& state) {
  size_t i = 0;
  for (const auto& [name, b] : module.NamedBuffers()) b.CopyFrom(state[i++]);
}

// Each rank's buffers as the reference starts them: after DDP's construction and PerturbBuffers.
inline std::vector<std::vector<Tensor>> InitialBuffers(Family family, int world) {
  std::vector<std::vector<Tensor>> state(world);
  for (int r = 0; r < world; ++r) {
    auto copy = MakeModel(family, /*seed=*/7);
    PerturbBuffers(*copy, r);
    state[r] = SaveBuffers(*copy);
  }
  return state;
}

inline Grads BuffersIn(const nn::Module& module, const std::vector<Tensor>& state) {
  LoadBuffers(module, state);
  return BuffersOf(module);
}

}  // namespace ddpkit::reducer::testing
