// The event model on small cases computed by hand.
#include "tools/jobs/simulate/step_model.h"

#include "gtest/gtest.h"
#include "tests/tools/jobs/simulate/plans.h"
#include "tools/jobs/simulate/simulate.h"

namespace ddpkit::jobs::sim {
namespace {

// Parameters of `numel` float32 elements each, each gradient taking `backward_us`, ready in
// reverse registration order; forward 10 us, optimizer 5 us.
SimModel Model(const std::vector<int64_t>& numels, double backward_us) {
  SimModel m;
  for (size_t i = 0; i < numels.size(); ++i) {
    m.params.push_back({.name = StrCat("p", i), .shape = {numels[i]}, .backward_us = backward_us});
    m.grad_ready_order.insert(m.grad_ready_order.begin(), i);
  }
  m.forward_us = 10, m.optimizer_us = 5;
  return m;
}

// An allreduce of S bytes costs exactly S / 1000 us on two ranks: no latency, a ring factor of
// 2(N-1)/N = 1 and 1 GB/s (1000 bytes per us).
NetworkModel OneGbps() {
  NetworkModel n;
  n.latency_us = 0, n.gbytes_per_s = 1;
  return n;
}

using test_plans::Plan;

TEST(StepModelTest, OneBucketIsAllExposedTail) {
  // Two 1000-element gradients (8000 bytes, 8 us on the wire), 20 us each: backward ends at
  // 10 + 40 = 50, the one bucket runs 50..58, the optimizer 58..63.
  const StepTimeline t = SimulateStep(Model({1000, 1000}, 20), Plan({{1, 0}}), OneGbps(), 2, {});
  EXPECT_DOUBLE_EQ(t.backward_end_us, 50);
  ASSERT_EQ(t.collectives.size(), 1u);
  EXPECT_DOUBLE_EQ(t.collectives[0].start_us, 50);
  EXPECT_DOUBLE_EQ(t.comm_end_us, 58);
  EXPECT_DOUBLE_EQ(t.exposed_us, 8);
  EXPECT_DOUBLE_EQ(t.overlapped_us, 0);
  EXPECT_DOUBLE_EQ(t.step_us, 63);
  EXPECT_DOUBLE_EQ(t.compute_us, 55);
}

TEST(StepModelTest, AnEarlyBucketOverlapsTheRestOfBackward) {
  // p1 ready at 30: its bucket runs 30..34 under backward; p0 ready at 50: 50..54 exposed.
  const StepTimeline t = SimulateStep(Model({1000, 1000}, 20), Plan({{1}, {0}}), OneGbps(), 2, {});
  ASSERT_EQ(t.collectives.size(), 2u);
  EXPECT_DOUBLE_EQ(t.collectives[0].start_us, 30);
  EXPECT_DOUBLE_EQ(t.collectives[0].end_us, 34);
  EXPECT_DOUBLE_EQ(t.collectives[1].start_us, 50);
  EXPECT_DOUBLE_EQ(t.exposed_us, 4);
  EXPECT_DOUBLE_EQ(t.overlapped_us, 4);
  EXPECT_DOUBLE_EQ(t.step_us, 59);
}

TEST(StepModelTest, BucketsLaunchInOrderOnOneStream) {
  // Bucket 0 waits for p0 (ready last, at 50); bucket 1 (p1, ready at 30) may not start before
  // bucket 0 has, and then only when bucket 0 is done: 50..54, 54..58.
  const StepTimeline t = SimulateStep(Model({1000, 1000}, 20), Plan({{0}, {1}}), OneGbps(), 2, {});
  EXPECT_DOUBLE_EQ(t.collectives[1].start_us, 54);
  EXPECT_DOUBLE_EQ(t.exposed_us, 8);
  // A long first bucket delays the next one even when it is ready: 10 000 elements = 40 us.
  const StepTimeline u =
      SimulateStep(Model({1000, 10000, 1000}, 20), Plan({{2}, {1}, {0}}), OneGbps(), 2, {});
  // p2 ready at 30 (4 us), p1 at 50 (40 us: 50..90), p0 at 70 waits until 90: 90..94.
  EXPECT_DOUBLE_EQ(u.collectives[2].start_us, 90);
  EXPECT_DOUBLE_EQ(u.exposed_us, 94 - 70);
}

// Round-robin groups: collective i on stream i mod K. p2 ready at 30 (4 us), p1 at 50 (40 us),
// p0 at 70 (4 us); on one stream p0's waits for p1's until 90 (the test above).
TEST(StepModelTest, RoundRobinGroupsRunCollectivesAtOnceSharingTheLink) {
  const SimModel m = Model({1000, 10000, 1000}, 20);
  const reducer::BucketAssignment plan = Plan({{2}, {1}, {0}});
  // Two groups whose collectives each fill half the link: p0's runs 70..74 beside p1's, both at
  // full speed, and the tail ends with p1's at 90.
  const StepTimeline half =
      SimulateStep(m, plan, OneGbps(), 2, {}, {}, {.groups = 2, .share = 0.5});
  ASSERT_EQ(half.collectives.size(), 3u);
  EXPECT_DOUBLE_EQ(half.collectives[2].start_us, 70);
  EXPECT_DOUBLE_EQ(half.collectives[2].end_us, 74);
  EXPECT_DOUBLE_EQ(half.comm_end_us, 90);
  EXPECT_DOUBLE_EQ(half.exposed_us, 20);
  EXPECT_DOUBLE_EQ(half.comm_us, 4 + 40);  // the time any stream was busy, not the sum
  // Each fills the link alone: from 70 both go at half speed. p0's 4 us end at 78, p1's 20 us
  // left at 70 lose 4 to it and end at 94 — the one stream's end: the groups only split the link.
  const StepTimeline full = SimulateStep(m, plan, OneGbps(), 2, {}, {}, {.groups = 2, .share = 1});
  EXPECT_DOUBLE_EQ(full.collectives[2].start_us, 70);
  EXPECT_DOUBLE_EQ(full.collectives[2].end_us, 78);
  EXPECT_DOUBLE_EQ(full.comm_end_us, 94);
  EXPECT_DOUBLE_EQ(full.comm_us, 4 + 44);
  // One group is the one stream, whatever the share.
  const StepTimeline one = SimulateStep(m, plan, OneGbps(), 2, {}, {}, {.groups = 1, .share = 0.5});
  EXPECT_DOUBLE_EQ(one.collectives[2].start_us, 90);
  EXPECT_DOUBLE_EQ(one.comm_end_us, 94);
}

// A hook chains a bucket's collectives (PowerSGD's Q after its P): on two groups they still run
// one after the other.
TEST(StepModelTest, ABucketsCollectivesRunInTurnOnRoundRobinGroups) {
  SimModel m;
  m.params = {{.name = "w", .shape = {100, 100}, .backward_us = 20}};
  m.grad_ready_order = {0};
  m.forward_us = 10;
  const Hook powersgd = {.kind = Hook::kPowerSgd, .rank = 1};  // P and Q: 400 bytes each
  const StepTimeline t =
      SimulateStep(m, Plan({{0}}), OneGbps(), 2, powersgd, {}, {.groups = 2, .share = 0.5});
  ASSERT_EQ(t.collectives.size(), 2u);
  EXPECT_DOUBLE_EQ(t.collectives[0].start_us, 30);
  EXPECT_DOUBLE_EQ(t.collectives[1].start_us, t.collectives[0].end_us);
  EXPECT_DOUBLE_EQ(t.comm_end_us, 30.8);
}

TEST(StepModelTest, ACollectiveBesideBackwardGoesAtItsRate) {
  // p1 ready at 30; its 4 us allreduce at half speed while p0's backward runs: 30..38. p0 at 50,
  // its bucket 50..54: the same exposed tail, 8 us of stream time overlapped.
  const StepTimeline t =
      SimulateStep(Model({1000, 1000}, 20), Plan({{1}, {0}}), OneGbps(), 2, {}, {.comm_rate = 0.5});
  EXPECT_DOUBLE_EQ(t.collectives[0].end_us, 38);
  EXPECT_DOUBLE_EQ(t.collectives[1].start_us, 50);
  EXPECT_DOUBLE_EQ(t.overlapped_us, 8);
  EXPECT_DOUBLE_EQ(t.exposed_us, 4);
  EXPECT_DOUBLE_EQ(t.slowdown_us, 0);
  // Backward at half speed too: 30..38 p0 did 4 of its 20 us, the other 16 end it at 54.
  const StepTimeline u = SimulateStep(Model({1000, 1000}, 20), Plan({{1}, {0}}), OneGbps(), 2, {},
                                      {.comm_rate = 0.5, .compute_rate = 0.5});
  EXPECT_DOUBLE_EQ(u.backward_end_us, 54);
  EXPECT_DOUBLE_EQ(u.slowdown_us, 4);
  EXPECT_DOUBLE_EQ(u.compute_us, 55);  // each part at its own speed
  EXPECT_DOUBLE_EQ(u.step_us, 54 + 4 + 5);
}

TEST(StepModelTest, ACollectiveLeftAtBackwardsEndGoesOnAtFullSpeed) {
  // p1 (10 000 elements, 40 us alone) ready at 30: half speed until backward ends at 50 (10 us
  // of its work), the other 30 at full speed: 50..80. p0's bucket waits for it: 80..84.
  const StepTimeline t = SimulateStep(Model({1000, 10000}, 20), Plan({{1}, {0}}), OneGbps(), 2, {},
                                      {.comm_rate = 0.5});
  EXPECT_DOUBLE_EQ(t.collectives[0].end_us, 80);
  EXPECT_DOUBLE_EQ(t.collectives[1].start_us, 80);
  EXPECT_DOUBLE_EQ(t.exposed_us, 34);
  // Without interference the same step is the old model's: 30..70, then 70..74.
  const StepTimeline free =
      SimulateStep(Model({1000, 10000}, 20), Plan({{1}, {0}}), OneGbps(), 2, {}, {});
  EXPECT_DOUBLE_EQ(free.collectives[1].start_us, 70);
  EXPECT_DOUBLE_EQ(free.exposed_us, 24);
}

TEST(StepModelTest, NoSyncMicroBatchesHaveNoCommunication) {
  SimulateConfig c;
  c.model = Model({1000, 1000}, 20);
  c.network = OneGbps();
  c.world_sizes = {2};
  c.no_sync_every = 4;
  absl::StatusOr<SimulateReport> r = Simulate(c);
  ASSERT_TRUE(r.ok()) << r.status();
  // Rebuilt plan: 8000 bytes in one bucket (under the 1 MiB first bucket): step 63 us as above;
  // three micro-batches of forward + backward (50 us) and the synced one: (150 + 63) / 4.
  EXPECT_DOUBLE_EQ(r->worlds(0).step_ms(), 0.063);
  EXPECT_DOUBLE_EQ(r->worlds(0).iteration_ms(), 0.21300 / 4);
  EXPECT_NEAR(r->worlds(0).scaling_efficiency(), (150 + 55) / 213.0, 1e-12);
}

// A plan whose buckets lie outside the sizes the calibration priced is said to extrapolate, with
// what to do: a run at such a cap, or, where the runs had that size but never alone, a quieter
// one.
TEST(StepModelTest, BucketsOutsideThePricedSizesAreNamedWithWhatToDo) {
  SimulateConfig c;
  c.model = Model({1000, 1000}, 20);  // one bucket of 8000 bytes
  c.network = OneGbps();
  c.world_sizes = {2};
  c.priced_min_bytes = 100, c.priced_max_bytes = 200;
  absl::StatusOr<SimulateReport> r = Simulate(c);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE(r->price_note().find("buckets of 0.01 MB, outside the 0.00-0.00 MB"), std::string::npos)
      << r->price_note();
  EXPECT_NE(r->price_note().find("calibrate from a run at such a cap too"), std::string::npos);
  c.unpriced_bytes = {8100};
  r = Simulate(c);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE(r->price_note().find("have buckets of that size, but each of their allreduces "
                                 "waited for another rank still in backward"),
            std::string::npos)
      << r->price_note();
  c.priced_max_bytes = 8000;
  EXPECT_EQ(Simulate(c)->price_note(), "");
}

// Replayed iterations: each is simulated and the one with the median time reported, whole.
TEST(StepModelTest, ReplaysReportTheMedianIteration) {
  SimulateConfig c;
  c.model = Model({1000, 1000}, 20);
  c.network = OneGbps();
  c.world_sizes = {2};
  for (double forward : {10.0, 500.0, 40.0}) {
    Replay r{.model = c.model};
    r.model.forward_us = forward;
    c.replays.push_back(r);
  }
  c.replays[2].comm_excess_us = 8;  // its one 8 us allreduce took 16: 8 us more at its end
  absl::StatusOr<SimulateReport> r = Simulate(c);
  ASSERT_TRUE(r.ok()) << r.status();
  // Steps 63, 553 and 40 + 40 + 8 + 5 + 8 = 101 us: the middle one is the third replay's.
  EXPECT_DOUBLE_EQ(r->worlds(0).step_ms(), 0.101);
  EXPECT_DOUBLE_EQ(r->worlds(0).comm_ms(), 0.016);  // the wait is communication's
}

// A replayed iteration's wait for its slow allreduces is communication, not finalize's copies:
// gradient_as_bucket_view, which drops the copies, keeps it.
TEST(StepModelTest, AReplaysWaitForItsAllreducesStaysWithBucketViews) {
  SimulateConfig c;
  c.model = Model({1000, 1000}, 20);
  c.model.finalize_us = 3;
  c.network = OneGbps();
  c.world_sizes = {2};
  c.replays.push_back(Replay{.model = c.model, .comm_excess_us = 8});
  c.ddp.gradient_as_bucket_view = true;
  absl::StatusOr<SimulateReport> r = Simulate(c);
  ASSERT_TRUE(r.ok()) << r.status();
  // 10 + 40 + 8 (one allreduce) + 8 (the wait) + 5 (optimizer), no copies.
  EXPECT_DOUBLE_EQ(r->worlds(0).step_ms(), 0.071);
  EXPECT_DOUBLE_EQ(r->worlds(0).exposed_ms(), 0.016);
}

TEST(StepModelTest, TheRebuildSplitsTheOneInitialBucket) {
  // Two 1 MiB gradients: the initial plan is one bucket (all of it after backward), the rebuilt
  // one closes a bucket at the 1 MiB first-bucket limit, so p1's allreduce overlaps p0's backward.
  SimModel m = Model({1 << 18, 1 << 18}, 2000);
  const reducer::BucketAssignment initial = InitialPlan(m, {});
  const reducer::BucketAssignment rebuilt = RebuiltPlan(m, {});  // 1 MiB first, 25 MiB cap
  ASSERT_EQ(initial.buckets.size(), 1u);
  ASSERT_EQ(rebuilt.buckets.size(), 2u);
  EXPECT_EQ(rebuilt.buckets[0], std::vector<size_t>{1});
  const double wire = (1 << 20) / 1000.0;  // 1048.576 us per gradient
  const StepTimeline first = SimulateStep(m, initial, OneGbps(), 2, {});
  const StepTimeline later = SimulateStep(m, rebuilt, OneGbps(), 2, {});
  EXPECT_DOUBLE_EQ(first.exposed_us, 2 * wire);
  EXPECT_DOUBLE_EQ(later.exposed_us, wire);  // p1's ran 2010..3058, under p0's 2010..4010
  EXPECT_DOUBLE_EQ(later.overlapped_us, wire);
}

TEST(StepModelTest, HooksChangeTheBytes) {
  SimModel m;
  m.params = {{.name = "w", .shape = {100, 50}}, {.name = "b", .shape = {100}}};
  m.grad_ready_order = {1, 0};
  EXPECT_EQ(BucketPayloads(m, {1, 0}, {}), std::vector<double>{20400});
  EXPECT_EQ(BucketPayloads(m, {1, 0}, {.kind = Hook::kFp16}), std::vector<double>{10200});
  // PowerSGD rank 2: the bias as it is (400), then P = 100·2·4 and Q = 50·2·4 bytes.
  EXPECT_EQ(BucketPayloads(m, {1, 0}, {.kind = Hook::kPowerSgd, .rank = 2}),
            (std::vector<double>{400, 800, 400}));
  // Rank 40: (100 + 50)·40·2 > 5000 — not worth compressing, sent whole.
  EXPECT_EQ(BucketPayloads(m, {1, 0}, {.kind = Hook::kPowerSgd, .rank = 40}),
            std::vector<double>{20400});
}

TEST(StepModelTest, AHooksOwnComputeIsPricedAtTheMachinesSpeeds) {
  SimModel m;
  m.params = {{.name = "w", .shape = {100, 50}}, {.name = "b", .shape = {100}}};
  m.grad_ready_order = {1, 0};
  EXPECT_EQ(HookComputeUs(m, {1, 0}, {.kind = Hook::kFp16}), 0);  // speeds unknown: not priced
  m.copy_us_per_byte = 0.001;
  // fp16: two copies of the bucket's 20 400 bytes.
  EXPECT_DOUBLE_EQ(HookComputeUs(m, {1, 0}, {.kind = Hook::kFp16}), 2 * 20400 * 0.001);
  // PowerSGD rank 2: the bias goes as it is; the 100 x 50 weight costs two and a half copies
  // (20 000 bytes), or its 6·100·50·2 FLOPs when the FLOP rate is the slower.
  EXPECT_DOUBLE_EQ(HookComputeUs(m, {1, 0}, {.kind = Hook::kPowerSgd, .rank = 2}), 2.5 * 20);
  m.flops_per_us = 100;
  EXPECT_DOUBLE_EQ(HookComputeUs(m, {1, 0}, {.kind = Hook::kPowerSgd, .rank = 2}), 600);
  // Estimated, it all runs after the bucket's collective, on the stream: 10.2 us of fp16 data,
  // then 40.8 us of casts.
  m.params[0].backward_us = m.params[1].backward_us = 20;
  const StepTimeline t = SimulateStep(m, Plan({{1, 0}}), OneGbps(), 2, {.kind = Hook::kFp16});
  EXPECT_DOUBLE_EQ(t.collectives[0].end_us - t.collectives[0].start_us, 10.2);
  EXPECT_DOUBLE_EQ(t.collectives[0].callback_end_us - t.collectives[0].end_us, 40.8);
  EXPECT_DOUBLE_EQ(t.comm_us, 51);
}

// Measured from a run with the hook (--calibrate), a hook's work splits in two: at each
// bucket's launch on backward's thread, which backward waits for and the collective starts
// after, and after its collectives on the stream. Two buckets, launched in plan order.
TEST(StepModelTest, AMeasuredHooksWorkDelaysBackwardAtLaunchAndTheStreamAfter) {
  SimModel m;
  m.params = {{.name = "a", .shape = {1000}, .backward_us = 100},
              {.name = "b", .shape = {2000}, .backward_us = 100}};
  m.grad_ready_order = {1, 0};
  m.forward_us = 10;
  m.hook_measured = "fp16";
  m.hook_launch_us_per_byte = 0.01;    // 40 us for a's 4000 bytes, 80 for b's 8000
  m.hook_callback_us_per_byte = 0.02;  // 80 and 160 us
  const Hook fp16 = {.kind = Hook::kFp16};
  EXPECT_TRUE(HookWorkMeasured(m, fp16));
  EXPECT_FALSE(HookWorkMeasured(m, {.kind = Hook::kPowerSgd}));
  // At 1 Gb/s (1000 bytes per us after 0 latency): b's 4000 fp16 bytes take 4 us, a's 2 us.
  const StepTimeline t = SimulateStep(m, Plan({{1}, {0}}), OneGbps(), 2, fp16);
  // b: ready at 110, launched at 190; its collective 190..194, its callback to 354.
  EXPECT_DOUBLE_EQ(t.grad_ready_us[1], 110);
  ASSERT_EQ(t.collectives.size(), 2u);
  EXPECT_DOUBLE_EQ(t.collectives[0].start_us, 190);
  EXPECT_DOUBLE_EQ(t.collectives[0].end_us, 194);
  EXPECT_DOUBLE_EQ(t.collectives[0].callback_end_us, 354);
  // a: ready at 290 (backward went on after b's launch), launched at 330, waits for the stream
  // until 354, sent by 356, its callback to 436. Backward ends at a's launch: 330.
  EXPECT_DOUBLE_EQ(t.grad_ready_us[0], 290);
  EXPECT_DOUBLE_EQ(t.backward_end_us, 330);
  EXPECT_DOUBLE_EQ(t.collectives[1].start_us, 354);
  EXPECT_DOUBLE_EQ(t.collectives[1].end_us, 356);
  EXPECT_DOUBLE_EQ(t.collectives[1].callback_end_us, 436);
  EXPECT_DOUBLE_EQ(t.comm_end_us, 436);
  EXPECT_DOUBLE_EQ(t.hook_launch_us, 120);
  EXPECT_DOUBLE_EQ(t.compute_us, 10 + 200 + 120);
  EXPECT_DOUBLE_EQ(t.slowdown_us, 0);
}

TEST(NetworkModelTest, AlgorithmFactors) {
  NetworkModel ring;
  ring.latency_us = 10, ring.gbytes_per_s = 1;
  // 2(N-1)α + 2(N-1)/N·S/β on 4 ranks, β = 1000 bytes per us: 60 + 1.5·4.
  EXPECT_DOUBLE_EQ(ring.AllreduceUs(4000, 4), 60 + 6);
  EXPECT_DOUBLE_EQ(ring.AllreduceUs(4000, 1), 0);
  NetworkModel tree = ring;
  tree.algorithm = "tree";
  EXPECT_DOUBLE_EQ(tree.AllreduceUs(4000, 4), 2 * 2 * 10 + 2 * 4);
  NetworkModel hier = ring;
  hier.algorithm = "hierarchical", hier.ranks_per_node = 2;
  hier.intra_latency_us = 1, hier.intra_gbytes_per_s = 10;
  // Inside a node of 2: 2·1 + 1·4000/10 000; across 2 nodes on half the bytes: 20 + 2000/1000.
  EXPECT_NEAR(hier.AllreduceUs(4000, 4), 2 + 0.4 + 20 + 2, 1e-12);
}

TEST(NetworkModelTest, MeasuredFitsScaleAsARing) {
  NetworkModel m;
  m.measured[2] = {.a_us = 20, .b_us_per_byte = 0.001};
  EXPECT_DOUBLE_EQ(m.AllreduceUs(1000, 2), 21);
  // α = 20 / 2 = 10 us; β: b = 1·S/β so 1 GB/s. On 4 ranks: 60 + 1.5·1000·0.001·1000.
  EXPECT_NEAR(m.AllreduceUs(1000, 4), 60 + 1.5, 1e-9);
}

// Points on a line with a latency fit it exactly; two close sizes, the larger one slowed, whose
// free line would start below zero, get the best line through the origin, not the free slope.
TEST(NetworkModelTest, ALeastSquaresLineBelowZeroGoesThroughTheOrigin) {
  const LinearFit exact = LeastSquares({{1000, 60}, {2000, 70}, {4000, 90}});
  EXPECT_NEAR(exact.a_us, 50, 1e-9);
  EXPECT_NEAR(exact.b_us_per_byte, 0.01, 1e-12);
  const LinearFit close = LeastSquares({{2.41e6, 2590}, {2.50e6, 4510}});
  EXPECT_EQ(close.a_us, 0);
  const double b = (2.41e6 * 2590 + 2.50e6 * 4510) / (2.41e6 * 2.41e6 + 2.50e6 * 2.50e6);
  EXPECT_NEAR(close.b_us_per_byte, b, 1e-12);  // 1.45 ms per MB, not the free line's 21
}

TEST(NetworkModelTest, PresetsAndKeys) {
  absl::StatusOr<NetworkModel> n = ParseNetwork("dgx-a100-ib200,algo=ring");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->algorithm, "ring");
  EXPECT_EQ(n->ranks_per_node, 8);
  n = ParseNetwork("gbps=200,latency_us=3");
  ASSERT_TRUE(n.ok());
  EXPECT_DOUBLE_EQ(n->gbytes_per_s, 25);
  EXPECT_FALSE(ParseNetwork("nonsense").ok());
  EXPECT_FALSE(ParseNetwork("algo=mesh").ok());
}

TEST(SimModelTest, FromParamsDropsFrozenParametersAndRenumbersTheOrder) {
  absl::StatusOr<SimModel> m = FromParams({"a", "b", "c"}, {{2, 3}, {3}, {4}},
                                          {DType::kFloat32, DType::kFloat32, DType::kFloat16},
                                          {true, false, true}, {2, 1, 0});
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->params.size(), 2u);
  EXPECT_EQ(m->params[1].name, "c");
  EXPECT_EQ(m->grad_ready_order, (std::vector<size_t>{1, 0}));
  EXPECT_FALSE(m->order_estimated);
  EXPECT_EQ(m->TotalBytes(), 24 + 8);
  EXPECT_FALSE(FromParams({"a"}, {{1}}, {DType::kFloat32}, {}, {1}).ok());
}

