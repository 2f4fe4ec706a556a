// A plan file's optional "compiled" section: what torch.compile(DDP(model)) did with the model,
// recorded by tools/scripts/export_ddp_plan.py --compiled (compiled_ddp_split.py) under PyTorch
// 2.x — the forward graph Dynamo's DDPOptimizer walked and the split it made. The schema is in
// docs/plan_files.md ("Compiled DDP"); compiled_split.h computes the split from it.
//
// Parameters are held as positions in the file's `parameters` (every one, frozen too: the rule
// decides what counts); the reader refuses a name that is not there, a user that does not come
// later in the graph, and a split that is not a partition of the nodes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"

namespace ddpkit::torch_formats {

// One node of the forward FX graph, placeholders and the output left out, in graph order.
struct CompiledNode {
  std::string name;    // FX's node name: "linear_3"
  std::string op;      // call_function, call_method, call_module or get_attr
  std::string target;  // "linear", "mul_", a submodule's path
  // call_method: the op of the node it is a method of ("placeholder", "call_function", ...).
  std::string receiver;
  // Parameters the node takes as direct positional inputs (get_attr: the one it reads), in
  // argument order, repeats kept.
  std::vector<size_t> params;
  // call_module, or call_method on a submodule: that module's parameters (empty module: none).
  std::string module;
  std::vector<size_t> module_params;
  // Parameters reaching the node any other way (by keyword, inside a list).
  std::vector<size_t> other_params;
  std::vector<size_t> users;  // later nodes that take this one's output
  bool output = false;        // the graph's output takes it
};

// One subgraph of DDPOptimizer's split, as PyTorch recorded it (graph order: the first runs
// first in forward, last in backward).
struct CompiledSubgraph {
  std::vector<size_t> nodes;   // ascending
  std::vector<size_t> params;  // in the order DDPOptimizer counted them, repeats kept
  int64_t bytes = 0;
  int64_t nodes_added_past_cap = 0;  // DDPOptimizer's opcount_increased_to_capture_external_output
};

struct CompiledDdpRecord {
  std::string torch_version;
  std::string optimize_ddp;             // "ddp_optimizer"
  std::string backend;                  // the torch.compile backend: aot_eager, inductor
  std::optional<double> bucket_cap_mb;  // as passed to DDP; absent: PyTorch's default
  int64_t bucket_bytes_cap = 0;         // what DDPOptimizer used (DDP's bucket_bytes_cap)
  int64_t first_bucket_bytes_cap = 0;   // torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
  std::vector<CompiledNode> nodes;
  std::vector<CompiledSubgraph> split;
};

// Reads the section at `section` (the JSON value of "compiled"); `parameter_names` are the file's
// parameters in order. InvalidArgument naming the field ("compiled.nodes[3].users[0]: ...").
absl::StatusOr<CompiledDdpRecord> ReadCompiledRecord(
    const nlohmann::json& section, const std::vector<std::string>& parameter_names);

}  // namespace ddpkit::torch_formats
