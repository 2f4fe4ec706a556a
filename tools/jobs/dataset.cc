#include "tools/jobs/dataset.h"

#include <cmath>

#include "autograd/random.h"
#include "autograd/safetensors.h"

namespace ddpkit::jobs {

ClassificationData MakeSyntheticClassification(int64_t rows, int64_t features, int64_t classes,
                                               uint64_t seed) {
  Generator gen(seed);
  Tensor centres = Tensor::Empty({classes, features}, DType::kFloat64);
  gen.FillNormal(centres, 0.0, 3.0 / std::sqrt(static_cast<double>(features)) * 2.0);
  ClassificationData data;
  data.x = Tensor::Empty({rows, features}, DType::kFloat32);
  data.y = Tensor::Empty({rows}, DType::kInt64);
  Tensor noise = Tensor::Empty({features}, DType::kFloat64);
  const double noise_scale = 1.0 / std::sqrt(static_cast<double>(features));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t label = static_cast<int64_t>(gen.NextU64() % static_cast<uint64_t>(classes));
    data.y.data<int64_t>()[r] = label;
    gen.FillNormal(noise, 0.0, noise_scale);
    const double* centre = centres.data<double>() + label * features;
    float* row = data.x.data<float>() + r * features;
    for (int64_t f = 0; f < features; ++f)
      row[f] = static_cast<float>(centre[f] + noise.data<double>()[f]);
  }
  data.description = StrCat("synthetic (", rows, " rows, ", classes, " classes, seed ", seed, ")");
  return data;
}

absl::StatusOr<ClassificationData> LoadClassificationData(const std::string& path, int64_t features,
                                                          int64_t classes, EmptyData empty) {
  absl::StatusOr<SafetensorsFile> file = ReadSafetensors(path);
  if (!file.ok()) return file.status();
  const Tensor* x = file->Find("x");
  const Tensor* y = file->Find("y");
  auto invalid = [&](auto&&... parts) {
    return absl::InvalidArgumentError(StrCat(path, ": ", parts...));
  };
  if (x == nullptr || y == nullptr) {
    return invalid("needs tensors 'x' (float32 [N, ", features, "]) and 'y' (int64 [N])");
  }
  if (!IsFloatingPoint(x->dtype()) || x->dim() != 2) {
    return invalid("tensor 'x' must be a floating-point matrix [N, ", features, "], got ",
                   DTypeName(x->dtype()), ShapeString(x->shape()));
  }
  if (x->size(1) != features) {
    return invalid("tensor 'x' has ", x->size(1), " columns but the model's input width is ",
                   features);
  }
  if (y->dtype() != DType::kInt64 || y->dim() != 1 || y->size(0) != x->size(0)) {
    return invalid("tensor 'y' must be int64 [", x->size(0), "] to match 'x', got ",
                   DTypeName(y->dtype()), ShapeString(y->shape()));
  }
  if (x->size(0) == 0 && empty == EmptyData::kRefuse) {
    return invalid(
        "tensor 'x' has no rows: there is nothing to train on (a rank of `ddpkit join` "
        "may have no data; `ddpkit train` shares one dataset among all ranks)");
  }
  for (int64_t r = 0; r < y->numel(); ++r) {
    const int64_t label = y->data<int64_t>()[r];
    if (label < 0 || label >= classes) {
      return invalid("tensor 'y' row ", r, " has label ", label, ", outside the model's ", classes,
                     " output classes [0, ", classes, ")");
    }
  }
  ClassificationData data;
  data.x = x->To(DType::kFloat32);
  data.y = *y;
  data.description = path;
  return data;
}

void GatherRows(const ClassificationData& data, int64_t start, int64_t count, Tensor& x,
                Tensor& y) {
  const int64_t n = data.rows();
  int64_t written = 0;
  while (written < count) {
    const int64_t from = (start + written) % n;
    const int64_t take = std::min(count - written, n - from);
    x.Rows(written, written + take).CopyFrom(data.x.Rows(from, from + take));
    y.Rows(written, written + take).CopyFrom(data.y.Rows(from, from + take));
    written += take;
  }
}

}  // namespace ddpkit::jobs
