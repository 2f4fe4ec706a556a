#include "tools/jobs/contrastive/two_tower.h"

#include <algorithm>
#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "autograd/random.h"
#include "tools/jobs/dataset.h"

namespace ddpkit::jobs {

TwoTowerModel::TwoTowerModel(int64_t in, int64_t hidden, int64_t out, uint64_t seed, DType dtype) {
  logit_scale_ = RegisterParameter("logit_scale", Tensor::Full({1}, std::log(1 / 0.07), dtype));
  image_ = RegisterModule("image", nn::MakeMlp({in, hidden, out}, seed, dtype));
  text_ = RegisterModule("text", nn::MakeMlp({in, hidden, out}, seed + 1, dtype));
}

TwoTowerModel::TwoTowerModel(const RealTowers& towers, int64_t out, uint64_t seed, DType dtype)
    : image_row_(towers.image_row), text_length_(towers.text.ctx) {
  logit_scale_ = RegisterParameter("logit_scale", Tensor::Full({1}, std::log(1 / 0.07), dtype));
  image_ = RegisterModule("image", MakeImageEncoder(towers.image, seed, dtype));
  Generator projections(seed + 2);
  image_projection_ = RegisterModule(
      "image_projection",
      std::make_shared<nn::Linear>(8 * towers.image.width, out, false, projections, dtype));
  text_ = RegisterModule("text", std::make_shared<GptTextEncoder>(towers.text, seed + 1, dtype));
  text_projection_ =
      RegisterModule("text_projection",
                     std::make_shared<nn::Linear>(towers.text.dim, out, false, projections, dtype));
}

Tensor TwoTowerModel::EncodeImages(const Tensor& images) {
  // Eval mode normalises with the running statistics: rows are independent, groups change nothing.
  if (image_groups_.empty() || !is_training()) return image_->Forward(images);
  TensorList parts;
  int64_t first = 0;
  for (int64_t rows : image_groups_) {
    parts.push_back(image_->Forward(images.Rows(first, first + rows)));
    first += rows;
  }
  DDPKIT_CHECK(first == images.size(0), "[two_tower] the image groups cover ", first, " rows of ",
               images.size(0));
  return Concat(parts);
}

Tensor TwoTowerModel::Forward(const Tensor& views) {
  if (!image_projection_) {
    DDPKIT_CHECK(views.dim() == 2 && views.size(0) % 2 == 0,
                 "[two_tower] expects [2b, in]: b image views, then their b text views; got ",
                 ShapeString(views.shape()));
    const int64_t b = views.size(0) / 2;
    return Concat({L2NormalizeRows(image_->Forward(Slice(views, 0, b))),
                   L2NormalizeRows(text_->Forward(Slice(views, b, 2 * b)))});
  }
  const int64_t pixels = NumElements(image_row_), per_pair = pixels + text_length_;
  DDPKIT_CHECK(views.dim() == 1 && views.numel() % per_pair == 0,
               "[two_tower] expects a vector of b images then b token rows (", per_pair,
               " values a pair); got ", ShapeString(views.shape()));
  const int64_t b = views.numel() / per_pair;
  Shape image_shape = {b};
  image_shape.insert(image_shape.end(), image_row_.begin(), image_row_.end());
  const Tensor images = views.Rows(0, b * pixels).View(image_shape);
  const Tensor tokens =
      views.Rows(b * pixels, views.numel()).To(DType::kInt64).View({b, text_length_});
  return Concat({L2NormalizeRows(image_projection_->Forward(EncodeImages(images))),
                 L2NormalizeRows(text_projection_->Forward(text_->Forward(tokens)))});
}

Tensor PairedData::Views(int64_t start, int64_t count) const {
  const int64_t end = start + count;
  if (text.dtype() != DType::kInt64) return Concat({image.Rows(start, end), text.Rows(start, end)});
  return Concat(
      {image.Rows(start, end).Flatten(), text.Rows(start, end).To(image.dtype()).Flatten()});
}

PairedData PairedData::Rows(int64_t begin, int64_t end) const {
  return {image.Rows(begin, end), text.Rows(begin, end),
          labels.defined() ? labels.Rows(begin, end) : Tensor()};
}

namespace {

// latent [rows, k] · projection [k, in] / sqrt(k) + 0.5 · noise, in float64.
Tensor ProjectView(const Tensor& latent, const Tensor& projection, const double* noise) {
  const int64_t rows = latent.size(0), k = latent.size(1), in = projection.size(1);
  Tensor out = Tensor::Empty({rows, in}, DType::kFloat64);
  const double* zp = latent.data<double>();
  const double* pp = projection.data<double>();
  double* o = out.data<double>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < in; ++c) {
      double v = 0.5 * noise[r * in + c];
      for (int64_t j = 0; j < k; ++j) v += zp[r * k + j] * pp[j * in + c] / std::sqrt(k);
      o[r * in + c] = v;
    }
  }
  return out;
}

}  // namespace

