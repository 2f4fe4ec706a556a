#include "tools/jobs/contrastive/two_tower.h"

#include <algorithm>
#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "autograd/random.h"

namespace ddpkit::jobs {

TwoTowerModel::TwoTowerModel(int64_t in, int64_t hidden, int64_t out, uint64_t seed, DType dtype) {
  logit_scale_ = RegisterParameter("logit_scale", Tensor::Full({1}, std::log(1 / 0.07), dtype));
  image_ = RegisterModule("image", nn::MakeMlp({in, hidden, out}, seed, dtype));
  text_ = RegisterModule("text", nn::MakeMlp({in, hidden, out}, seed + 1, dtype));
}

Tensor TwoTowerModel::Forward(const Tensor& views) {
  DDPKIT_CHECK(views.dim() == 2 && views.size(0) % 2 == 0,
               "[two_tower] expects [2b, in]: b image views, then their b text views; got ",
               ShapeString(views.shape()));
  const int64_t b = views.size(0) / 2;
  return Concat({L2NormalizeRows(image_->Forward(Slice(views, 0, b))),
                 L2NormalizeRows(text_->Forward(Slice(views, b, 2 * b)))});
}

Tensor PairedData::Views(int64_t start, int64_t count) const {
  return Concat({image.Rows(start, start + count), text.Rows(start, start + count)});
}

PairedData PairedData::Rows(int64_t begin, int64_t end) const {
  return {image.Rows(begin, end), text.Rows(begin, end)};
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

double Top1Accuracy(TwoTowerModel& model, const PairedData& held_out) {
  NoGradGuard no_grad;
  const int64_t m = held_out.image.size(0);
  // The model's device: the held-out pairs go there, the similarities come back to the host.
  const Device device = model.logit_scale().device();
  Tensor views = held_out.Views(0, m);
  Tensor features = model.Forward(views.device() == device ? views : views.To(device));
  Tensor sims = Matmul(Slice(features, 0, m), Transpose(Slice(features, m, 2 * m)));
  if (sims.is_cuda()) sims = sims.To(Device::Cpu());
  int64_t correct = 0;
  for (int64_t i = 0; i < m; ++i) {
    const double* row = sims.data<double>() + i * m;
    correct += std::max_element(row, row + m) - row == i;
  }
  return static_cast<double>(correct) / static_cast<double>(m);
}

}  // namespace ddpkit::jobs
