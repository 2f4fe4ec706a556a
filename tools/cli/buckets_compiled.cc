#include "tools/cli/buckets_compiled.h"

#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tools/cli/ddp_flags.h"
#include "tools/cli/subcommand.h"

namespace ddpkit::cli {
namespace {

// "3 tensors: a .. c" (all of them when two or fewer).
std::string Span(const google::protobuf::RepeatedPtrField<std::string>& names) {
  if (names.empty()) return "none";
  if (names.size() <= 2) return absl::StrJoin(names, ", ");
  return StrCat(names.size(), " tensors: ", names[0], " .. ", names[names.size() - 1]);
}

void PrintSubgraphs(const jobs::CompiledSplit& split) {
  std::cout << absl::StrFormat("%9s  %9s  %10s  %-14s  %s\n", "subgraph", "nodes", "bytes",
                               "eager buckets", "parameters DDPOptimizer counted");
  for (int s = split.subgraphs_size() - 1; s >= 0; --s) {  // backward order
    const jobs::CompiledSubgraphInfo& info = split.subgraphs(s);
    const std::string ready =
        info.eager_buckets_ready().empty() ? "-" : absl::StrJoin(info.eager_buckets_ready(), ",");
    const std::string past = info.nodes_added_past_cap() > 0
                                 ? StrCat(" (+", info.nodes_added_past_cap(),
                                          info.nodes_added_past_cap() == 1 ? " node" : " nodes",
                                          " past the cap, for an output)")
                                 : "";
    std::cout << absl::StrFormat("%9s  %4d-%-4d  %10d  %-14s  %s%s\n", StrCat("submod_", s),
                                 info.nodes(0), info.nodes(info.nodes_size() - 1), info.bytes(),
                                 ready, Span(info.counted_params()), past);
  }
}

void PrintSideBySide(const jobs::CompiledSplit& split) {
  std::cout << "\nSide by side, walking eager DDP's plan in reduction order (a bucket's allreduce "
               "waits for the backward of every subgraph it draws on):\n"
            << absl::StrFormat("%12s  %9s  %10s  %s\n", "eager bucket", "subgraph", "bytes",
                               "parameters");
  for (const jobs::SideBySideRun& run : split.side_by_side()) {
    const std::string subgraph = run.subgraph() < 0 ? "unused" : StrCat("submod_", run.subgraph());
    std::cout << absl::StrFormat("%12d  %9s  %10d  %s\n", run.eager_bucket(), subgraph, run.bytes(),
                                 Span(run.param_names()));
  }
}

void PrintNotes(const jobs::CompiledSplit& split) {
  if (!split.counted_more_than_once().empty()) {
    std::cout << "\nCounted more than once by DDPOptimizer (once per node that takes it, as a "
                 "tied weight): "
              << absl::StrJoin(split.counted_more_than_once(), ", ") << "\n";
  }
  if (!split.never_counted().empty()) {
    std::cout << "\nNever counted by DDPOptimizer (passed by keyword or in a list, used only by "
                 "a method of a function's result, or unused): "
              << absl::StrJoin(split.never_counted(), ", ") << "\n";
  }
  std::cout << "\nCompiled split agrees with PyTorch: "
            << (!split.compared() ? StrCat("not compared — ", split.not_compared())
                : split.agrees()  ? StrCat("yes (", split.subgraphs_size(),
                                          split.subgraphs_size() == 1 ? " subgraph" : " subgraphs",
                                           ": nodes, parameters and bytes, subgraph by subgraph)")
                                  : StrCat("NO (", split.first_difference(), ")"))
            << "\n";
}

}  // namespace

absl::Status AddCompiledSplit(const torch_formats::PlanFile& file, jobs::ModelBuckets& plans) {
  if (!file.compiled) return absl::OkStatus();
  // --bucket-cap-mb is DDP's cap, which DDPOptimizer takes too; its first cap is PyTorch's
  // constant whatever the user sets, so --first-bucket-mb (eager DDP's) does not move it.
  std::optional<jobs::CompiledCaps> caps;
  if (FlagDiffersFromDefault("bucket_cap_mb")) {
    DDPKIT_ASSIGN_OR_RETURN(const reducer::DdpOptions options, DdpOptionsFromFlags());
    caps =
        jobs::CompiledCaps{.cap = static_cast<int64_t>(reducer::LimitsOf(options).bucket_cap_bytes),
                           .first = file.compiled->first_bucket_bytes_cap};
  }
  DDPKIT_ASSIGN_OR_RETURN(*plans.mutable_compiled(), jobs::CompiledSplitReport(file, plans, caps));
  return absl::OkStatus();
}

void PrintCompiledSplit(const jobs::ModelBuckets& plans) {
  if (!plans.has_compiled()) return;
  const jobs::CompiledSplit& split = plans.compiled();
  std::cout << "\nUnder torch.compile (DDPOptimizer, recorded with PyTorch "
            << split.torch_version() << ", backend " << split.backend()
            << "): " << split.subgraphs_size() << " subgraphs at cap " << split.bucket_bytes_cap()
            << " bytes, first " << split.first_bucket_bytes_cap()
            << ", in backward order. Each subgraph's backward makes all its gradients ready at "
               "once; 'eager buckets' are those whose last gradient it completes:\n";
  PrintSubgraphs(split);
  PrintSideBySide(split);
  PrintNotes(split);
}

}  // namespace ddpkit::cli
