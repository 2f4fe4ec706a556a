#include "tools/jobs/compiled_split.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "absl/strings/str_join.h"
#include "autograd/base/error.h"

namespace ddpkit::jobs {

using torch_formats::CompiledDdpRecord;
using torch_formats::CompiledNode;
using torch_formats::CompiledSubgraph;
using torch_formats::PlanFile;
using torch_formats::PlanTensor;
namespace {

// DDPOptimizer's rule (torch/_dynamo/backends/distributed.py, DDPOptimizer.compile_fn), as it
// stands in PyTorch 2.15, and why each step is there:
//
//  1. Walk the forward graph's nodes in reverse, placeholders and the output skipped. Backward
//     runs the graph backwards, so this is the order gradients become ready in: the buckets it
//     forms are DDP's buckets as DDP would fill them, and the first one formed is the first
//     reduced.
//  2. Before taking a node, look at the bucket being filled. It is full when its bytes reach
//     the cap — or, while it is the only bucket, the first cap, so that the first allreduce of
//     backward starts early as in eager DDP. That first cap is torch.distributed's
//     _DEFAULT_FIRST_BUCKET_BYTES (1 MiB) whatever bucket_cap_mb the user gave: Dynamo never
//     passes one, so PyTorch 2.4's rule (a given cap is also the first bucket's) does not
//     reach it. The test is ">=", and it runs before the node is added: a bucket closes at the
//     node that follows the one taking it to its cap, so it can end well above the cap.
//  3. A full bucket is closed (a new one begun) only if one of its nodes has an output used
//     outside it — by a node already in a later bucket, or by the graph's output. Otherwise it
//     keeps growing, node by node, until it holds such a node: split_module turns each bucket
//     into a subgraph, and one whose every node is, say, an in-place update that nothing reads
//     would return nothing.
//  4. The node's parameters count toward the bucket it joins, each by its storage's bytes
//     (the exporter refuses parameters that are views into a larger storage, so these are the
//     tensor's bytes): for call_function, the parameters among its direct positional arguments
//     (by keyword or inside a list, they are not seen); for call_module, all of the module's
//     parameters, the first time the module is met; for get_attr, the parameter it reads. For
//     call_method, only when the node it is a method of has a name for a target (a placeholder,
//     get_attr, call_method or call_module node — DDPOptimizer looks that name up as a
//     submodule): then the submodule's parameters, the first time, and the direct positional
//     ones. A method of a call_function's result (timm's in-place LayerScale, x.mul_(gamma)
//     after a linear) counts nothing: gamma is never counted.
//     Only parameters that require a gradient count (frozen ones are not reduced; DDP's
//     ignored ones neither, which a plan file does not record). A parameter is counted at
//     every node that takes it — a tied weight once per use — since the count is per node,
//     not per tensor. Buffers never count.
//  5. After the walk, if the last bucket begun (the graph's start) counted no bytes — a
//     preamble of parameter-less nodes — it joins the bucket after it rather than becoming a
//     subgraph with nothing to reduce.
//  6. split_module numbers the subgraphs in graph order: the reverse of the order they formed.
//
// Dtypes are not grouped (eager DDP buckets each dtype apart), and nothing here depends on the
// backend: the split is made on Dynamo's graph before the backend compiles the pieces.
class Splitter {
 public:
  Splitter(const PlanFile& file, const CompiledDdpRecord& record, CompiledCaps caps)
      : file_(file), nodes_(record.nodes), caps_(caps), bucket_of_(nodes_.size(), -1) {}

  std::vector<CompiledSubgraph> Run() {
    buckets_.emplace_back();
    for (size_t i = nodes_.size(); i-- > 0;) {
      if (Full()) {
        if (has_outside_user_) {
          buckets_.emplace_back();
          has_outside_user_ = false;
        } else {
          ++buckets_.back().nodes_added_past_cap;
        }
      }
      Take(i);
    }
    if (buckets_.size() > 1 && buckets_.back().bytes == 0) {  // step 5
      CompiledSubgraph preamble = std::move(buckets_.back());
      buckets_.pop_back();
      buckets_.back().nodes.insert(buckets_.back().nodes.end(), preamble.nodes.begin(),
                                   preamble.nodes.end());
    }
    std::reverse(buckets_.begin(), buckets_.end());
    for (CompiledSubgraph& b : buckets_) std::sort(b.nodes.begin(), b.nodes.end());
    return std::move(buckets_);
  }

 private:
  bool Full() const {
    const int64_t bytes = buckets_.back().bytes;
    return bytes >= caps_.cap || (buckets_.size() == 1 && bytes >= caps_.first);
  }

  void Count(const std::vector<size_t>& params) {
    for (size_t p : params) {
      if (!file_.parameters[p].requires_grad) continue;
      buckets_.back().params.push_back(p);
      buckets_.back().bytes += file_.parameters[p].nbytes;
    }
  }

  void CountModuleOnce(const CompiledNode& node) {
    if (node.module.empty() || !modules_seen_.insert(node.module).second) return;
    Count(node.module_params);
  }

