// Classification data for `ddpkit train`: a seeded synthetic task, or x/y tensors from a
// safetensors file.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "autograd/tensor.h"

namespace ddpkit::jobs {

struct ClassificationData {
  Tensor x;                 // float32 [rows, features]
  Tensor y;                 // int64 [rows], each in [0, classes)
  std::string description;  // for reports: "synthetic (4096 rows, seed 0)" or the path
  int64_t rows() const { return x.size(0); }
};

// Gaussian clusters: each class has a random centre; a row is its class centre plus unit
// noise. Separable enough that a small MLP's loss falls within tens of SGD steps.
ClassificationData MakeSyntheticClassification(int64_t rows, int64_t features, int64_t classes,
                                               uint64_t seed);

// Whether a data file may hold no rows: a rank of `ddpkit join` may (it joins at once and
// shadows every iteration, as PyTorch's Join allows); `ddpkit train` has nothing to train on.
enum class EmptyData { kRefuse, kAllow };

// Reads tensors `x` (floating point [N, features], converted to float32) and `y` (int64 [N],
// labels in [0, classes)). Errors name the file and the tensor.
absl::StatusOr<ClassificationData> LoadClassificationData(const std::string& path, int64_t features,
                                                          int64_t classes,
                                                          EmptyData empty = EmptyData::kRefuse);

// Rows [start, start + count) of the data, wrapping around its end, copied into x and y.
void GatherRows(const ClassificationData& data, int64_t start, int64_t count, Tensor& x, Tensor& y);

}  // namespace ddpkit::jobs
