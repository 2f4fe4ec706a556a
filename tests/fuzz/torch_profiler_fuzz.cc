// Any bytes as PyTorch profiler traces (split at NUL bytes into up to four rank files): a view or
// an InvalidArgument of one line, never a crash; an accepted view has ranks in order, each once,
// and every span and instant with finite times that do not run backwards.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/fuzz/trace_view_checks.h"
#include "tools/trace/torch_profiler.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<ddpkit::trace::TorchTraceText> files;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  size_t from = 0;
  while (files.size() < 4) {
    const size_t nul = bytes.find('\0', from);
    files.push_back({"rank" + std::to_string(files.size()) + ".json",
                     bytes.substr(from, nul == std::string::npos ? nul : nul - from)});
    if (nul == std::string::npos) break;
    from = nul + 1;
  }
  ddpkit::trace::TorchPlan plan{
      .param_names = {"a", "b"}, .buckets = {{1, 0}}, .bucket_bytes = {8}};
  absl::StatusOr<ddpkit::trace::TraceView> view =
      ddpkit::trace::ParseTorchTraces(files, size % 2 ? &plan : nullptr);
  if (!view.ok()) {
    if (view.status().message().find('\n') != std::string::npos) std::abort();
    return 0;
  }
  ddpkit::fuzz::CheckView(*view);
  return 0;
}
