// torch.compile's split of a DDP model (compiled_split.h): each step of DDPOptimizer's rule on
// small graphs built here; on every committed compiled plan (tests/testdata/compiled_plans/,
// recorded by PyTorch 2.15 with export_ddp_plan.py --compiled), ddpkit's split is the one
// DDPOptimizer made, subgraph by subgraph; a malformed compiled section is an error naming the
// field.
#include "tools/jobs/compiled_split.h"

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tools/jobs/bucket_plans.h"

namespace ddpkit::jobs {

using torch_formats::CompiledDdpRecord;
using torch_formats::CompiledSubgraph;
using torch_formats::ParsePlanFile;
using torch_formats::PlanFile;
using torch_formats::ReadPlanFile;
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Json = nlohmann::json;

std::string CompiledPlanPath(const std::string& name) {
  return std::string(DDPKIT_TESTDATA_DIR) + "/compiled_plans/" + name;
}

// --- the rule on graphs built here ---------------------------------------------------------

struct Node {
  std::vector<std::string> params = {};
  std::vector<int> users = {};
  bool output = false;
  std::string op = "call_function";
  std::string receiver = "";
  std::string module = "";
  std::vector<std::string> module_params = {};
  std::vector<std::string> other_params = {};
};

// A plan file whose parameters are float32 vectors of `numels` (named p0, p1, ...; "frozen" is a
// frozen one of 25 elements) and whose compiled section holds `nodes` and, as PyTorch's split,
// one subgraph of them all (the rule's tests compare with expectations written here).
PlanFile FileOf(const std::vector<int64_t>& numels, const std::vector<Node>& nodes) {
  Json params = Json::array();
  for (size_t i = 0; i < numels.size(); ++i) {
    params.push_back({{"name", StrCat("p", i)},
                      {"shape", Json::array({numels[i]})},
                      {"dtype", "float32"},
                      {"requires_grad", true}});
  }
  params.push_back({{"name", "frozen"},
                    {"shape", Json::array({25})},
                    {"dtype", "float32"},
                    {"requires_grad", false}});
  Json graph = Json::array();
  Json all = Json::array();
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    Json node = {{"name", StrCat("n", i)}, {"op", n.op},       {"target", "f"},
                 {"params", n.params},     {"users", n.users}, {"output", n.output}};
    if (!n.receiver.empty()) node["receiver"] = n.receiver;
    if (!n.module.empty()) {
      node["module"] = n.module;
      node["module_params"] = n.module_params;
    }
    if (!n.other_params.empty()) node["other_params"] = n.other_params;
    graph.push_back(node);
    all.push_back(i);
  }
  const Json file = {{"format", "ddpkit-plan/1"},
                     {"model", "built"},
                     {"parameters", params},
                     {"compiled",
                      {{"torch_version", "2.15.0"},
                       {"optimize_ddp", "ddp_optimizer"},
                       {"backend", "aot_eager"},
                       {"bucket_cap_mb", nullptr},
                       {"bucket_bytes_cap", 100},
                       {"first_bucket_bytes_cap", 100},
                       {"nodes", graph},
                       {"split", Json::array({Json{{"nodes", all},
                                                   {"params", Json::array()},
                                                   {"bytes", 0},
                                                   {"nodes_added_past_cap", 0}}})}}}};
  absl::StatusOr<PlanFile> parsed = ParsePlanFile(file.dump(), "built.json");
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return parsed.ok() ? *parsed : PlanFile{};
}

// A chain n0 -> n1 -> ... -> output, node i taking parameter p_i.
std::vector<Node> Chain(int length) {
  std::vector<Node> nodes;
  for (int i = 0; i < length; ++i) {
    nodes.push_back({.params = {StrCat("p", i)},
                     .users = i + 1 < length ? std::vector<int>{i + 1} : std::vector<int>{},
                     .output = i + 1 == length});
  }
  return nodes;
}

struct Expected {
  std::vector<size_t> nodes;
  int64_t bytes;
  int64_t past_cap = 0;
};

void ExpectSplit(const absl::StatusOr<std::vector<CompiledSubgraph>>& split,
                 const std::vector<Expected>& expected) {
  ASSERT_TRUE(split.ok()) << split.status();
  ASSERT_EQ(split->size(), expected.size());
  for (size_t s = 0; s < expected.size(); ++s) {
    SCOPED_TRACE(StrCat("submod_", s));
    EXPECT_EQ((*split)[s].nodes, expected[s].nodes);
    EXPECT_EQ((*split)[s].bytes, expected[s].bytes);
    EXPECT_EQ((*split)[s].nodes_added_past_cap, expected[s].past_cap);
  }
}

