#include "tools/jobs/dataset.h"

#include <cmath>
#include <numeric>

#include "autograd/nn/safetensors.h"
#include "autograd/random.h"

namespace ddpkit::jobs {
namespace {

Shape RowsOf(int64_t rows, const Shape& row) {
  Shape shape{rows};
  shape.insert(shape.end(), row.begin(), row.end());
  return shape;
}

ClassificationData MakeClusters(int64_t rows, const Shape& row, int64_t classes, uint64_t seed) {
  const int64_t features = NumElements(row);
  Generator gen(seed);
  Tensor centres = Tensor::Empty({classes, features}, DType::kFloat64);
  gen.FillNormal(centres, 0.0, 3.0 / std::sqrt(static_cast<double>(features)) * 2.0);
  ClassificationData data;
  data.x = Tensor::Empty(RowsOf(rows, row), DType::kFloat32);
  data.y = Tensor::Empty({rows}, DType::kInt64);
  Tensor noise = Tensor::Empty({features}, DType::kFloat64);
  const double noise_scale = 1.0 / std::sqrt(static_cast<double>(features));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t label = static_cast<int64_t>(gen.NextU64() % static_cast<uint64_t>(classes));
    data.y.data<int64_t>()[r] = label;
    gen.FillNormal(noise, 0.0, noise_scale);
    const double* centre = centres.data<double>() + label * features;
    float* out = data.x.data<float>() + r * features;
    for (int64_t f = 0; f < features; ++f)
      out[f] = static_cast<float>(centre[f] + noise.data<double>()[f]);
  }
  data.description = StrCat("synthetic (", rows, " rows, ", classes, " classes, seed ", seed, ")");
  return data;
}

// Each row a walk through one seeded permutation of the vocabulary from a random start.
ClassificationData MakeTokenWalks(int64_t rows, int64_t length, int64_t vocab, uint64_t seed) {
  Generator gen(seed);
  std::vector<int64_t> next(static_cast<size_t>(vocab));
  std::iota(next.begin(), next.end(), 0);
  for (int64_t i = vocab - 1; i > 0; --i) {  // Fisher-Yates
    std::swap(next[i], next[gen.NextU64() % static_cast<uint64_t>(i + 1)]);
  }
  ClassificationData data;
  data.x = Tensor::Empty({rows, length}, DType::kInt64);
  data.y = Tensor::Empty({rows, length}, DType::kInt64);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t token = static_cast<int64_t>(gen.NextU64() % static_cast<uint64_t>(vocab));
    for (int64_t t = 0; t < length; ++t) {
      data.x.data<int64_t>()[r * length + t] = token;
      token = next[token];
      data.y.data<int64_t>()[r * length + t] = token;
    }
  }
  data.description = StrCat("synthetic token walks (", rows, " rows of ", length, ", vocabulary ",
                            vocab, ", seed ", seed, ")");
  return data;
}

