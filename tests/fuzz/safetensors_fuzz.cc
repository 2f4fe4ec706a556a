// Any bytes given to the safetensors reader: a file or a DataLoss status, never a crash, an
// exception or a huge allocation; what it accepts writes back and reads back the same.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "autograd/nn/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<ddpkit::SafetensorsFile> file = ddpkit::ParseSafetensors(bytes, "fuzz");
  if (!file.ok()) return 0;
  const std::string again = ddpkit::SerializeSafetensors(file->tensors, file->metadata);
  absl::StatusOr<ddpkit::SafetensorsFile> reread = ddpkit::ParseSafetensors(again, "again");
  if (!reread.ok() || reread->tensors.size() != file->tensors.size() ||
      reread->metadata != file->metadata) {
    std::abort();  // what the reader accepted did not survive a round trip
  }
  for (size_t i = 0; i < file->tensors.size(); ++i) {
    const ddpkit::Tensor& a = file->tensors[i].second;
    const ddpkit::Tensor& b = reread->tensors[i].second;
    if (reread->tensors[i].first != file->tensors[i].first || a.shape() != b.shape() ||
        a.dtype() != b.dtype() || a.nbytes() != b.nbytes()) {
      std::abort();
    }
  }
  return 0;
}
