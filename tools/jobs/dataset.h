// Training data for the DDP jobs: a seeded synthetic task shaped for the model, x/y tensors from
// a safetensors file, or a text file read as characters (nanoGPT's shakespeare_char way).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "autograd/nn/models/zoo.h"
#include "autograd/tensor.h"

namespace ddpkit::jobs {

struct ClassificationData {
  Tensor x;                 // [rows, ...the model's row shape]: float32, or int64 token ids
  Tensor y;                 // int64 [rows], or [rows, T] for a language model; each in [0, classes)
  std::string description;  // for reports: "synthetic (4096 rows, seed 0)" or the path
  // A text file's characters, by token id (UTF-8 each); empty for other data.
  std::vector<std::string> vocabulary;
  int64_t rows() const { return x.size(0); }
};

// A task the model can learn, from a seed. Rows of features or images: Gaussian clusters, each
// class a random centre and a row its class centre plus unit noise, separable enough that a
// small model's loss falls within tens of SGD steps. Token rows: a walk through a seeded
// permutation of the vocabulary (each next token a function of the current one), y the next
// token at every position.
ClassificationData MakeSyntheticData(int64_t rows, const models::ModelIo& io, uint64_t seed);
// The same as MakeSyntheticData for a model of `features` inputs and `classes` outputs.
ClassificationData MakeSyntheticClassification(int64_t rows, int64_t features, int64_t classes,
                                               uint64_t seed);

// Whether a data file may hold no rows: a rank of `ddpkit join` may (it joins at once and
// shadows every iteration, as PyTorch's Join allows); `ddpkit train` has nothing to train on.
enum class EmptyData { kRefuse, kAllow };

// Reads tensors `x` ([N, ...row]: floating point, converted to float32; or int64 token ids for a
// model that takes them) and `y` (int64 [N], or [N, T] per position, labels in [0, classes)).
// Errors name the file and the tensor.
absl::StatusOr<ClassificationData> LoadClassificationData(const std::string& path,
                                                          const models::ModelIo& io,
                                                          EmptyData empty = EmptyData::kRefuse);
absl::StatusOr<ClassificationData> LoadClassificationData(const std::string& path, int64_t features,
                                                          int64_t classes,
                                                          EmptyData empty = EmptyData::kRefuse);

// A UTF-8 text file as characters: the vocabulary is its distinct characters, sorted (as
// nanoGPT's shakespeare_char); row r is the T characters from r·T, y the T after each by one.
// The model must take token rows and have at least as many classes as the text has characters.
absl::StatusOr<ClassificationData> LoadTextData(const std::string& path, const models::ModelIo& io);

// Rows [start, start + count) of the data, wrapping around its end, copied into x and y.
void GatherRows(const ClassificationData& data, int64_t start, int64_t count, Tensor& x, Tensor& y);

// Tensors x and y for `rows` rows of the model's input (its synthetic size) and labels.
Tensor BatchInput(const models::ModelIo& io, int64_t rows, Device device = Device::Cpu());
Tensor BatchLabels(const models::ModelIo& io, int64_t rows, Device device = Device::Cpu());
// A tensor of `rows` rows shaped as `data`'s (data.x or data.y), for batches gathered from it.
Tensor BatchLike(const Tensor& data, int64_t rows, Device device = Device::Cpu());

}  // namespace ddpkit::jobs
