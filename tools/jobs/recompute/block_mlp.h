// The model `ddpkit recompute` trains: a stem, K residual MLP blocks, a head — each block
//   h + Linear(4W -> W)(ReLU(Linear(W -> 4W)(h)))
// as in a transformer's feed-forward layer, where the 4W-wide middle is most of the activation
// memory. With `checkpoint` on, each block runs under reentrant activation checkpointing
// (autograd/checkpoint.h): the forward keeps only the block's input, and backward recomputes
// the block inside a nested backward — which is where the block's parameters' hooks fire.
#pragma once

#include <memory>
#include <vector>

#include "autograd/nn/nn.h"

namespace ddpkit::jobs {

struct BlockMlpShape {
  int64_t input_dim = 32;
  int64_t width = 256;  // W
  int blocks = 4;       // K
  int64_t classes = 10;
};

class BlockMlp : public nn::Module {
 public:
  BlockMlp(const BlockMlpShape& shape, uint64_t seed);
  Tensor Forward(const Tensor& x) override;

  bool checkpoint = true;  // run every block under reentrant checkpointing

 private:
  struct Block {
    std::shared_ptr<nn::Linear> expand, project;
  };
  Tensor RunBlock(const Block& block, const Tensor& h) const;
  std::string Describe() const override { return "BlockMlp"; }

  std::shared_ptr<nn::Linear> stem_, head_;
  std::vector<Block> blocks_;
};

}  // namespace ddpkit::jobs