// Walking backwards, a bucket closes at the node after the one that takes it to the cap, so
// buckets end above it; subgraphs come in graph order.
TEST(CompiledSplitTest, ABucketClosesAtTheNodeAfterItsCap) {
  const PlanFile file = FileOf({25, 25, 25, 25}, Chain(4));  // 100 bytes each
  ExpectSplit(DdpOptimizerSplit(file, {.cap = 150, .first = 150}), {{{0, 1}, 200}, {{2, 3}, 200}});
}

// The first bucket to fill (the graph's end) closes at the first cap, the others at the cap.
TEST(CompiledSplitTest, TheFirstBucketHasItsOwnCap) {
  const PlanFile file = FileOf({25, 25, 25, 25}, Chain(4));
  ExpectSplit(DdpOptimizerSplit(file, {.cap = 1000, .first = 100}), {{{0, 1, 2}, 300}, {{3}, 100}});
}

// An in-place method that nothing reads: n1 = h.mul_(gain) has no user (n2 reads n0). A bucket
// holding only n1 would return nothing, so it grows past its cap until it takes n0, whose output
// leaves it.
TEST(CompiledSplitTest, AFullBucketGrowsUntilAnOutputLeavesIt) {
  const PlanFile file = FileOf({25, 25, 25}, {{.params = {"p0"}, .users = {1, 2}},
                                              {.params = {"p1"}, .users = {}},  // mul_
                                              {.params = {"p2"}, .users = {}, .output = true}});
  ExpectSplit(DdpOptimizerSplit(file, {.cap = 100, .first = 100}), {{{0, 1}, 200, 1}, {{2}, 100}});
}

// Nodes before the first parameter's form a bucket of no bytes, which joins the one after it.
TEST(CompiledSplitTest, AParameterlessPreambleJoinsTheNextSubgraph) {
  const PlanFile file =
      FileOf({25}, {{.params = {}, .users = {1}}, {.params = {"p0"}, .users = {}, .output = true}});
  ExpectSplit(DdpOptimizerSplit(file, {.cap = 100, .first = 100}), {{{0, 1}, 100}});
}

// The count is per node: a tied weight counts at each use; frozen parameters and parameters
// passed otherwise than as direct positional inputs do not count.
TEST(CompiledSplitTest, CountsPerNodeAndSkipsFrozenAndIndirectParameters) {
  const PlanFile file =
      FileOf({25, 25},
             {{.params = {"p0"}, .users = {1}},
              {.params = {"p0", "frozen"}, .users = {}, .output = true, .other_params = {"p1"}}});
  absl::StatusOr<std::vector<CompiledSubgraph>> split =
      DdpOptimizerSplit(file, {.cap = 1000, .first = 1000});
  ExpectSplit(split, {{{0, 1}, 200}});
  EXPECT_THAT((*split)[0].params, ElementsAre(0, 0));
}

// call_module counts the module's parameters the first time the module is met, not its direct
// inputs; call_method on a submodule counts both.
TEST(CompiledSplitTest, AModuleCountsOnce) {
  const PlanFile file = FileOf(
      {25, 25, 25},
      {{.params = {"p2"},
        .users = {1},
        .op = "call_module",
        .module = "m",
        .module_params = {"p0"}},
       {.params = {}, .users = {2}, .op = "call_module", .module = "m", .module_params = {"p0"}},
       {.params = {"p2"},
        .users = {},
        .output = true,
        .op = "call_method",
        .receiver = "call_method",
        .module = "k",
        .module_params = {"p1"}}});
  absl::StatusOr<std::vector<CompiledSubgraph>> split =
      DdpOptimizerSplit(file, {.cap = 1000, .first = 1000});
  ExpectSplit(split, {{{0, 1, 2}, 300}});
  EXPECT_THAT((*split)[0].params, ElementsAre(1, 2, 0));
}

