#include "tools/jobs/recompute/block_mlp.h"

#include "absl/strings/str_cat.h"
#include "autograd/checkpoint.h"
#include "autograd/ops.h"

namespace ddpkit::jobs {

BlockMlp::BlockMlp(const BlockMlpShape& shape, uint64_t seed) {
  Generator gen(seed);
  stem_ =
      RegisterModule("stem", std::make_shared<nn::Linear>(shape.input_dim, shape.width, true, gen));
  for (int k = 0; k < shape.blocks; ++k) {
    const std::string prefix = absl::StrCat("blocks.", k, ".");
    blocks_.push_back(
        {.expand = RegisterModule(prefix + "expand", std::make_shared<nn::Linear>(
                                                         shape.width, 4 * shape.width, true, gen)),
         .project = RegisterModule(
             prefix + "project",
             std::make_shared<nn::Linear>(4 * shape.width, shape.width, true, gen))});
  }
  head_ =
      RegisterModule("head", std::make_shared<nn::Linear>(shape.width, shape.classes, true, gen));
}

Tensor BlockMlp::RunBlock(const Block& block, const Tensor& h) const {
  return Add(h, block.project->Forward(Relu(block.expand->Forward(h))));
}

Tensor BlockMlp::Forward(const Tensor& x) {
  Tensor h = Relu(stem_->Forward(x));
  for (const Block& block : blocks_) {
    h = checkpoint ? Checkpoint([this, &block](const Tensor& in) { return RunBlock(block, in); }, h)
                   : RunBlock(block, h);
  }
  return head_->Forward(h);
}

}  // namespace ddpkit::jobs
