#include "tools/torch_formats/compiled_record.h"

#include <algorithm>
#include <map>

#include "tools/torch_formats/json_field.h"

namespace ddpkit::torch_formats {
namespace {

using Names = std::map<std::string, size_t, std::less<>>;

// A list of parameter names, as positions in the file's parameters.
absl::StatusOr<std::vector<size_t>> ReadParams(const JsonField& list, const Names& names) {
  DDPKIT_ASSIGN_OR_RETURN(const std::vector<JsonField> items, list.List());
  std::vector<size_t> out;
  for (const JsonField& item : items) {
    DDPKIT_ASSIGN_OR_RETURN(const std::string name, item.String());
    const auto it = names.find(name);
    if (it == names.end()) return item.Expected("the name of a parameter in `parameters`");
    out.push_back(it->second);
  }
  return out;
}

absl::StatusOr<std::vector<size_t>> ReadOptionalParams(const JsonField& node, std::string_view key,
                                                       const Names& names) {
  if (!node.Has(key)) return std::vector<size_t>{};
  DDPKIT_ASSIGN_OR_RETURN(const JsonField list, node.Member(key));
  return ReadParams(list, names);
}

// Node indices in [min, count), each greater than the one before.
absl::StatusOr<std::vector<size_t>> ReadAscending(const JsonField& list, int64_t min,
                                                  int64_t count) {
  DDPKIT_ASSIGN_OR_RETURN(const std::vector<JsonField> items, list.List());
  std::vector<size_t> out;
  for (const JsonField& item : items) {
    const int64_t floor = out.empty() ? min : static_cast<int64_t>(out.back()) + 1;
    if (floor >= count) {
      return item.Expected(out.empty() ? StrCat("no entry: no node comes after node ", min - 1)
                                       : StrCat("no entry after node ", out.back(), ", the last"));
    }
    DDPKIT_ASSIGN_OR_RETURN(const int64_t v, item.Int(floor, count - 1));
    out.push_back(static_cast<size_t>(v));
  }
  return out;
}

absl::StatusOr<std::string> ReadString(const JsonField& parent, std::string_view key) {
  DDPKIT_ASSIGN_OR_RETURN(const JsonField field, parent.Member(key));
  return field.String();
}

// Node i of `count`: its users come later in the graph (FX graphs are in topological order).
absl::StatusOr<CompiledNode> ReadNode(const JsonField& field, int64_t i, int64_t count,
                                      const Names& names) {
  CompiledNode node;
  DDPKIT_ASSIGN_OR_RETURN(node.name, ReadString(field, "name"));
  DDPKIT_ASSIGN_OR_RETURN(node.op, ReadString(field, "op"));
  static constexpr std::string_view kOps[] = {"call_function", "call_method", "call_module",
                                              "get_attr"};
  if (std::find(std::begin(kOps), std::end(kOps), node.op) == std::end(kOps)) {
    DDPKIT_ASSIGN_OR_RETURN(const JsonField op, field.Member("op"));
    return op.Expected("call_function, call_method, call_module or get_attr");
  }
  DDPKIT_ASSIGN_OR_RETURN(node.target, ReadString(field, "target"));
  DDPKIT_ASSIGN_OR_RETURN(const JsonField params, field.Member("params"));
  DDPKIT_ASSIGN_OR_RETURN(node.params, ReadParams(params, names));
  if (field.Has("receiver")) {
    DDPKIT_ASSIGN_OR_RETURN(node.receiver, ReadString(field, "receiver"));
  }
  if (field.Has("module")) {
    DDPKIT_ASSIGN_OR_RETURN(node.module, ReadString(field, "module"));
  }
  DDPKIT_ASSIGN_OR_RETURN(node.module_params, ReadOptionalParams(field, "module_params", names));
  DDPKIT_ASSIGN_OR_RETURN(node.other_params, ReadOptionalParams(field, "other_params", names));
  DDPKIT_ASSIGN_OR_RETURN(const JsonField users, field.Member("users"));
  DDPKIT_ASSIGN_OR_RETURN(node.users, ReadAscending(users, i + 1, count));
  DDPKIT_ASSIGN_OR_RETURN(const JsonField output, field.Member("output"));
  DDPKIT_ASSIGN_OR_RETURN(node.output, output.Bool());
  return node;
}

absl::StatusOr<CompiledSubgraph> ReadSubgraph(const JsonField& field, int64_t count,
                                              const Names& names) {
  CompiledSubgraph sub;
  DDPKIT_ASSIGN_OR_RETURN(const JsonField nodes, field.Member("nodes"));
  DDPKIT_ASSIGN_OR_RETURN(sub.nodes, ReadAscending(nodes, 0, count));
  if (sub.nodes.empty()) return nodes.Expected("at least one node");
  DDPKIT_ASSIGN_OR_RETURN(const JsonField params, field.Member("params"));
  DDPKIT_ASSIGN_OR_RETURN(sub.params, ReadParams(params, names));
  DDPKIT_ASSIGN_OR_RETURN(const JsonField bytes, field.Member("bytes"));
  DDPKIT_ASSIGN_OR_RETURN(sub.bytes, bytes.Int(0));
  DDPKIT_ASSIGN_OR_RETURN(const JsonField past, field.Member("nodes_added_past_cap"));
  DDPKIT_ASSIGN_OR_RETURN(sub.nodes_added_past_cap, past.Int(0));
  return sub;
}

// Every node in exactly one subgraph: DDPOptimizer hands split_module a partition.
absl::Status CheckPartition(const JsonField& split, const std::vector<CompiledSubgraph>& subgraphs,
                            size_t count) {
  std::vector<int> owner(count, -1);
  for (size_t s = 0; s < subgraphs.size(); ++s) {
    for (size_t node : subgraphs[s].nodes) {
      if (owner[node] >= 0) {
        return split.Expected(StrCat("each node in one subgraph; node ", node, " is in subgraphs ",
                                     owner[node], " and ", s));
      }
      owner[node] = static_cast<int>(s);
    }
  }
  for (size_t node = 0; node < count; ++node) {
    if (owner[node] < 0) {
      return split.Expected(StrCat("each node in one subgraph; node ", node, " is in none"));
    }
  }
  return absl::OkStatus();
}

absl::Status ReadCaps(const JsonField& root, CompiledDdpRecord& record) {
  if (root.Has("bucket_cap_mb")) {
    DDPKIT_ASSIGN_OR_RETURN(const JsonField cap_mb, root.Member("bucket_cap_mb"));
    if (!cap_mb.IsNull()) {
      DDPKIT_ASSIGN_OR_RETURN(const double mb, cap_mb.Number());
      if (!(mb > 0) || mb > 1e12) return cap_mb.Expected("a cap in MiB > 0, or null");
      record.bucket_cap_mb = mb;
    }
  }
  DDPKIT_ASSIGN_OR_RETURN(const JsonField cap, root.Member("bucket_bytes_cap"));
  DDPKIT_ASSIGN_OR_RETURN(record.bucket_bytes_cap, cap.Int(1));
  DDPKIT_ASSIGN_OR_RETURN(const JsonField first, root.Member("first_bucket_bytes_cap"));
  DDPKIT_ASSIGN_OR_RETURN(record.first_bucket_bytes_cap, first.Int(1));
  return absl::OkStatus();
}

absl::StatusOr<CompiledDdpRecord> ReadRecord(const JsonField& root, const Names& names) {
  CompiledDdpRecord record;
  DDPKIT_ASSIGN_OR_RETURN(record.torch_version, ReadString(root, "torch_version"));
  DDPKIT_ASSIGN_OR_RETURN(record.optimize_ddp, ReadString(root, "optimize_ddp"));
  if (record.optimize_ddp != "ddp_optimizer") {
    DDPKIT_ASSIGN_OR_RETURN(const JsonField mode, root.Member("optimize_ddp"));
    return mode.Expected("\"ddp_optimizer\" (the one mode a plan file records)");
  }
  DDPKIT_ASSIGN_OR_RETURN(record.backend, ReadString(root, "backend"));
  DDPKIT_RETURN_IF_ERROR(ReadCaps(root, record));
  DDPKIT_ASSIGN_OR_RETURN(const JsonField nodes, root.Member("nodes"));
  DDPKIT_ASSIGN_OR_RETURN(const std::vector<JsonField> node_items, nodes.List());
  if (node_items.empty()) return nodes.Expected("at least one node");
  const auto count = static_cast<int64_t>(node_items.size());
  for (int64_t i = 0; i < count; ++i) {
    DDPKIT_ASSIGN_OR_RETURN(CompiledNode node, ReadNode(node_items[i], i, count, names));
    record.nodes.push_back(std::move(node));
  }
  DDPKIT_ASSIGN_OR_RETURN(const JsonField split, root.Member("split"));
  DDPKIT_ASSIGN_OR_RETURN(const std::vector<JsonField> split_items, split.List());
  for (const JsonField& item : split_items) {
    DDPKIT_ASSIGN_OR_RETURN(CompiledSubgraph sub, ReadSubgraph(item, count, names));
    record.split.push_back(std::move(sub));
  }
  DDPKIT_RETURN_IF_ERROR(CheckPartition(split, record.split, record.nodes.size()));
  return record;
}

}  // namespace

absl::StatusOr<CompiledDdpRecord> ReadCompiledRecord(
    const nlohmann::json& section, const std::vector<std::string>& parameter_names) {
  Names names;
  for (size_t i = 0; i < parameter_names.size(); ++i) names.emplace(parameter_names[i], i);
  return ReadRecord(JsonField(section, "compiled"), names);
}

}  // namespace ddpkit::torch_formats
