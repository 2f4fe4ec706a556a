// Several runs' traces read as one view (runs.h): each later run after the ones before it, on
// the clock and in iteration numbers, and refused, naming what differs, when the runs are not
// of one job at different bucket caps.
#include "tools/trace/runs.h"

#include <limits>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace ddpkit::trace {
namespace {

// A run of `iterations` iterations on ranks 0 and 1, each a forward from t0 + 100·i and an
// allreduce (sequence number i) queued 5 µs in, with the given bucket cap and
// find_unused_parameters in its otherData.
TraceView ARun(double t0, int iterations, int64_t cap, bool find_unused = false) {
  TraceView v;
  v.job = "train", v.backend = "gloo", v.world_size = 2;
  for (int r = 0; r < 2; ++r) {
    RankView rank;
    rank.rank = r;
    for (int i = 0; i < iterations; ++i) {
      rank.phases.push_back({.name = "forward",
                             .start_us = t0 + 100 * i,
                             .end_us = t0 + 100 * i + 50,
                             .iteration = i});
      rank.collectives.push_back({.name = "allreduce",
                                  .start_us = t0 + 100 * i + 10,
                                  .end_us = t0 + 100 * i + 40,
                                  .iteration = i,
                                  .seq = i,
                                  .queued_us = t0 + 100 * i + 5});
    }
    rank.instants.push_back(
        {.name = "rebuild", .start_us = t0 + 100, .end_us = t0 + 100, .iteration = 1});
    v.ranks.push_back(rank);
  }
  nlohmann::json options = {
      {"bucket_cap_bytes", cap}, {"find_unused_parameters", find_unused}, {"static_graph", false}};
  v.other_data = {{"ranks", {{{"parameters", {"0.weight", "0.bias"}}, {"ddp_options", options}}}}};
  return v;
}

TEST(RunsTest, ALaterRunFollowsTheOnesBeforeItOnTheClockAndInIterations) {
  absl::StatusOr<TraceView> v =
      RunsOneAfterAnother({ARun(0, 3, 25 << 20), ARun(0, 2, 1 << 20)}, {"a.json", "b.json"});
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(v->ranks.size(), 2u);
  for (const RankView& r : v->ranks) {
    ASSERT_EQ(r.phases.size(), 5u);
    // a's last item ends at 250: b starts a second later, its iterations numbered from 3.
    EXPECT_DOUBLE_EQ(r.phases[3].start_us, 250 + 1e6);
    EXPECT_EQ(r.phases[3].iteration, 3);
    EXPECT_EQ(r.phases[4].iteration, 4);
    ASSERT_EQ(r.instants.size(), 2u);
    EXPECT_EQ(r.instants[1].iteration, 4);  // b's rebuild: its iteration 0 is still the one before
    // b's collectives: queued on the moved clock, numbered after a's.
    ASSERT_EQ(r.collectives.size(), 5u);
    EXPECT_DOUBLE_EQ(r.collectives[3].queued_us, 5 + 250 + 1e6);
    EXPECT_EQ(r.collectives[3].seq, 3);
    EXPECT_EQ(r.collectives[4].seq, 4);
  }
  EXPECT_EQ(v->other_data["ranks"][0]["ddp_options"]["bucket_cap_bytes"], 25 << 20);  // a's
}

TEST(RunsTest, RunsThatDifferInMoreThanTheirBucketCapAreRefusedNamingWhat) {
  absl::StatusOr<TraceView> v = RunsOneAfterAnother(
      {ARun(0, 3, 25 << 20), ARun(0, 3, 25 << 20, /*find_unused=*/true)}, {"a.json", "b.json"});
  ASSERT_FALSE(v.ok());
  EXPECT_TRUE(absl::StrContains(v.status().message(),
                                "b.json: find_unused_parameters true "
                                "against false in a.json"))
      << v.status();

  TraceView three = ARun(0, 3, 1 << 20);
  three.world_size = 3;
  v = RunsOneAfterAnother({ARun(0, 3, 25 << 20), three}, {"a.json", "c.json"});
  ASSERT_FALSE(v.ok());
  EXPECT_TRUE(absl::StrContains(v.status().message(), "c.json: world size 3 against 2"))
      << v.status();

  TraceView rank1 = ARun(0, 3, 25 << 20);  // one rank's file of a multi-process run
  rank1.ranks.erase(rank1.ranks.begin());
  v = RunsOneAfterAnother({ARun(0, 3, 25 << 20), rank1}, {"a.json", "a.rank1.json"});
  ASSERT_FALSE(v.ok());
  EXPECT_TRUE(absl::StrContains(v.status().message(), "ddpkit trace merge")) << v.status();
}

// Numbering a run after the ones before it must not overflow: refused, naming the run.
TEST(RunsTest, IterationNumbersPastWhatATraceHoldsAreRefused) {
  TraceView a = ARun(0, 2, 25 << 20);
  for (RankView& r : a.ranks) r.phases.back().iteration = std::numeric_limits<int>::max() - 2;
  absl::StatusOr<TraceView> v = RunsOneAfterAnother({a, ARun(0, 3, 1 << 20)}, {"a.json", "b.json"});
  ASSERT_FALSE(v.ok());
  EXPECT_TRUE(absl::StartsWith(v.status().message(), "b.json: after the runs before it"))
      << v.status();
}

}  // namespace
}  // namespace ddpkit::trace