PairedData MakePairedData(int64_t rows, int64_t in, int64_t latent, uint64_t seed, DType dtype) {
  Generator gen(seed);
  Tensor z = Tensor::Empty({rows, latent}, DType::kFloat64);
  Tensor project_image = Tensor::Empty({latent, in}, DType::kFloat64);
  Tensor project_text = Tensor::Empty({latent, in}, DType::kFloat64);
  Tensor noise = Tensor::Empty({2, rows, in}, DType::kFloat64);
  gen.FillNormal(z);
  gen.FillNormal(project_image);
  gen.FillNormal(project_text);
  gen.FillNormal(noise);
  const double* n = noise.data<double>();
  return {ProjectView(z, project_image, n).To(dtype),
          ProjectView(z, project_text, n + rows * in).To(dtype)};
}

PairedData MakeClassPairs(int64_t rows, const RealTowers& towers, int64_t classes, uint64_t seed,
                          DType dtype) {
  const models::ModelIo image_io{
      .row = towers.image_row, .synthetic_row = towers.image_row, .classes = classes};
  ClassificationData images = MakeSyntheticData(rows, image_io, seed);
  const int64_t t = towers.text.ctx;
  const auto vocab = static_cast<uint64_t>(towers.text.vocab);
  Generator gen(seed + 1);
  std::vector<int64_t> patterns(static_cast<size_t>(classes * t));
  for (int64_t& token : patterns) token = static_cast<int64_t>(gen.NextU64() % vocab);
  Tensor text = Tensor::Empty({rows, t}, DType::kInt64);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t* pattern = patterns.data() + images.y.data<int64_t>()[r] * t;
    for (int64_t i = 0; i < t; ++i) {
      const bool replace = gen.NextU64() % 8 == 0;
      text.data<int64_t>()[r * t + i] =
          replace ? static_cast<int64_t>(gen.NextU64() % vocab) : pattern[i];
    }
  }
  return {images.x.To(dtype), text, images.y};
}

double Top1Accuracy(TwoTowerModel& model, const PairedData& held_out) {
  NoGradGuard no_grad;
  const bool training = model.is_training();
  model.Eval();
  const int64_t m = held_out.image.size(0);
  // The model's device: the held-out pairs go there, the similarities come back to the host.
  const Device device = model.logit_scale().device();
  Tensor views = held_out.Views(0, m);
  Tensor features = model.Forward(views.device() == device ? views : views.To(device));
  Tensor sims = Matmul(Slice(features, 0, m), Transpose(Slice(features, m, 2 * m)));
  model.Train(training);
  if (sims.is_cuda()) sims = sims.To(Device::Cpu());
  const int64_t* labels = held_out.labels.defined() ? held_out.labels.data<int64_t>() : nullptr;
  int64_t correct = 0;
  for (int64_t i = 0; i < m; ++i) {
    const double* row = sims.data<double>() + i * m;
    const int64_t best = std::max_element(row, row + m) - row;
    correct += labels != nullptr ? labels[best] == labels[i] : best == i;
  }
  return static_cast<double>(correct) / static_cast<double>(m);
}

}  // namespace ddpkit::jobs
