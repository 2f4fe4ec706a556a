// Any bytes in a checkpoint's state.json (its DDP bucket plan and static graph record included): a
// state or a DataLoss status, never a crash or an exception; a state it accepts writes back and
// reads back the same.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "tools/checkpoint/state_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<ddpkit::checkpoint::CheckpointState> state =
      ddpkit::checkpoint::ParseCheckpointState(bytes);
  if (!state.ok()) return 0;
  absl::StatusOr<ddpkit::checkpoint::CheckpointState> again =
      ddpkit::checkpoint::ParseCheckpointState(
          ddpkit::checkpoint::SerializeCheckpointState(*state));
  if (!again.ok() || again->position.step != state->position.step ||
      again->settings != state->settings ||
      again->bucket_plan.has_value() != state->bucket_plan.has_value()) {
    std::abort();
  }
  if (state->bucket_plan && (again->bucket_plan->buckets != state->bucket_plan->buckets ||
                             again->bucket_plan->limits != state->bucket_plan->limits)) {
    std::abort();
  }
  if (again->static_graph.has_value() != state->static_graph.has_value() ||
      (state->static_graph &&
       (again->static_graph->hook_counts != state->static_graph->hook_counts ||
        again->static_graph->globally_unused != state->static_graph->globally_unused))) {
    std::abort();
  }
  return 0;
}
