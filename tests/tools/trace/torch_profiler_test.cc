// PyTorch profiler traces (tests/testdata/torch_traces, recorded by
// tools/scripts/golden/make_torch_profiler_traces.py with PyTorch 1.13 on gloo): the figures
// `trace stats` gives against what the same run's DDP logging data said, the plan hook, and the
// one-line refusals of files that are not such traces.
#include "tools/trace/torch_profiler.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "absl/strings/match.h"
#include "autograd/base/error.h"
#include "autograd/base/file_util.h"
#include "gtest/gtest.h"
#include "tools/trace/read_traces.h"
#include "tools/trace/stats.h"
#include "tools/trace/timeline.h"

namespace ddpkit::trace {
namespace {

using nlohmann::json;

const std::string kTraces = std::string(DDPKIT_TESTDATA_DIR) + "/torch_traces";

json Logging(const std::string& world, int rank) {
  absl::StatusOr<std::string> text =
      ReadFileToString(StrCat(kTraces, "/", world, "/ddp_logging.rank", rank, ".json"));
  EXPECT_TRUE(text.ok()) << text.status();
  return json::parse(text.value_or("{}"));
}

const IterationStats* Row(const TraceStatsReport& report, int iteration, int rank) {
  for (const IterationStats& s : report.iterations()) {
    if (s.iteration() == iteration && s.rank() == rank) return &s;
  }
  return nullptr;
}

// Within 10% of PyTorch's figure, or 100 µs.
void ExpectNear(double ours_us, double torch_ns, const std::string& what) {
  const double torch_us = torch_ns / 1000;
  EXPECT_NEAR(ours_us, torch_us, std::max(100.0, 0.1 * torch_us)) << what;
}

// A fixture folder under kTraces and its world size: PyTorch 1.13's legacy traces, and 2.15's
// Kineto traces (torch2/, one world to keep the fixture small).
struct Fixture {
  std::string dir;
  int world;
};

class TorchTraces : public testing::TestWithParam<Fixture> {};

// DDP's per-iteration figures (logged by PyTorch's reducer on the system clock) against
// `trace stats`' ddp_comm, ddp_ovl and ddp_exp from the profiler's events of the same
// iterations, and their averages against the per-rank totals.
TEST_P(TorchTraces, StatsAgreeWithTheRunsOwnLoggingData) {
  const auto& [dir, world] = GetParam();
  absl::StatusOr<TraceView> view = ReadTraces({StrCat(kTraces, "/", dir)}, nullptr);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->world_size, world);
  EXPECT_EQ(view->backend, "gloo");
  ASSERT_EQ(view->ranks.size(), static_cast<size_t>(world));
  const TraceStatsReport report = ComputeTraceStats(*view);
  for (int rank = 0; rank < world; ++rank) {
    const json logging = Logging(dir, rank);
    const json& iterations = logging["recorded_iterations"];
    double comm = 0, overlap = 0;
    for (size_t i = 0; i < iterations.size(); ++i) {
      const json& torch = logging["per_iteration"][i];
      const IterationStats* s = Row(report, iterations[i].get<int>(), rank);
      ASSERT_NE(s, nullptr) << "rank " << rank << " iteration " << iterations[i];
      const std::string what = StrCat(dir, " rank ", rank, " iteration ", iterations[i].dump());
      const double torch_comm = torch["backward_comm_time"].get<double>();
      const double torch_overlap = torch["backward_compute_comm_overlap_time"].get<double>();
      ExpectNear(s->ddp_comm_us(), torch_comm, what + " comm");
      ExpectNear(s->ddp_overlap_us(), torch_overlap, what + " overlap");
      ExpectNear(s->ddp_exposed_us(), torch_comm - torch_overlap, what + " exposed");
      EXPECT_EQ(s->buckets_size(), 3) << what;
      comm += torch_comm / iterations.size(), overlap += torch_overlap / iterations.size();
    }
    const RankTotals& totals = report.ranks(rank);
    EXPECT_EQ(totals.iterations(), static_cast<int>(iterations.size()));
    ExpectNear(totals.avg_ddp_comm_us(), comm, StrCat(dir, " rank ", rank, " average comm"));
    ExpectNear(totals.avg_ddp_overlap_us(), overlap, StrCat(dir, " rank ", rank, " average ovl"));
  }
}

// Each iteration: forward, backward, finalize, optimizer; eight gradients in three buckets, each
// bucket's allreduce after the hooks that filled it; ranks aligned by their collectives' ends.
TEST_P(TorchTraces, PhasesHooksAndBucketsPerIteration) {
  absl::StatusOr<TraceView> view = ReadTraces({StrCat(kTraces, "/", GetParam().dir)}, nullptr);
  ASSERT_TRUE(view.ok()) << view.status();
  for (const RankView& rank : view->ranks) {
    std::map<int, std::vector<std::string>> phases;
    for (const TraceItem& p : rank.phases) phases[p.iteration].push_back(p.name);
    ASSERT_EQ(phases.size(), 3u);
    for (const auto& [iteration, names] : phases) {
      EXPECT_EQ(names, (std::vector<std::string>{"forward", "backward", "finalize", "optimizer"}))
          << "iteration " << iteration;
    }
    EXPECT_EQ(rank.hooks.size(), 24u);  // 8 gradients x 3 iterations
    for (const TraceItem& c : rank.collectives) {
      ASSERT_EQ(c.purpose, "bucket");
      for (const TraceItem& h : rank.hooks) {
        if (h.iteration == c.iteration && h.bucket == c.bucket) {
          EXPECT_LE(h.start_us, c.queued_us);
        }
      }
    }
  }
  // Once the clocks are aligned, a typical collective ends within 0.5 ms on every rank (single
  // ones can be further: a rank preempted before it saw the result, on this loaded machine).
  for (size_t r = 1; r < view->ranks.size(); ++r) {
    const auto& ours = view->ranks[r].collectives;
    const auto& first = view->ranks[0].collectives;
    ASSERT_EQ(ours.size(), first.size());
    std::vector<double> gaps;
    for (size_t i = 0; i < ours.size(); ++i)
      gaps.push_back(std::abs(ours[i].end_us - first[i].end_us));
    std::sort(gaps.begin(), gaps.end());
    EXPECT_LE(gaps[gaps.size() / 2], 500) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, TorchTraces,
                         testing::Values(Fixture{"world2", 2}, Fixture{"world3", 3},
                                         Fixture{"torch2/world2", 2}));

// With the run's plan, the hooks carry the parameters' names in arrival order, the buckets
// their sizes; a timeline picture names them.
TEST(TorchTraceTest, APlanNamesGradientsAndSizesBuckets) {
  absl::StatusOr<TorchPlan> plan = ReadTorchPlan(kTraces + "/world2/ddp_logging.rank0.json");
  ASSERT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<TraceView> view = ReadTraces({kTraces + "/world2"}, &*plan);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_TRUE(view->other_data["warnings"].empty()) << view->other_data.dump();
  const RankView& rank = view->ranks[0];
  std::vector<std::string> arrival;
  for (size_t i = 0; i < 6; ++i) arrival.push_back(rank.hooks[i].name);
  EXPECT_EQ(arrival, (std::vector<std::string>{"6.bias", "6.weight", "4.bias", "4.weight", "2.bias",
                                               "2.weight"}));
  EXPECT_EQ(rank.hooks[0].param, 7);
  for (int b = 0; b < 3; ++b) EXPECT_EQ(rank.collectives[b].bytes, plan->bucket_bytes[b]);
  absl::StatusOr<std::string> svg = TimelineSvg(*view, {.first_iteration = 4, .end_iteration = 6});
  ASSERT_TRUE(svg.ok()) << svg.status();
  EXPECT_TRUE(absl::StrContains(*svg, "hook 4.weight")) << svg->substr(0, 400);
}

// PyTorch's own logging-data dump (strings) is a plan too.
TEST(TorchTraceTest, PlanFromPyTorchsLoggingDataStrings) {
  absl::StatusOr<TorchPlan> plan =
      ParseTorchPlan(json{{"rebuilt_per_bucket_param_indices", "5 4, 3 2 1, 0"},
                          {"rebuilt_bucket_sizes", "40, 1024, 8"}},
                     "ddp.json");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->buckets, (std::vector<std::vector<int>>{{5, 4}, {3, 2, 1}, {0}}));
  EXPECT_EQ(plan->bucket_bytes, (std::vector<int64_t>{40, 1024, 8}));
  EXPECT_FALSE(ParseTorchPlan(json{{"bucket_sizes", {1}}}, "p.json").ok());
  EXPECT_FALSE(ParseTorchPlan(json{{"per_bucket_param_indices", "x"}}, "p.json").ok());
}

// What each refusal says: one line, naming the file.
TEST(TorchTraceTest, RefusesWhatIsNotAPyTorchDdpTrace) {
  const std::string forward =
      R"({"name":"DistributedDataParallel.forward","ph":"X","ts":0,"dur":5})";
  const std::map<std::string, std::string> cases = {
      {"[1, 2", "not JSON"},
      {R"({"foo": 1})", "not a Chrome trace"},
      {R"([{"name":"frame","ph":"X","ts":0,"dur":1}])", "not a PyTorch profiler trace"},
      {R"([{"name":"aten::mm","ph":"X","ts":0,"dur":1}])", "without DistributedDataParallel"},
      {"[" + forward + R"(,{"name":"a","ph":"X","ts":"0","dur":1}])", "no numeric ts/dur"},
      {"[" + forward + R"(,{"name":"a","ph":"X","ts":0,"dur":-1}])", "out of range"},
      {"[" + forward + R"(,{"name":"a","ph":"X","ts":1e300,"dur":1}])", "out of range"},
      {"[" + forward + R"(,{"ph":"X","ts":0,"dur":1}])", "has no name"},
      {"[" + forward + ",7]", "not an object"},
      {R"({"traceEvents":[],"otherData":{"ddpkit":{}}})", "a ddpkit trace among"},
  };
  for (const auto& [text, why] : cases) {
    absl::StatusOr<TraceView> view = ParseTorchTraces({{"r.json", text}}, nullptr);
    ASSERT_FALSE(view.ok()) << text;
    const std::string message(view.status().message());
    EXPECT_TRUE(absl::StrContains(message, "r.json: ")) << message;
    EXPECT_TRUE(absl::StrContains(message, why)) << text << " -> " << message;
    EXPECT_FALSE(absl::StrContains(message, "\n")) << message;
  }
  const std::string ok = "[" + forward + "]";
  absl::StatusOr<TraceView> twice =
      ParseTorchTraces({{"a/rank1.json", ok}, {"b/rank-1.json", ok}}, nullptr);
  ASSERT_FALSE(twice.ok());
  EXPECT_TRUE(absl::StrContains(twice.status().message(), "holds rank 1 again"));
}

// The rank: distributedInfo's, else the file name's, else the file's place.
TEST(TorchTraceTest, RanksFromDistributedInfoOrTheFileName) {
  const std::string events =
      R"([{"name":"DistributedDataParallel.forward","ph":"X","ts":10,"dur":5}])";
  absl::StatusOr<TraceView> view = ParseTorchTraces(
      {{"x/trace_rank_3.json", events},
       {"y.json", R"({"distributedInfo":{"rank":0,"world_size":4,"backend":"nccl"},)"
                  R"("traceEvents":)" +
                      events + "}"},
       {"z.json", events}},
      nullptr);
  ASSERT_TRUE(view.ok()) << view.status();
  ASSERT_EQ(view->ranks.size(), 3u);
  EXPECT_EQ(view->ranks[0].rank, 0);  // y.json
  EXPECT_EQ(view->ranks[1].rank, 2);  // z.json, third
  EXPECT_EQ(view->ranks[2].rank, 3);  // x/trace_rank_3.json
  EXPECT_EQ(view->world_size, 4);
  EXPECT_EQ(view->backend, "nccl");
}

}  // namespace
}  // namespace ddpkit::trace