  void Take(size_t i) {
    const CompiledNode& node = nodes_[i];
    if (node.op == "call_module") {
      CountModuleOnce(node);
    } else if (node.op == "call_method") {
      if (node.receiver != "call_function" && !node.receiver.empty()) {
        CountModuleOnce(node);
        Count(node.params);
      }
    } else {  // call_function, get_attr
      Count(node.params);
    }
    const auto here = static_cast<int>(buckets_.size() - 1);
    bucket_of_[i] = here;
    buckets_.back().nodes.push_back(i);
    // Users come later in the graph, so they are placed already: in this bucket or a later one.
    has_outside_user_ = has_outside_user_ || node.output ||
                        std::any_of(node.users.begin(), node.users.end(),
                                    [&](size_t u) { return bucket_of_[u] != here; });
  }

  const PlanFile& file_;
  const std::vector<CompiledNode>& nodes_;
  const CompiledCaps caps_;
  std::vector<int> bucket_of_;  // per node, the bucket it joined (in formation order)
  std::vector<CompiledSubgraph> buckets_;
  bool has_outside_user_ = false;  // of the bucket being filled
  std::set<std::string> modules_seen_;
};

std::string Names(const PlanFile& file, const std::vector<size_t>& params) {
  std::vector<std::string> names;
  for (size_t p : params) names.push_back(file.parameters[p].name);
  return StrCat("[", absl::StrJoin(names, ", "), "]");
}

std::string NodeRange(const CompiledDdpRecord& record, const std::vector<size_t>& nodes) {
  return StrCat("nodes ", nodes.front(), "-", nodes.back(), " (", record.nodes[nodes.front()].name,
                " to ", record.nodes[nodes.back()].name, ", ", nodes.size(), " nodes)");
}

// Where ddpkit's split and PyTorch's first differ; empty when they agree.
std::string FirstDifference(const PlanFile& file, const std::vector<CompiledSubgraph>& ours,
                            const std::vector<CompiledSubgraph>& pytorchs) {
  const CompiledDdpRecord& record = *file.compiled;
  for (size_t s = 0; s < std::min(ours.size(), pytorchs.size()); ++s) {
    const CompiledSubgraph& a = ours[s];
    const CompiledSubgraph& b = pytorchs[s];
    const std::string where = StrCat("submod_", s, ": ");
    if (a.nodes != b.nodes) {
      return StrCat(where, "ddpkit's holds ", NodeRange(record, a.nodes), ", PyTorch's ",
                    NodeRange(record, b.nodes));
    }
    if (a.params != b.params) {
      return StrCat(where, "ddpkit counts ", Names(file, a.params), ", PyTorch ",
                    Names(file, b.params));
    }
    if (a.bytes != b.bytes || a.nodes_added_past_cap != b.nodes_added_past_cap) {
      return StrCat(where, "ddpkit's holds ", a.bytes, " bytes (", a.nodes_added_past_cap,
                    " nodes past the cap), PyTorch's ", b.bytes, " (", b.nodes_added_past_cap, ")");
    }
  }
  if (ours.size() != pytorchs.size()) {
    return StrCat("ddpkit splits into ", ours.size(), " subgraphs, PyTorch into ", pytorchs.size());
  }
  return "";
}

// Per parameter (file position), the subgraph whose backward completes its gradient: the one
// holding the earliest node that uses it; -1 when no node does.
std::vector<int> CompletingSubgraph(const PlanFile& file,
                                    const std::vector<CompiledSubgraph>& split) {
  std::vector<int> subgraph_of_node(file.compiled->nodes.size(), -1);
  for (size_t s = 0; s < split.size(); ++s) {
    for (size_t n : split[s].nodes) subgraph_of_node[n] = static_cast<int>(s);
  }
  std::vector<int> completing(file.parameters.size(), -1);
  for (size_t n = file.compiled->nodes.size(); n-- > 0;) {  // the earliest use is set last
    const CompiledNode& node = file.compiled->nodes[n];
    for (const auto* list : {&node.params, &node.module_params, &node.other_params}) {
      for (size_t p : *list) completing[p] = subgraph_of_node[n];
    }
  }
  return completing;
}

const google::protobuf::RepeatedPtrField<reducer::BucketInfo>& EagerPlan(const ModelBuckets& m) {
  return m.rebuilt_buckets().empty() ? m.initial_buckets() : m.rebuilt_buckets();
}

// The eager plan walked parameter by parameter, in runs sharing one bucket and one subgraph;
// and per subgraph, the eager buckets whose last gradient it completes.
void SideBySide(const PlanFile& file, const ModelBuckets& eager, const std::vector<int>& completing,
                CompiledSplit& report) {
  const std::vector<size_t> positions = file.DdpParameters();
  const auto& plan = EagerPlan(eager);
  for (int b = 0; b < plan.size(); ++b) {
    int last_needed = -1;  // the bucket waits for the backward of its lowest-numbered subgraph
    for (int k = 0; k < plan[b].param_indices_size(); ++k) {
      const int index = plan[b].param_indices(k);
      const PlanTensor& p = file.parameters[positions[static_cast<size_t>(index)]];
      const int s = completing[positions[static_cast<size_t>(index)]];
      const int runs = report.side_by_side_size();
      const bool extend = runs > 0 && report.side_by_side(runs - 1).eager_bucket() == b &&
                          report.side_by_side(runs - 1).subgraph() == s;
      SideBySideRun& run =
          extend ? *report.mutable_side_by_side(runs - 1) : *report.add_side_by_side();
      run.set_eager_bucket(b);
      run.set_subgraph(s);
      run.add_param_indices(index);
      run.add_param_names(p.name);
      run.set_bytes(run.bytes() + p.nbytes);
      if (s >= 0 && (last_needed < 0 || s < last_needed)) last_needed = s;
    }
    if (last_needed >= 0) report.mutable_subgraphs(last_needed)->add_eager_buckets_ready(b);
  }
}

// What DDPOptimizer's count makes of the reduced parameters: counted twice, or never.
void CountNotes(const PlanFile& file, const std::vector<CompiledSubgraph>& split,
                CompiledSplit& report) {
  std::map<size_t, int> counts;
  for (const CompiledSubgraph& s : split) {
    for (size_t p : s.params) ++counts[p];
  }
  for (size_t p : file.DdpParameters()) {
    const int n = counts.count(p) ? counts[p] : 0;
    if (n > 1) report.add_counted_more_than_once(file.parameters[p].name);
    if (n == 0) report.add_never_counted(file.parameters[p].name);
  }
}

void DescribeSubgraphs(const PlanFile& file, const std::vector<CompiledSubgraph>& split,
                       const std::vector<int>& completing, CompiledSplit& report) {
  std::vector<int> ddp_index(file.parameters.size(), -1);
  const std::vector<size_t> positions = file.DdpParameters();
  for (size_t i = 0; i < positions.size(); ++i) ddp_index[positions[i]] = static_cast<int>(i);
  for (size_t s = 0; s < split.size(); ++s) {
    CompiledSubgraphInfo& info = *report.add_subgraphs();
    for (size_t n : split[s].nodes) info.add_nodes(static_cast<int32_t>(n));
    info.set_first_node(file.compiled->nodes[split[s].nodes.front()].name);
    info.set_last_node(file.compiled->nodes[split[s].nodes.back()].name);
    for (size_t p : split[s].params) info.add_counted_params(file.parameters[p].name);
    info.set_bytes(split[s].bytes);
    info.set_nodes_added_past_cap(static_cast<int32_t>(split[s].nodes_added_past_cap));
    for (size_t p = 0; p < file.parameters.size(); ++p) {
      if (ddp_index[p] >= 0 && completing[p] == static_cast<int>(s)) {
        info.add_completes_params(ddp_index[p]);
      }
    }
  }
}

}  // namespace

absl::StatusOr<std::vector<CompiledSubgraph>> DdpOptimizerSplit(const PlanFile& file,
                                                                CompiledCaps caps) {
  if (!file.compiled) {
    return absl::InvalidArgumentError(
        "the plan file has no compiled section: export it with export_ddp_plan.py --compiled "
        "under PyTorch 2.x");
  }
  if (caps.cap < 1 || caps.first < 1) {
    return absl::InvalidArgumentError(StrCat(
        "DDPOptimizer's caps must be at least 1 byte; got cap ", caps.cap, ", first ", caps.first));
  }
  if (caps.first > caps.cap) {  // DDPOptimizer's constructor asserts this
    return absl::InvalidArgumentError(StrCat(
        "DDPOptimizer refuses a first bucket cap (", caps.first, " bytes) above the bucket cap (",
        caps.cap, " bytes): torch.compile fails with an AssertionError. Give a cap of at least ",
        caps.first, " bytes"));
  }
  return Splitter(file, *file.compiled, caps).Run();
}

absl::StatusOr<CompiledSplit> CompiledSplitReport(const PlanFile& file, const ModelBuckets& eager,
                                                  std::optional<CompiledCaps> caps) {
  if (!file.compiled) return DdpOptimizerSplit(file, {}).status();
  const CompiledDdpRecord& record = *file.compiled;
  const CompiledCaps recorded{record.bucket_bytes_cap, record.first_bucket_bytes_cap};
  const CompiledCaps used = caps.value_or(recorded);
  DDPKIT_ASSIGN_OR_RETURN(const std::vector<CompiledSubgraph> split, DdpOptimizerSplit(file, used));
  CompiledSplit report;
  report.set_torch_version(record.torch_version);
  report.set_backend(record.backend);
  report.set_bucket_bytes_cap(used.cap);
  report.set_first_bucket_bytes_cap(used.first);
  const std::vector<int> completing = CompletingSubgraph(file, split);
  DescribeSubgraphs(file, split, completing, report);
  SideBySide(file, eager, completing, report);
  CountNotes(file, split, report);
  if (used.cap != recorded.cap || used.first != recorded.first) {
    report.set_not_compared(StrCat("PyTorch split with other caps (", recorded.cap,
                                   " bytes, first ", recorded.first, ")"));
    return report;
  }
  report.set_compared(true);
  report.set_first_difference(FirstDifference(file, split, record.split));
  report.set_agrees(report.first_difference().empty());
  return report;
}

}  // namespace ddpkit::jobs