// plans/mixed_toy.json (input 4 x 16): the frozen layer is dropped, DDP's logged order is used,
// and each forward FLOPs is half the file's backward FLOPs scaled from 4 rows to the batch.
TEST(SimModelTest, FromPlanFileUsesTheFilesOrderAndFlops) {
  absl::StatusOr<SimModel> m =
      FromPlanFile(std::string(DDPKIT_TESTDATA_DIR) + "/plans/mixed_toy.json", 8);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->params.size(), 9u);
  EXPECT_EQ(m->params[0].name, "embed.weight");
  EXPECT_EQ(m->params[2].name, "wide.weight");
  EXPECT_EQ(m->params[2].dtype, DType::kFloat64);
  EXPECT_FALSE(m->order_estimated);
  EXPECT_EQ(m->grad_ready_order.front(), 8u);  // head.bias, the last layer's, first
  // embed (Linear 16 -> 32) at 4 rows: 2·4·16·32 forward FLOPs, so 2·8·16·32 at 8.
  EXPECT_DOUBLE_EQ(m->params[0].forward_flops, 2.0 * 8 * 16 * 32);
  EXPECT_NE(m->flops_source.find("FLOPs at input [4,16]"), std::string::npos) << m->flops_source;
}

}  // namespace
}  // namespace ddpkit::jobs::sim
