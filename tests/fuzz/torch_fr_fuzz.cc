// Any bytes as a PyTorch flight-recorder dump (tools/jobs/fr/torch_dump.h): a dump or an
// InvalidArgument naming the file in one line, never a crash; what it accepts has entries with
// non-negative element counts, each with the call it is compared by.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "tools/jobs/fr/torch_dump.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  ddpkit::jobs::RankFromFileName(text);
  if (ddpkit::jobs::LooksLikePickle(text)) return 0;
  absl::StatusOr<ddpkit::jobs::TorchDump> dump = ddpkit::jobs::ParseTorchDump(text, 1, "f_1");
  if (!dump.ok()) {
    const std::string message(dump.status().message());
    if (message.rfind("f_1: ", 0) != 0 || message.find('\n') != std::string::npos) {
      std::abort();
    }
    return 0;
  }
  if (dump->world_size < 2) std::abort();  // rank 1 is in it
  for (const auto& [group, d] : dump->groups) {
    if (d.rank != 1 || d.entries.size() != d.torch_calls.size()) std::abort();
    for (const auto& [seq, e] : d.entries) {
      if (e.count() < 0 || e.seq() != seq || e.process_group() != group) std::abort();
    }
  }
  return 0;
}
