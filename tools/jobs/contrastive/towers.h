// The contrastive job's real towers, CLIP's way: a torchvision ResNet image encoder and a nanoGPT
// text encoder from the model zoo, each followed by a bias-free linear projection to the
// embedding (CLIP's `visual.proj` and `text_projection`), and the paired data they learn from.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include "absl/status/statusor.h"
#include "autograd/nn/models/zoo.h"
#include "autograd/nn/nn.h"

namespace ddpkit::jobs {

// `--image-tower resnet:...` and `--text-tower gpt:...`, parsed by the zoo. The ResNet's fc (and
// so its classes=) is dropped: the tower is its pooled features; the GPT's lm_head is never built
// into the tower.
struct RealTowers {
  nn::ResNetSpec image;
  models::GptSpec text;
  Shape image_row;  // {C, H, W}: the zoo's synthetic image size for this stem (8×8 or 32×32)
};
// Both empty: nullopt (the MLP towers). InvalidArgument for one without the other, another
// family, or a spec the zoo refuses.
absl::StatusOr<std::optional<RealTowers>> ParseTowers(std::string_view image,
                                                      std::string_view text);

// torchvision's ResNet without fc (`fc = nn.Identity()`): images [N, C, H, W] -> pooled [N, 8W].
std::shared_ptr<nn::ResNet> MakeImageEncoder(const nn::ResNetSpec& spec, uint64_t seed,
                                             DType dtype);

// nanoGPT's `transformer` (wte ... ln_f, registered as "transformer", nanoGPT's init) without
// lm_head: tokens [N, T] -> ln_f's hidden state at the last position [N, D]. CLIP takes the EOT
// token's; every sequence here is full-length, so its last token is the one that saw them all.
class GptTextEncoder : public nn::Module {
 public:
  GptTextEncoder(const models::GptSpec& spec, uint64_t seed, DType dtype);
  Tensor Forward(const Tensor& tokens) override;

 private:
  std::string Describe() const override { return "GptTextEncoder"; }
  std::shared_ptr<models::GptTransformer> transformer_;
};

}  // namespace ddpkit::jobs
