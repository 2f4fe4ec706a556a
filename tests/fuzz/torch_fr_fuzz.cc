// Any bytes as a PyTorch flight-recorder dump, JSON or pickle (tools/torch_formats/torch_dump.h,
// pickle_reader.h): a dump or an InvalidArgument naming the file in one line, never a crash, a
// hang or unbounded memory; what it accepts has entries with non-negative element counts, each
// with its calls, and compares against itself (torch_match.h) without a crash.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "tools/jobs/fr/torch_match.h"
#include "tools/torch_formats/pickle_reader.h"
#include "tools/torch_formats/torch_dump.h"

namespace {

void CompareWithItself(const ddpkit::torch_formats::TorchDump& dump) {
  for (const auto& [group, d] : dump.groups) {
    std::map<int, ddpkit::torch_formats::Dump> dumps = {{1, d}, {0, d}};
    dumps[0].rank = 0;
    if (!d.torch_calls.empty()) dumps[0].torch_calls.rbegin()->second.back().state += "?";
    const ddpkit::jobs::GroupDumps g{.name = group,
                                     .dumps = &dumps,
                                     .expected = {0, 1, 2},
                                     .dumped = {0, 1},
                                     .version = dump.version};
    for (const auto& c : ddpkit::jobs::CompareCollectives(g)) {
      if (c.verdict().empty() || c.process_group() != group) std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  ddpkit::torch_formats::RankFromFileName(text);
  if (ddpkit::torch_formats::LooksLikePickle(text)) {
    const absl::StatusOr<nlohmann::json> value = ddpkit::torch_formats::ReadTorchPickle(text);
    if (!value.ok() && std::string(value.status().message()).rfind("pickle: ", 0) != 0) {
      std::abort();
    }
  }
  absl::StatusOr<ddpkit::torch_formats::TorchDump> dump =
      ddpkit::torch_formats::ParseTorchDump(text, 1, "f_1");
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
  CompareWithItself(*dump);
  return 0;
}