// A method counts its parameters only when the node it is a method of has a name for a target:
// x.mul_(gamma) on a placeholder counts gamma, on a call_function's result (a linear's output,
// timm's in-place LayerScale) not.
TEST(CompiledSplitTest, AMethodOfAFunctionsResultCountsNothing) {
  const PlanFile file = FileOf({25, 25}, {{.params = {"p0"}, .users = {1}},
                                          {.params = {"p1"},
                                           .users = {},
                                           .output = true,
                                           .op = "call_method",
                                           .receiver = "call_function"}});
  absl::StatusOr<std::vector<CompiledSubgraph>> split =
      DdpOptimizerSplit(file, {.cap = 1000, .first = 1000});
  ExpectSplit(split, {{{0, 1}, 100}});
  EXPECT_THAT((*split)[0].params, ElementsAre(0));
  PlanFile on_placeholder = file;
  on_placeholder.compiled->nodes[1].receiver = "placeholder";
  ExpectSplit(DdpOptimizerSplit(on_placeholder, {.cap = 1000, .first = 1000}), {{{0, 1}, 200}});
}

TEST(CompiledSplitTest, AFirstCapAboveTheCapIsRefusedAsPyTorchDoes) {
  const PlanFile file = FileOf({25}, Chain(1));
  absl::StatusOr<std::vector<CompiledSubgraph>> split =
      DdpOptimizerSplit(file, {.cap = 100, .first = 200});
  ASSERT_FALSE(split.ok());
  EXPECT_THAT(split.status().message(),
              HasSubstr("DDPOptimizer refuses a first bucket cap (200 bytes) above the bucket "
                        "cap (100 bytes)"));
  PlanFile bare = file;
  bare.compiled.reset();
  EXPECT_THAT(DdpOptimizerSplit(bare, {.cap = 100, .first = 100}).status().message(),
              HasSubstr("no compiled section"));
}

// --- the committed plans, recorded by PyTorch ------------------------------------------------

