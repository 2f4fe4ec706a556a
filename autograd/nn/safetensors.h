// safetensors: the tensor file format PyTorch users exchange weights in.
//
//   [8 bytes: header length N, little-endian u64][N bytes: JSON header][data]
//   header: {"<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
//            "__metadata__": {"<key>": "<string>"}}      (offsets relative to the data section)
//
// Reading validates everything before trusting it — header length, JSON, dtypes, shapes,
// offsets in range, sizes matching shapes, no overlaps — and reports the first problem with the
// file name and tensor name as absl::StatusCode::kDataLoss. Writing is atomic.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "autograd/nn/nn.h"

namespace ddpkit {

struct SafetensorsFile {
  NamedTensors tensors;  // in the order of their data offsets
  std::map<std::string, std::string> metadata;

  // The tensor called `name`, or nullptr.
  const Tensor* Find(std::string_view name) const;
};

// `source` names the bytes in error messages (usually the path). The tensors are placed on
// `device` (a GPU one is copied there after the file is checked).
absl::StatusOr<SafetensorsFile> ParseSafetensors(std::string_view bytes, std::string_view source,
                                                 Device device = Device::Cpu());
absl::StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path,
                                                Device device = Device::Cpu());

// Tensors on a GPU are copied to the host to be written.
std::string SerializeSafetensors(const NamedTensors& tensors,
                                 const std::map<std::string, std::string>& metadata = {});
absl::Status WriteSafetensors(const std::string& path, const NamedTensors& tensors,
                              const std::map<std::string, std::string>& metadata = {});

// A module's parameters and buffers, keyed and ordered as PyTorch's state_dict() (Module::
// StateDict: module by module, parameters then buffers; a tied weight under each of its names).
absl::Status SaveStateDict(const nn::Module& module, const std::string& path);
// Copies every tensor of the file into the module's parameter or buffer of the same name.
// Strict, as PyTorch's load_state_dict: a missing or unexpected name, or a shape mismatch, is an
// InvalidArgument naming the file and the tensor; nothing is modified unless all of it fits.
// A dtype different from the parameter's is converted; each tensor is copied to the device
// its parameter lives on. A tied parameter may be in the file under its first name, under
// another of its names, or under all of them (PyTorch's state_dict lists it under every name).
absl::Status LoadStateDict(nn::Module& module, const std::string& path);

}  // namespace ddpkit
