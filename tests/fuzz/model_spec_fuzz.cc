// Any --model text: widths or an InvalidArgument, never a crash; what it accepts describes a
// model whose size fits in int64 (the layers' shapes and the parameter count), and spells back
// to the same widths. The full spec (ParseModelSpec: widths and options) likewise spells back to
// the same spec, and whatever the plain parser accepts it accepts as an option-free spec.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "absl/strings/str_join.h"
#include "autograd/nn/nn.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view spec(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<ddpkit::nn::MlpSpec> full = ddpkit::nn::ParseModelSpec(spec);
  if (full.ok()) {
    absl::StatusOr<ddpkit::nn::MlpSpec> again = ddpkit::nn::ParseModelSpec(SpecString(*full));
    if (!again.ok() || again->widths != full->widths || again->bias != full->bias ||
        again->unused != full->unused || again->tied != full->tied) {
      std::abort();
    }
  }
  absl::StatusOr<std::vector<int64_t>> widths = ddpkit::nn::ParseMlpSpec(spec);
  if (!widths.ok()) return 0;
  if (!full.ok() || full->widths != *widths || !full->bias || full->unused || full->tied) {
    std::abort();
  }
  if (widths->size() < 2) std::abort();
  int64_t parameters = 0;
  for (size_t i = 0; i + 1 < widths->size(); ++i) {
    const int64_t in = (*widths)[i], out = (*widths)[i + 1];
    int64_t weight = 0, layer = 0;
    if (in <= 0 || out <= 0 || __builtin_mul_overflow(in, out, &weight) ||
        __builtin_add_overflow(weight, out, &layer) ||
        __builtin_add_overflow(parameters, layer, &parameters)) {
      std::abort();  // accepted a model whose size does not fit
    }
  }
  absl::StatusOr<std::vector<int64_t>> again =
      ddpkit::nn::ParseMlpSpec("mlp:" + absl::StrJoin(*widths, ","));
  if (!again.ok() || *again != *widths) std::abort();
  return 0;
}