std::vector<std::string> CompiledPlans() {
  std::vector<std::string> paths;
  for (const auto& entry : std::filesystem::directory_iterator(CompiledPlanPath(""))) {
    if (entry.path().extension() == ".json") paths.push_back(entry.path().string());
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

absl::StatusOr<ModelBuckets> EagerPlans(const PlanFile& file) {
  return PlanFileBucketPlans(
      file, {.bucket_cap_mb = static_cast<double>(file.ddp->bucket_cap_bytes) / (1 << 20),
             .first_bucket_mb = static_cast<double>(file.ddp->first_bucket_bytes) / (1 << 20)});
}

// One committed file: ddpkit's split under PyTorch's caps is the recorded one, subgraph by
// subgraph, and the report says they agree. (A function of its own, so that a failing file does
// not hide the others.)
void ExpectPyTorchsSplit(const std::string& path) {
  SCOPED_TRACE(path);
  absl::StatusOr<PlanFile> file = ReadPlanFile(path);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_TRUE(file->compiled.has_value());
  const CompiledDdpRecord& record = *file->compiled;
  absl::StatusOr<std::vector<CompiledSubgraph>> split = DdpOptimizerSplit(
      *file, {.cap = record.bucket_bytes_cap, .first = record.first_bucket_bytes_cap});
  ASSERT_TRUE(split.ok()) << split.status();
  ASSERT_EQ(split->size(), record.split.size());
  for (size_t s = 0; s < split->size(); ++s) {
    SCOPED_TRACE(StrCat("submod_", s));
    EXPECT_EQ((*split)[s].nodes, record.split[s].nodes);
    EXPECT_EQ((*split)[s].params, record.split[s].params);
    EXPECT_EQ((*split)[s].bytes, record.split[s].bytes);
    EXPECT_EQ((*split)[s].nodes_added_past_cap, record.split[s].nodes_added_past_cap);
  }
  absl::StatusOr<ModelBuckets> eager = EagerPlans(*file);
  ASSERT_TRUE(eager.ok()) << eager.status();
  absl::StatusOr<CompiledSplit> report = CompiledSplitReport(*file, *eager);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->compared());
  EXPECT_TRUE(report->agrees()) << report->first_difference();
}

TEST(CompiledSplitTest, EveryCommittedSplitIsPyTorchs) {
  const std::vector<std::string> paths = CompiledPlans();
  EXPECT_GE(paths.size(), 8u);
  for (const std::string& path : paths) ExpectPyTorchsSplit(path);
}

// The in-place LayerScale toy at small caps: PyTorch grew a bucket past its cap for an output,
// so the grow rule is exercised by a recorded split (the rule's mutation check fails here).
TEST(CompiledSplitTest, TheLayerScaleToyGrowsABucketPastItsCap) {
  absl::StatusOr<PlanFile> file = ReadPlanFile(CompiledPlanPath("layer_scale_toy.json"));
  ASSERT_TRUE(file.ok()) << file.status();
  int grown = 0;
  for (const CompiledSubgraph& s : file->compiled->split) grown += s.nodes_added_past_cap > 0;
  EXPECT_GE(grown, 1);
}

// GPT-2's lm_head reuses the token embedding: DDPOptimizer counts it at both nodes, and its
// gradient is complete only after the embedding's subgraph, the last backward runs.
TEST(CompiledSplitTest, GptCountsItsTiedEmbeddingTwice) {
  absl::StatusOr<PlanFile> file = ReadPlanFile(CompiledPlanPath("gpt2_124m_cap25.json"));
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<ModelBuckets> eager = EagerPlans(*file);
  ASSERT_TRUE(eager.ok()) << eager.status();
  absl::StatusOr<CompiledSplit> report = CompiledSplitReport(*file, *eager);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_THAT(report->counted_more_than_once(), ElementsAre("transformer.wte.weight"));
  EXPECT_THAT(report->subgraphs(0).completes_params(), ::testing::Contains(0));  // wte is DDP's 0
}

// The two plans side by side: each parameter DDP reduces once, in eager's order; each eager
// bucket ready after exactly one subgraph.
TEST(CompiledSplitTest, SideBySideCoversEveryParameterAndBucketOnce) {
  absl::StatusOr<PlanFile> file = ReadPlanFile(CompiledPlanPath("resnet18_cap2.json"));
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<ModelBuckets> eager = EagerPlans(*file);
  ASSERT_TRUE(eager.ok()) << eager.status();
  absl::StatusOr<CompiledSplit> report = CompiledSplitReport(*file, *eager);
  ASSERT_TRUE(report.ok()) << report.status();
  std::vector<int> walked, in_eager_order;
  for (const SideBySideRun& run : report->side_by_side()) {
    walked.insert(walked.end(), run.param_indices().begin(), run.param_indices().end());
    EXPECT_GE(run.subgraph(), 0);
  }
  for (const reducer::BucketInfo& b : eager->rebuilt_buckets()) {
    in_eager_order.insert(in_eager_order.end(), b.param_indices().begin(), b.param_indices().end());
  }
  EXPECT_EQ(walked, in_eager_order);
  std::vector<int> ready;
  for (const CompiledSubgraphInfo& s : report->subgraphs()) {
    ready.insert(ready.end(), s.eager_buckets_ready().begin(), s.eager_buckets_ready().end());
  }
  std::sort(ready.begin(), ready.end());
  std::vector<int> all(static_cast<size_t>(eager->rebuilt_buckets_size()));
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(ready, all);
}

// Other caps than PyTorch's give ddpkit's split, not compared; a changed record is caught at
// its first difference.
TEST(CompiledSplitTest, ComparesOnlyLikeForLikeAndNamesTheFirstDifference) {
  absl::StatusOr<PlanFile> file = ReadPlanFile(CompiledPlanPath("resnet18_cap25.json"));
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<ModelBuckets> eager = EagerPlans(*file);
  ASSERT_TRUE(eager.ok()) << eager.status();
  absl::StatusOr<CompiledSplit> other =
      CompiledSplitReport(*file, *eager, CompiledCaps{.cap = 2 << 20, .first = 1 << 20});
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_FALSE(other->compared());
  EXPECT_THAT(other->not_compared(), HasSubstr("other caps"));
  EXPECT_GT(static_cast<size_t>(other->subgraphs_size()), file->compiled->split.size());
  file->compiled->split[0].bytes += 4;
  absl::StatusOr<CompiledSplit> changed = CompiledSplitReport(*file, *eager);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(changed->agrees());
  EXPECT_THAT(changed->first_difference(), HasSubstr("submod_0: ddpkit's holds"));
}

// --- the reader ----------------------------------------------------------------------------

TEST(CompiledSplitTest, MalformedCompiledSectionsNameTheField) {
  const std::string head = R"({"format": "ddpkit-plan/1", "model": "m", "parameters": [
      {"name": "w", "shape": [2], "dtype": "float32", "requires_grad": true}],
      "compiled": {"torch_version": "2.15.0", "optimize_ddp": "ddp_optimizer",
      "backend": "aot_eager", "bucket_cap_mb": 25, "bucket_bytes_cap": 26214400,
      "first_bucket_bytes_cap": 1048576, )";
  const std::string node0 =
      R"({"name": "a", "op": "call_function", "target": "f", "params": ["w"], "users": [1],
      "output": false})";
  const std::string node1 =
      R"({"name": "b", "op": "call_function", "target": "g", "params": [], "users": [],
      "output": true})";
  const std::string nodes = R"("nodes": [)" + node0 + ", " + node1 + "]";
  const std::string sub = R"(, "params": ["w"], "bytes": 8, "nodes_added_past_cap": 0})";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {head + nodes + R"(, "split": [{"nodes": [0, 1])" + sub + "]}}", ""},  // valid
      {head + R"("nodes": [], "split": []}})", "compiled.nodes: expected at least one node"},
      {head + nodes + "}}", "compiled.split: missing"},
      {head + nodes + R"(, "split": [{"nodes": [0, 1], "params": ["w"], "bytes": 8}]}})",
       "compiled.split[0].nodes_added_past_cap: missing"},
      {head + R"("nodes": [)" + node0 + "], " + R"("split": []}})",
       "compiled.nodes[0].users[0]: expected no entry: no node comes after node 0, got 1"},
      {head + R"("nodes": [{"name": "a", "op": "call_function", "target": "f", "params": ["v"],
       "users": [], "output": true}], "split": []}})",
       R"(compiled.nodes[0].params[0]: expected the name of a parameter in `parameters`, got "v")"},
      {head + R"("nodes": [{"name": "a", "op": "placeholder", "target": "f", "params": [],
       "users": [], "output": true}], "split": []}})",
       "compiled.nodes[0].op: expected call_function, call_method, call_module or get_attr"},
      {head + R"("nodes": [)" + node1 + ", " + node0 + "], " + R"("split": []}})",
       "compiled.nodes[1].users[0]: expected no entry: no node comes after node 1, got 1"},
      {head + nodes + R"(, "split": [{"nodes": [0])" + sub + "]}}",
       "compiled.split: expected each node in one subgraph; node 1 is in none"},
      {head + nodes + R"(, "split": [{"nodes": [0, 1])" + sub + R"(, {"nodes": [1])" + sub + "]}}",
       "compiled.split: expected each node in one subgraph; node 1 is in subgraphs 0 and 1"},
      {head + nodes + R"(, "split": [{"nodes": [1, 0])" + sub + "]}}",
       "compiled.split[0].nodes[1]: expected no entry after node 1, the last, got 0"},
      {head + nodes + R"(, "split": [{"nodes": [])" + sub + "]}}",
       "compiled.split[0].nodes: expected at least one node"},
      {head + nodes + R"(, "split": [{"nodes": [0, 1], "params": [], "bytes": -1,
       "nodes_added_past_cap": 0}]}})",
       "compiled.split[0].bytes: expected an integer >= 0, got -1"},
      {R"({"format": "ddpkit-plan/1", "model": "m", "parameters": [
       {"name": "w", "shape": [2], "dtype": "float32", "requires_grad": true}],
       "compiled": {"torch_version": "2.15.0", "optimize_ddp": "python_reducer"}})",
       R"(compiled.optimize_ddp: expected "ddp_optimizer" (the one mode a plan file records))"},
      {R"({"format": "ddpkit-plan/1", "model": "m", "parameters": [
       {"name": "w", "shape": [2], "dtype": "float32", "requires_grad": true}],
       "compiled": {"torch_version": "2.15.0", "optimize_ddp": "ddp_optimizer",
       "backend": "aot_eager", "bucket_bytes_cap": 0}})",
       "compiled.bucket_bytes_cap: expected an integer >= 1, got 0"},
      {R"({"format": "ddpkit-plan/1", "model": "m", "parameters": [
       {"name": "w", "shape": [2], "dtype": "float32", "requires_grad": true}],
       "compiled": []})",
       "compiled: expected an object, got []"},
  };
  for (const auto& [text, message] : cases) {
    absl::StatusOr<PlanFile> file = ParsePlanFile(text, "f.json");
    if (message.empty()) {
      ASSERT_TRUE(file.ok()) << file.status();
      ASSERT_TRUE(file->compiled.has_value());
      EXPECT_THAT(file->compiled->nodes[0].users, ElementsAre(1));
      continue;
    }
    ASSERT_FALSE(file.ok()) << text;
    EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(file.status().message(), HasSubstr(message)) << text;
    EXPECT_TRUE(absl::StartsWith(file.status().message(), "f.json: ")) << file.status().message();
  }
}

}  // namespace
}  // namespace ddpkit::jobs
