// Traces of real runs: what the timeline must show (every hook once per synced iteration, each
// bucket's allreduce after its last hook), and `trace stats` against DDP's own logging data.
#include <unistd.h>

#include <filesystem>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "autograd/base/file_util.h"
#include "gtest/gtest.h"
#include "tools/jobs/train/trainer.h"
#include "tools/trace/merge.h"
#include "tools/trace/parse_trace.h"
#include "tools/trace/stats.h"
#include "tools/trace/timeline.h"

namespace ddpkit::jobs::trace_test {
namespace {

std::string TempPath(const std::string& name) {
  return testing::TempDir() + "/ddpkit_trace_" + std::to_string(::getpid()) + "_" + name;
}

// A model with several buckets after the rebuild (small caps), on two ranks.
TrainConfig TracedTrain(const std::string& path) {
  TrainConfig config;
  config.model = "mlp:16,64,64,64,4";
  config.world.world_size = 2;
  config.batch_size = 8;
  config.steps = 5;
  config.ddp = {.pytorch_version = {1, 13}, .bucket_cap_mb = 0.02, .first_bucket_mb = 0.005};
  config.trace_path = path;
  return config;
}

TEST(TraceTest, EveryHookOncePerSyncedIterationAndEachBucketAfterItsLastHook) {
  const std::string path = TempPath("hooks.json");
  absl::StatusOr<TrainReport> report = Train(TracedTrain(path));
  ASSERT_TRUE(report.ok()) << report.status();
  absl::StatusOr<trace::TraceView> view = trace::ReadTraceFile(path);
  ASSERT_TRUE(view.ok()) << view.status();
  ASSERT_EQ(view->ranks.size(), 2u);
  EXPECT_EQ(view->job, "train");
  const int params = report->parameter_names_size();
  for (const trace::RankView& rank : view->ranks) {
    for (int iteration = 0; iteration < 5; ++iteration) {
      SCOPED_TRACE("rank " + std::to_string(rank.rank) + ", iteration " +
                   std::to_string(iteration));
      std::map<int, int> fired;         // parameter -> times
      std::map<int, double> last_hook;  // bucket -> its last hook
      for (const trace::TraceItem& h : rank.hooks) {
        if (h.iteration != iteration) continue;
        ++fired[h.param];
        last_hook[h.bucket] = std::max(last_hook[h.bucket], h.start_us);
      }
      EXPECT_EQ(static_cast<int>(fired.size()), params);
      for (const auto& [param, times] : fired) EXPECT_EQ(times, 1) << "parameter " << param;
      std::set<int> reduced;
      for (const trace::TraceItem& c : rank.collectives) {
        if (c.iteration != iteration || c.purpose != "bucket") continue;
        reduced.insert(c.bucket);
        ASSERT_TRUE(last_hook.count(c.bucket)) << "bucket " << c.bucket << " had no hook";
        EXPECT_GE(c.start_us, last_hook[c.bucket]) << "bucket " << c.bucket;
      }
      EXPECT_EQ(reduced.size(), last_hook.size());
      if (iteration > 0) {
        EXPECT_GT(reduced.size(), 1u);  // the rebuilt plan has several buckets
      }
    }
  }
  std::filesystem::remove(path);
}

// Each bucket of a synced iteration: ready, then launched by the reducer, then queued on the
// process group; its result reduced only after its allreduce ended. One of each per bucket.
TEST(TraceTest, EachBucketIsReadyLaunchedQueuedThenReduced) {
  const std::string path = TempPath("bucket_order.json");
  ASSERT_TRUE(Train(TracedTrain(path)).ok());
  absl::StatusOr<trace::TraceView> view = trace::ReadTraceFile(path);
  ASSERT_TRUE(view.ok()) << view.status();
  for (const trace::RankView& rank : view->ranks) {
    std::map<std::pair<int, int>, std::map<std::string, std::vector<double>>> at;
    for (const trace::TraceItem& i : rank.instants) {
      if (!i.event.empty()) at[{i.iteration, i.bucket}][i.event].push_back(i.start_us);
    }
    int checked = 0;
    for (const trace::TraceItem& c : rank.collectives) {
      if (c.purpose != "bucket") continue;
      SCOPED_TRACE("rank " + std::to_string(rank.rank) + ", " + c.name + ", iteration " +
                   std::to_string(c.iteration));
      auto& events = at[{c.iteration, c.bucket}];
      ASSERT_EQ(events["ready"].size(), 1u);
      ASSERT_EQ(events["launched"].size(), 1u);
      ASSERT_EQ(events["reduced"].size(), 1u);
      EXPECT_LE(events["ready"][0], events["launched"][0]);
      EXPECT_LE(events["launched"][0], c.queued_us);
      EXPECT_GE(events["reduced"][0], c.end_us);
      ++checked;
    }
    EXPECT_GT(checked, 5);
  }
  std::filesystem::remove(path);
}

// The trace's DDP figures (first bucket launched -> last reduced, its overlap with backward,
// finalize) against the reducer's own averages. The trace records the very instants the reducer
// times them by, so they agree to the microsecond; a trace that dropped, misplaced or re-timed
// one of them would not. (Collectives' own spans are stamped by the communication thread, a
// preemption away from the reducer's stamps on a loaded machine: they are not used here.)
TEST(TraceTest, StatsAgreeWithTheLoggingData) {
  const std::string path = TempPath("stats.json");
  TrainConfig config = TracedTrain(path);
  config.steps = 8;
  absl::StatusOr<TrainReport> report = Train(config);
  ASSERT_TRUE(report.ok()) << report.status();
  absl::StatusOr<trace::TraceView> view = trace::ReadTraceFile(path);
  ASSERT_TRUE(view.ok()) << view.status();
  const trace::TraceStatsReport stats = trace::ComputeTraceStats(*view);
  const trace::RankTotals& rank0 = stats.ranks(0);
  const reducer::DdpLoggingData& log = report->ddp();
  ASSERT_EQ(rank0.iterations(), log.num_timed_iterations());
  auto near = [](double trace_us, int64_t log_ns) {
    const double log_us = static_cast<double>(log_ns) / 1000;
    return std::abs(trace_us - log_us) <= 1.0;
  };
  EXPECT_TRUE(near(rank0.avg_ddp_comm_us(), log.avg_backward_comm_time()))
      << rank0.avg_ddp_comm_us() << " us vs " << log.avg_backward_comm_time() << " ns";
  EXPECT_TRUE(near(rank0.avg_ddp_overlap_us(), log.avg_backward_compute_comm_overlap_time()))
      << rank0.avg_ddp_overlap_us() << " us vs " << log.avg_backward_compute_comm_overlap_time();
  EXPECT_TRUE(near(rank0.avg_ddp_exposed_us(), log.avg_backward_exposed_comm_time()))
      << rank0.avg_ddp_exposed_us() << " us vs " << log.avg_backward_exposed_comm_time();
  // HTA's figures are consistent with each other.
  for (const trace::IterationStats& s : stats.iterations()) {
    EXPECT_NEAR(s.exposed_us() + s.overlap_us(), s.comm_us(), 1e-6);
    EXPECT_LE(s.overlap_us(), std::min(s.comm_us(), s.compute_us()) + 1e-6);
    EXPECT_GE(s.overlap_pct(), 0);
    EXPECT_LE(s.overlap_pct(), 100 + 1e-9);
  }
  std::filesystem::remove(path);
}

// --trace on the zoo's two families: every gradient's hook is named by its PyTorch name (the
// GPT's tied wte once), and `trace stats` counts the rebuilt plan's buckets in each iteration
// after the rebuild (a ResNet's BatchNorm buffers are broadcast, not bucketed).
TEST(TraceTest, ResNetAndGptTracesNameEveryGradientAndCountTheBuckets) {
  for (const char* model : {"resnet:1,1,1,1,width=4,in=1,classes=3,stem=small",
                            "gpt:layers=2,heads=2,dim=16,ctx=8,vocab=16"}) {
    SCOPED_TRACE(model);
    const std::string path = TempPath("zoo.json");
    TrainConfig config = TracedTrain(path);
    config.model = model;
    config.batch_size = 4;
    config.steps = 3;
    config.ddp = {.pytorch_version = {1, 13}, .bucket_cap_mb = 0.004, .first_bucket_mb = 0.001};
    absl::StatusOr<TrainReport> report = Train(config);
    ASSERT_TRUE(report.ok()) << report.status();
    absl::StatusOr<trace::TraceView> view = trace::ReadTraceFile(path);
    ASSERT_TRUE(view.ok()) << view.status();
    const std::set<std::string> names(report->parameter_names().begin(),
                                      report->parameter_names().end());
    const int buckets = report->ddp().rebuilt_buckets_size();
    EXPECT_GT(buckets, 2);
    for (const trace::RankView& rank : view->ranks) {
      std::multiset<std::string> hooked;
      for (const trace::TraceItem& h : rank.hooks) {
        if (h.iteration == 2) hooked.insert(h.name);
      }
      EXPECT_EQ(std::set<std::string>(hooked.begin(), hooked.end()), names);
      EXPECT_EQ(hooked.size(), names.size());  // each hook once
    }
    const trace::TraceStatsReport stats = trace::ComputeTraceStats(*view);
    ASSERT_EQ(stats.iterations_size(), 2 * config.steps);  // both ranks
    for (const trace::IterationStats& s : stats.iterations()) {
      if (s.iteration() > 0) {
        EXPECT_EQ(s.buckets_size(), buckets) << "iteration " << s.iteration();
      }
    }
    std::filesystem::remove(path);
  }
}

TEST(TraceTest, AccumulationMarksNoSyncAndNamesMicroBatches) {
  const std::string path = TempPath("accum.json");
  TrainConfig config = TracedTrain(path);
  config.grad_accum = 3;
  config.steps = 2;
  ASSERT_TRUE(Train(config).ok());
  absl::StatusOr<trace::TraceView> view = trace::ReadTraceFile(path);
  ASSERT_TRUE(view.ok()) << view.status();
  const trace::RankView& rank = view->ranks[0];
  int no_sync = 0, forwards = 0, finalizes = 0;
  for (const trace::TraceItem& i : rank.instants) no_sync += i.name == "no_sync";
  for (const trace::TraceItem& p : rank.phases) {
    forwards += p.name == "forward";
    finalizes += p.name == "finalize";
    if (p.name == "forward") {
      EXPECT_GE(p.micro_batch, 0);
    }
  }
  EXPECT_EQ(no_sync, 2 * 2);  // two of three micro-batches per step
  EXPECT_EQ(forwards, 2 * 3);
  EXPECT_EQ(finalizes, 2);  // one synced backward per step
  std::filesystem::remove(path);
}

TEST(TraceTest, TimelinePictureHasEveryRankAndItsBuckets) {
  const std::string path = TempPath("timeline.json");
  ASSERT_TRUE(Train(TracedTrain(path)).ok());
  absl::StatusOr<trace::TraceView> view = trace::ReadTraceFile(path);
  ASSERT_TRUE(view.ok()) << view.status();
  absl::StatusOr<std::string> svg =
      trace::TimelineSvg(*view, {.first_iteration = 1, .end_iteration = 3});
  ASSERT_TRUE(svg.ok()) << svg.status();
  EXPECT_NE(svg->find("<svg"), std::string::npos);
  EXPECT_NE(svg->find(">rank 1<"), std::string::npos);
  EXPECT_NE(svg->find("allreduce bucket 1"), std::string::npos);  // a tooltip
  EXPECT_NE(svg->find("iteration 2"), std::string::npos);
  EXPECT_EQ(svg->find("iteration 3<"), std::string::npos);
  EXPECT_FALSE(trace::TimelineSvg(*view, {.first_iteration = 50, .end_iteration = 52}).ok());
  std::filesystem::remove(path);
}

// Past the palette's twelve bucket colours the legend names every bucket of a colour, so no
// colour means two things unsaid; a long backend description shrinks the title to fit.
TEST(TraceTest, TimelineLegendNamesBucketsThatShareAColour) {
  trace::TraceView view{.job = "simulate", .backend = std::string(150, 'x'), .world_size = 1};
  trace::RankView rank;
  rank.phases.push_back({.name = "forward", .start_us = 0, .end_us = 100, .iteration = 0});
  rank.phases.push_back({.name = "backward", .start_us = 100, .end_us = 300, .iteration = 0});
  for (int b = 0; b < 14; ++b) {
    rank.collectives.push_back({.name = "allreduce",
                                .start_us = 150.0 + 10 * b,
                                .end_us = 155.0 + 10 * b,
                                .iteration = 0,
                                .bucket = b,
                                .purpose = "bucket"});
  }
  view.ranks.push_back(rank);
  absl::StatusOr<std::string> svg = trace::TimelineSvg(view, {.first_iteration = 0});
  ASSERT_TRUE(svg.ok()) << svg.status();
  EXPECT_NE(svg->find("buckets 0, 12: hooks and allreduces"), std::string::npos);
  EXPECT_NE(svg->find("buckets 1, 13: hooks and allreduces"), std::string::npos);
  EXPECT_NE(svg->find("bucket 11: its hooks"), std::string::npos);
  EXPECT_EQ(svg->find("bucket 12: its hooks"), std::string::npos);
  EXPECT_EQ(svg->find(R"(font-size="14")"), std::string::npos) << "the long title kept 14 px";
}

// Collectives that run at once take a row each under the compute lane, and the rank's lanes
// grow by that row: the next rank starts lower.
TEST(TraceTest, TimelineGivesCollectivesAtOnceARowEach) {
  auto picture = [](bool at_once) {
    trace::TraceView view;
    view.job = "test", view.backend = "threads", view.world_size = 2;
    for (int r = 0; r < 2; ++r) {
      trace::RankView rank;
      rank.rank = r;
      rank.phases.push_back({.name = "forward", .start_us = 0, .end_us = 100, .iteration = 0});
      rank.phases.push_back({.name = "backward", .start_us = 100, .end_us = 300, .iteration = 0});
      rank.collectives.push_back({.name = "allreduce a",
                                  .start_us = 150,
                                  .end_us = 250,
                                  .iteration = 0,
                                  .bucket = 0,
                                  .purpose = "bucket"});
      rank.collectives.push_back({.name = "allreduce b",
                                  .start_us = at_once ? 200.0 : 250.0,
                                  .end_us = 350,
                                  .iteration = 0,
                                  .bucket = 1,
                                  .purpose = "bucket"});
      view.ranks.push_back(rank);
    }
    absl::StatusOr<std::string> svg = trace::TimelineSvg(view, {.first_iteration = 0});
    EXPECT_TRUE(svg.ok()) << svg.status();
    return svg.value_or("");
  };
  // The y of the text element that reads `label` (the last one when several do).
  auto y_of = [](const std::string& svg, const std::string& label) {
    const size_t at = svg.rfind(">" + label + "<");
    if (at == std::string::npos) return -1.0;
    const size_t y = svg.rfind(" y=\"", at);
    return std::stod(svg.substr(y + 4));
  };
  const std::string in_turn = picture(false), at_once = picture(true);
  EXPECT_EQ(in_turn.find(">comm 2<"), std::string::npos) << "back to back fit one row";
  ASSERT_NE(at_once.find(">comm 2<"), std::string::npos);
  EXPECT_EQ(at_once.find(">comm 3<"), std::string::npos);
  EXPECT_GT(y_of(at_once, "comm 2"), y_of(at_once, "comm 1"));
  EXPECT_GT(y_of(at_once, "rank 1"), y_of(in_turn, "rank 1")) << "rank 1's lanes moved down";
}

TEST(TraceTest, BadFilesAreNamed) {
  const std::string path = TempPath("bad.json");
  ASSERT_TRUE(WriteFileAtomically(path, "{\"traceEvents\": []}").ok());
  absl::StatusOr<trace::TraceView> view = trace::ReadTraceFile(path);
  ASSERT_FALSE(view.ok());
  EXPECT_NE(view.status().message().find(path + ": not a ddpkit trace"), std::string::npos)
      << view.status();
  ASSERT_TRUE(WriteFileAtomically(path, "not json").ok());
  EXPECT_FALSE(trace::ReadTraceFile(path).ok());
  EXPECT_EQ(trace::ReadTraceFile(path + ".missing").status().code(), absl::StatusCode::kNotFound);
  std::filesystem::remove(path);
}

// Events no --trace run writes, which the readers after the parser would trip on, are refused
// naming the event.
TEST(TraceTest, EventsNoRunWritesAreRefusedNamingTheEvent) {
  const auto parse = [](const std::string& event) {
    const nlohmann::json trace = nlohmann::json::parse(
        R"({"otherData": {"ddpkit": {"world_size": 2}}, "traceEvents": [)" + event + "]}");
    return trace::ParseTrace(trace, "t.json");
  };
  EXPECT_TRUE(parse(R"({"cat": "phase", "pid": 1, "name": "backward", "ts": 5, "dur": 2})").ok());
  const std::pair<std::string, std::string> bad[] = {
      {R"({"cat": "phase", "pid": 1, "name": "backward", "ts": 5, "dur": -2})",
       R"(t.json: event 0 ("backward") has a negative duration)"},
      {R"({"cat": "phase", "pid": 2, "name": "forward", "ts": 5, "dur": 2})",
       R"(t.json: event 0 ("forward") is on rank 2, outside the job's world size 2)"},
      {R"({"cat": "hook", "pid": 0, "name": "a\nb", "ts": 2e15})",
       R"(t.json: event 0 ("a\nb") has a time past 10^15 us, 2e+15)"},
      // nlohmann reads this as a double, which get<int>() cast out of range (a fuzzer's find).
      {R"({"cat": "hook", "pid": 0, "args": {"index": 34444444444444444444}})",
       R"(t.json: malformed event 0: "index" is 3.44)"},
  };
  for (const auto& [event, message] : bad) {
    absl::StatusOr<trace::TraceView> view = parse(event);
    ASSERT_FALSE(view.ok()) << event;
    EXPECT_TRUE(absl::StartsWith(view.status().message(), message)) << view.status();
  }
}

TEST(IntervalsTest, UnionAndOverlap) {
  const trace::Intervals merged = trace::MergeIntervals({{5, 7}, {0, 2}, {1, 3}, {6, 9}, {4, 4}});
  EXPECT_EQ(merged, (trace::Intervals{{0, 3}, {5, 9}}));
  EXPECT_DOUBLE_EQ(trace::TotalLength(merged), 7);
  EXPECT_DOUBLE_EQ(trace::OverlapLength(merged, trace::MergeIntervals({{2, 6}, {8, 20}})),
                   1 + 1 + 1);
  EXPECT_DOUBLE_EQ(trace::OverlapLength(merged, {}), 0);
}

// Files that are not a job's rank traces are refused naming the file, never thrown past.
TEST(TraceMergeTest, FilesThatDoNotBelongAreRefusedNamingThem) {
  const std::string dir = ::testing::TempDir() + "/merge_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text) {
    const std::string path = dir + "/" + name;
    EXPECT_TRUE(WriteFileAtomically(path, text).ok());
    return path;
  };
  const std::string rank0 = write(
      "r0.json", R"({"traceEvents": [], "otherData": {"ddpkit": {"job_id": "a", "world_size": 2,)"
                 R"( "ranks": [{"rank": 0}]}}})");
  const std::string other_job = write(
      "r1.json", R"({"traceEvents": [], "otherData": {"ddpkit": {"job_id": "b", "world_size": 2,)"
                 R"( "ranks": [{"rank": 1}]}}})");
  const std::string no_ranks =
      write("bad.json", R"({"traceEvents": [], "otherData": {"ddpkit": {"job_id": "a"}}})");
  const std::string out = dir + "/merged.json";
  absl::StatusOr<int> merged = trace::MergeTraceFiles({rank0, other_job}, out);
  ASSERT_FALSE(merged.ok());
  EXPECT_TRUE(absl::StrContains(merged.status().message(), other_job + " belongs to another job"))
      << merged.status();
  merged = trace::MergeTraceFiles({rank0, no_ranks}, out);
  ASSERT_FALSE(merged.ok());
  EXPECT_TRUE(absl::StrContains(merged.status().message(), no_ranks + ": not a ddpkit rank trace"))
      << merged.status();
  merged = trace::MergeTraceFiles({no_ranks}, out);
  ASSERT_FALSE(merged.ok());
  EXPECT_TRUE(absl::StrContains(merged.status().message(), "not a ddpkit rank trace"))
      << merged.status();
  merged = trace::MergeTraceFiles({rank0}, out);
  ASSERT_FALSE(merged.ok());
  EXPECT_TRUE(absl::StrContains(merged.status().message(), "no file holds rank 1"))
      << merged.status();
}

}  // namespace
}  // namespace ddpkit::jobs::trace_test