// Every element of int64 `t` ([rows] or [rows, T]) in [0, classes).
absl::Status CheckLabels(const std::string& path, const char* name, const Tensor& t,
                         int64_t classes, const char* what) {
  const int64_t per_row = t.dim() > 1 ? t.size(1) : 1;
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int64_t label = t.data<int64_t>()[i];
    if (label >= 0 && label < classes) continue;
    const std::string where =
        per_row > 1 ? StrCat("row ", i / per_row, " position ", i % per_row) : StrCat("row ", i);
    return absl::InvalidArgumentError(
        StrCat(path, ": tensor '", name, "' ", where, " has ", name[0] == 'x' ? "token " : "label ",
               label, ", outside the model's ", classes, " ", what, " [0, ", classes, ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckX(const std::string& path, const Tensor& x, const models::ModelIo& io) {
  const bool tokens = io.input_dtype == DType::kInt64;
  const std::string expected =
      StrCat(tokens ? "int64 token ids " : "floating point ", ShapeString(RowsOf(-1, io.row)));
  const bool dtype_ok = tokens ? x.dtype() == DType::kInt64 : IsFloatingPoint(x.dtype());
  Shape row(x.shape().begin() + (x.dim() > 0 ? 1 : 0), x.shape().end());
  bool fits = row.size() == io.row.size();
  for (size_t d = 0; fits && d < row.size(); ++d) fits = io.row[d] < 0 || io.row[d] == row[d];
  if (dtype_ok && x.dim() == 2 && io.row.size() == 1 && !tokens && row != io.row) {
    return absl::InvalidArgumentError(StrCat(path, ": tensor 'x' has ", x.size(1),
                                             " columns but the model's input width is ",
                                             io.row[0]));
  }
  if (!dtype_ok || x.dim() == 0 || !fits) {
    return absl::InvalidArgumentError(StrCat(path, ": tensor 'x' must be ", expected,
                                             " (N rows of the model's input), got ",
                                             DTypeName(x.dtype()), ShapeString(x.shape())));
  }
  return tokens ? CheckLabels(path, "x", x, io.classes, "token ids") : absl::OkStatus();
}

}  // namespace

ClassificationData MakeSyntheticData(int64_t rows, const models::ModelIo& io, uint64_t seed) {
  if (io.input_dtype == DType::kInt64) return MakeTokenWalks(rows, io.row.at(0), io.classes, seed);
  return MakeClusters(rows, io.synthetic_row, io.classes, seed);
}

ClassificationData MakeSyntheticClassification(int64_t rows, int64_t features, int64_t classes,
                                               uint64_t seed) {
  return MakeClusters(rows, {features}, classes, seed);
}

absl::StatusOr<ClassificationData> LoadClassificationData(const std::string& path,
                                                          const models::ModelIo& io,
                                                          EmptyData empty) {
  absl::StatusOr<SafetensorsFile> file = ReadSafetensors(path);
  if (!file.ok()) return file.status();
  const Tensor* x = file->Find("x");
  const Tensor* y = file->Find("y");
  const Shape y_shape = io.per_position ? Shape{-1, io.row.at(0)} : Shape{-1};
  if (x == nullptr || y == nullptr) {
    return absl::InvalidArgumentError(StrCat(path, ": needs tensors 'x' ",
                                             ShapeString(RowsOf(-1, io.row)), " and 'y' (int64 ",
                                             ShapeString(y_shape), ")"));
  }
  DDPKIT_RETURN_IF_ERROR(CheckX(path, *x, io));
  Shape want_y = y_shape;
  want_y[0] = x->size(0);
  if (y->dtype() != DType::kInt64 || y->shape() != want_y) {
    return absl::InvalidArgumentError(StrCat(path, ": tensor 'y' must be int64 ",
                                             ShapeString(want_y), " to match 'x', got ",
                                             DTypeName(y->dtype()), ShapeString(y->shape())));
  }
  if (x->size(0) == 0 && empty == EmptyData::kRefuse) {
    return absl::InvalidArgumentError(
        StrCat(path,
               ": tensor 'x' has no rows: there is nothing to train on (a rank of `ddpkit join` "
               "may have no data; `ddpkit train` shares one dataset among all ranks)"));
  }
  DDPKIT_RETURN_IF_ERROR(CheckLabels(path, "y", *y, io.classes, "output classes"));
  ClassificationData data;
  data.x = io.input_dtype == DType::kInt64 ? *x : x->To(DType::kFloat32);
  data.y = *y;
  data.description = path;
  return data;
}

absl::StatusOr<ClassificationData> LoadClassificationData(const std::string& path, int64_t features,
                                                          int64_t classes, EmptyData empty) {
  return LoadClassificationData(path, models::ModelIo{.row = {features}, .classes = classes},
                                empty);
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

Tensor BatchInput(const models::ModelIo& io, int64_t rows, Device device) {
  return Tensor::Empty(RowsOf(rows, io.synthetic_row), io.input_dtype, device);
}

Tensor BatchLike(const Tensor& data, int64_t rows, Device device) {
  Shape shape = data.shape();
  shape[0] = rows;
  return Tensor::Empty(shape, data.dtype(), device);
}

Tensor BatchLabels(const models::ModelIo& io, int64_t rows, Device device) {
  return Tensor::Empty(io.per_position ? Shape{rows, io.row.at(0)} : Shape{rows}, DType::kInt64,
                       device);
}

}  // namespace ddpkit::jobs
