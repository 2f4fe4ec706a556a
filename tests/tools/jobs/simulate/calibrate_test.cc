// --calibrate measured on traces whose truth is known: steps the event model itself simulated
// with a chosen compute profile, network and interference, written out as a trace.
#include "tools/jobs/simulate/calibrate.h"

#include <cmath>
#include <random>
#include <tuple>

#include "gtest/gtest.h"
#include "tests/tools/jobs/simulate/plans.h"
#include "tools/jobs/simulate/trace_samples.h"
#include "tools/trace/runs.h"

namespace ddpkit::jobs::sim::calibrate_test {
namespace {

// Four gradients of different sizes and backward times, ready in reverse registration order.
SimModel Truth() {
  SimModel m;
  const std::vector<int64_t> numels = {1000, 2000, 3000, 4000};
  const std::vector<double> backward = {150, 250, 200, 300};
  for (size_t i = 0; i < numels.size(); ++i) {
    m.params.push_back({.name = StrCat("p", i), .shape = {numels[i]}, .backward_us = backward[i]});
    m.grad_ready_order.insert(m.grad_ready_order.begin(), i);
  }
  m.forward_us = 100, m.backward_tail_us = 0;
  return m;
}

using test_plans::Plan;

// One rank's iteration `it`, starting at `t0`, as a trace records it.
void Record(const StepTimeline& s, int it, double t0, trace::RankView& rank) {
  auto item = [&](std::string name, double a, double b) {
    trace::TraceItem i;
    i.name = std::move(name), i.iteration = it, i.start_us = t0 + a, i.end_us = t0 + b;
    return i;
  };
  rank.phases.push_back(item("forward", 0, s.forward_end_us));
  rank.phases.push_back(item("backward", s.forward_end_us, s.backward_end_us));
  for (size_t p = 0; p < s.grad_ready_us.size(); ++p) {
    trace::TraceItem h = item("hook", s.grad_ready_us[p], s.grad_ready_us[p]);
    h.param = static_cast<int>(p), h.bucket = s.param_bucket[p];
    rank.hooks.push_back(h);
  }
  for (const Collective& c : s.collectives) {
    trace::TraceItem a = item("allreduce", c.start_us, c.end_us);
    a.purpose = "bucket", a.bucket = c.bucket, a.bytes = static_cast<int64_t>(c.bytes);
    a.queued_us = t0 + s.bucket_queued_us[c.bucket];  // one collective per bucket here
    rank.collectives.push_back(a);
    // The bucket's result is complete once the hook's work after its collective is.
    trace::TraceItem reduced = item("bucket reduced", c.callback_end_us, c.callback_end_us);
    reduced.bucket = c.bucket, reduced.event = "reduced";
    rank.instants.push_back(reduced);
  }
  for (size_t b = 0; b < s.bucket_launch_us.size(); ++b) {
    trace::TraceItem launched =
        item("bucket launched", s.bucket_launch_us[b], s.bucket_launch_us[b]);
    launched.bucket = static_cast<int>(b), launched.event = "launched";
    rank.instants.push_back(launched);
  }
}

// The same with finalize traced: from backward's end to `finalize_us` after the last collective.
void RecordWithFinalize(const StepTimeline& s, int it, double t0, double finalize_us,
                        trace::RankView& rank) {
  Record(s, it, t0, rank);
  rank.phases.push_back({.name = "finalize",
                         .start_us = t0 + s.backward_end_us,
                         .end_us = t0 + s.comm_end_us + finalize_us,
                         .iteration = it});
}

// The network every synthetic run here has: 2 ranks, 50 µs + 0.01 µs per byte an allreduce.
NetworkModel TwoRankNetwork() {
  NetworkModel network;
  network.measured[2] = {.a_us = 50, .b_us_per_byte = 0.01};
  return network;
}

// An empty trace of a 2-rank run that recorded `ranks` ranks, numbered 0, 1.
trace::TraceView TwoRankView(int ranks) {
  trace::TraceView view;
  view.world_size = 2;
  view.ranks.resize(ranks);
  for (int r = 0; r < ranks; ++r) view.ranks[r].rank = r;
  return view;
}

// A view whose runs had `comm_hook`, as a ddpkit trace's metadata says.
trace::TraceView ViewWithHook(const std::string& comm_hook) {
  trace::TraceView view = TwoRankView(1);
  view.other_data = {{"ranks", {{{"ddp_options", {{"comm_hook", comm_hook}}}}}}};
  return view;
}

// Eight iterations of the truth at a collective's rate 0.5 beside backward and backward's 0.8
// beside a collective, recorded alike on `ranks` ranks. The plans alternate: a bucket per
// gradient (all but the last overlap backward), and one bucket after it — the gradients after the
// first are seen both beside a collective and alone, and sizes run alone.
trace::TraceView AlternatingPlansRun(int ranks) {
  const std::vector<reducer::BucketAssignment> plans = {Plan({{3}, {2}, {1}, {0}}),
                                                        Plan({{3, 2, 1, 0}})};
  trace::TraceView view = TwoRankView(ranks);
  for (int it = 0; it < 8; ++it) {
    const StepTimeline s = SimulateStep(Truth(), plans[it % 2], TwoRankNetwork(), 2, {},
                                        {.comm_rate = 0.5, .compute_rate = 0.8});
    for (int r = 0; r < ranks; ++r) Record(s, it, 10000.0 * it, view.ranks[r]);
  }
  return view;
}

TEST(CalibrateTest, RecoversTheProfilesAndTheInterferenceItWasSimulatedWith) {
  const SimModel truth = Truth();
  trace::TraceView view = AlternatingPlansRun(1);
  SimModel model = Truth();
  for (SimParam& p : model.params) p.backward_us = 0;
  absl::StatusOr<Calibration> c = Calibrate(view, "synthetic", model);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_NEAR(c->interference.comm_rate, 0.5, 1e-9);
  EXPECT_NEAR(c->interference.compute_rate, 0.8, 1e-9);
  EXPECT_NEAR(c->network.measured.at(2).a_us, 50, 1e-6);
  EXPECT_NEAR(c->network.measured.at(2).b_us_per_byte, 0.01, 1e-9);
  for (size_t p = 0; p < truth.params.size(); ++p) {
    EXPECT_NEAR(model.params[p].backward_us, truth.params[p].backward_us, 1e-6) << p;
  }
  EXPECT_DOUBLE_EQ(model.forward_us, 100);
  EXPECT_EQ(model.grad_ready_order, truth.grad_ready_order);
  // Each iteration replayed is the truth too: its own gaps with the interference taken out, its
  // allreduces at the fitted price.
  ASSERT_EQ(c->replays.size(), 6u);  // iterations 2..7: 0 and 1 are DDP's warm-up
  for (const Replay& r : c->replays) {
    EXPECT_NEAR(r.comm_excess_us, 0, 1e-6);
    for (size_t p = 0; p < truth.params.size(); ++p) {
      EXPECT_NEAR(r.model.params[p].backward_us, truth.params[p].backward_us, 1e-6) << p;
    }
  }
  // p3, ready first, never has a collective beside it; the other three are seen both ways.
  EXPECT_NE(c->summary.find("3 gradient(s) seen both"), std::string::npos) << c->summary;
}

// The same run on two ranks, the first done with backward as soon as it starts it (a faster
// rank): the collectives beside the second rank's backward, slowed by it, ran after the first
// rank's own. They are still beside backward — the iteration's, which the model's pace-setter
// runs — so the price alone and the rates are the truth's. Taken after each rank's own
// backward, the first rank's slowed runs would price their sizes.
TEST(CalibrateTest, ACollectiveBesideAnotherRanksBackwardIsNotPricedAsAlone) {
  trace::TraceView view = AlternatingPlansRun(2);
  for (trace::TraceItem& phase : view.ranks[0].phases) {
    if (phase.name == "backward") phase.end_us = phase.start_us + 1;
  }
  SimModel model = Truth();
  absl::StatusOr<Calibration> c = Calibrate(view, "synthetic", model);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_NEAR(c->network.measured.at(2).a_us, 50, 1e-6);
  EXPECT_NEAR(c->network.measured.at(2).b_us_per_byte, 0.01, 1e-9);
  EXPECT_NEAR(c->interference.comm_rate, 0.5, 1e-9);
  EXPECT_NEAR(c->interference.compute_rate, 0.8, 1e-9);
  for (const Replay& r : c->replays) EXPECT_NEAR(r.comm_excess_us, 0, 1e-6);
}

// Where no allreduce ran after every rank's backward (threads ranks whose backwards end apart:
// the second rank's ran on past every collective), the price alone is taken from the ones that
// ran after their own rank's backward, and the summary says so — not an error that leaves the
// user with no profile (a static_graph calibration on 2 threads ranks had none in 19
// iterations).
// `iterations` of the truth's one-bucket plan on two ranks, the second rank's backward running
// on 5 ms past the collective in every iteration but `together` (-1: none).
trace::TraceView BackwardsEndingApart(int iterations, int together) {
  trace::TraceView view = TwoRankView(2);
  for (int it = 0; it < iterations; ++it) {
    const StepTimeline s = SimulateStep(Truth(), Plan({{3, 2, 1, 0}}), TwoRankNetwork(), 2, {});
    for (int r = 0; r < 2; ++r) Record(s, it, 10000.0 * it, view.ranks[r]);
  }
  for (trace::TraceItem& phase : view.ranks[1].phases) {
    if (phase.name == "backward" && phase.iteration != together) phase.end_us += 5000;
  }
  return view;
}

TEST(CalibrateTest, WithNoAllreduceAfterEveryRanksBackwardTheirOwnRanksIsTaken) {
  const SimModel truth = Truth();
  trace::TraceView view = BackwardsEndingApart(5, -1);
  SimModel model = Truth();
  absl::StatusOr<Calibration> c = Calibrate(view, "synthetic", model);
  ASSERT_TRUE(c.ok()) << c.status();
  const double bytes = static_cast<double>(truth.TotalBytes());
  EXPECT_NEAR(c->network.AllreduceUs(bytes, 2), 50 + 0.01 * bytes, 1e-6);
  EXPECT_NE(c->summary.find("their own rank's: 0 ran after every rank's"), std::string::npos)
      << c->summary;
}

// The same where one iteration of six did run its allreduce after every rank's backward, and
// that one was slowed by 2 ms: a price from it alone (both ranks' view of one collective) would
// be 2 ms high. Fewer than half the iterations have one, so the six after their own rank's
// backward (and that one) price it: their median is the truth's.
TEST(CalibrateTest, APriceFromFewerThanHalfTheIterationsIsNotTaken) {
  const SimModel truth = Truth();
  trace::TraceView view = BackwardsEndingApart(8, 4);  // iterations 2..7 after the warm-up
  for (trace::RankView& rank : view.ranks) rank.collectives[4].end_us += 2000;
  SimModel model = Truth();
  absl::StatusOr<Calibration> c = Calibrate(view, "synthetic", model);
  ASSERT_TRUE(c.ok()) << c.status();
  const double bytes = static_cast<double>(truth.TotalBytes());
  EXPECT_NEAR(c->network.AllreduceUs(bytes, 2), 50 + 0.01 * bytes, 1e-6);
  EXPECT_NE(c->summary.find("their own rank's: 2 ran after every rank's, in 6 iterations"),
            std::string::npos)
      << c->summary;
}

// Two runs read one after another (`--calibrate A.json,B.json`): a second run at a one-bucket
// plan prices that size beside the first run's sizes. Where its one allreduce always waited for
// a rank still in backward, it is not priced from its own rank's backward, as a run alone would
// be: the first run's collectives after every rank's backward price the allreduce, and a price
// that holds the other rank's lag would bend their line. (Judged run by run, a ResNet's 4.92 MB
// bucket on 2 mpi ranks was priced at its 2.41 MB bucket's time, the line went flat, and caps 1
// and 2 came out 27% and 31% long.)
TEST(CalibrateTest, ASecondRunPricesItsSizesWhereTheyRanAfterEveryRanksBackward) {
  const double total = static_cast<double>(Truth().TotalBytes());
  trace::TraceView per_gradient = TwoRankView(2), one_bucket = TwoRankView(2);
  for (int it = 0; it < 8; ++it) {
    for (auto [plan, view] : {std::pair{Plan({{3}, {2}, {1}, {0}}), &per_gradient},
                              std::pair{Plan({{3, 2, 1, 0}}), &one_bucket}}) {
      const StepTimeline s = SimulateStep(Truth(), plan, TwoRankNetwork(), 2, {});
      for (int r = 0; r < 2; ++r) Record(s, it, 10000.0 * it, view->ranks[r]);
    }
  }
  SimModel model = Truth();
  absl::StatusOr<Calibration> one = Calibrate(per_gradient, "a", model);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_LT(one->priced_max_bytes, total);
  EXPECT_EQ(one->unpriced_bytes, std::vector<double>{});  // its unpriced buckets overlap its own
  for (const bool lagging : {false, true}) {
    absl::StatusOr<trace::TraceView> both = trace::RunsOneAfterAnother(
        {per_gradient, lagging ? BackwardsEndingApart(8, -1) : one_bucket}, {"a", "b"});
    ASSERT_TRUE(both.ok()) << both.status();
    model = Truth();
    absl::StatusOr<Calibration> two = Calibrate(*both, "a,b", model);
    ASSERT_TRUE(two.ok()) << two.status();
    EXPECT_DOUBLE_EQ(two->priced_min_bytes, one->priced_min_bytes) << lagging;
    EXPECT_DOUBLE_EQ(two->priced_max_bytes, lagging ? one->priced_max_bytes : total);
    // Lagging, the price is the first run's alone (through its one size, p0's).
    EXPECT_NEAR(two->network.AllreduceUs(total, 2),
                lagging ? one->network.AllreduceUs(total, 2) : 50 + 0.01 * total, 1e-6)
        << lagging;
    // Run so, the size is said to have been seen but not priced (simulate's price: line).
    const std::vector<double>& unpriced = two->unpriced_bytes;
    EXPECT_EQ(std::count(unpriced.begin(), unpriced.end(), total), lagging ? 1 : 0);
  }
}

// Rates that the run itself contradicts are refitted to its steps. A run of mostly one plan
// (a bucket per gradient) whose collectives beside backward are traced as starting 0.6 ms
// early (a rank's view of one that sat waiting for its peer): measured so, a collective beside
// backward runs at 0.15x, and the run replayed at that rate comes out 12% long. Refitted to
// the run's steps, its replay gives them back, and the summary says what was refitted.
TEST(CalibrateTest, RatesTheRunContradictsAreRefittedToItsSteps) {
  SimModel truth = Truth();
  truth.finalize_us = 300;
  const std::vector<reducer::BucketAssignment> plans = {Plan({{3}, {2}, {1}, {0}}),
                                                        Plan({{3, 2, 1, 0}})};
  trace::TraceView view = TwoRankView(1);
  for (int it = 0; it < 8; ++it) {
    const StepTimeline s = SimulateStep(truth, plans[it % 4 == 3], TwoRankNetwork(), 2, {},
                                        {.comm_rate = 0.5, .compute_rate = 0.8});
    RecordWithFinalize(s, it, 10000.0 * it, truth.finalize_us, view.ranks[0]);
  }
  for (trace::TraceItem& a : view.ranks[0].collectives) {
    if (a.iteration % 4 != 3 && a.bucket < 3) a.start_us -= 600;
  }
  SimModel model = Truth();
  absl::StatusOr<Calibration> c = Calibrate(view, "synthetic", model);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_NE(c->summary.find("(a collective at 0.15x beside backward, backward at 0.80x beside "
                            "one) replayed the run +12.2% off its measured step, so they are "
                            "refitted to its steps"),
            std::string::npos)
      << c->summary;
  const SelfCheck check = ReplayItself(c->replays, c->network, 2, {}, c->interference);
  EXPECT_NEAR(check.replayed_us, check.measured_us, 0.01 * check.measured_us);
}

// One iteration's allreduce took 0.3 ms longer than the rest (its rank waited for one the cores
// had left behind): replayed, the iteration waits those 0.3 ms once at its step's end, at any
// plan — not a scale on every collective, which would make a plan of four buckets wait four
// times over.
TEST(CalibrateTest, AnIterationsSlowAllreduceIsWaitedForOnceAtAnyPlan) {
  const SimModel truth = Truth();
  const NetworkModel network = TwoRankNetwork();
  trace::TraceView view = TwoRankView(1);
  for (int it = 0; it < 6; ++it) {
    const StepTimeline s = SimulateStep(truth, Plan({{3, 2, 1, 0}}), network, 2, {});
    Record(s, it, 10000.0 * it, view.ranks[0]);
  }
  view.ranks[0].collectives[4].end_us += 300;  // iteration 4's one allreduce
  SimModel model = Truth();
  absl::StatusOr<Calibration> c = Calibrate(view, "synthetic", model);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->replays.size(), 4u);  // iterations 2..5
  EXPECT_NEAR(c->replays[2].comm_excess_us, 300, 1e-6);
  EXPECT_NEAR(c->replays[0].comm_excess_us, 0, 1e-6);
  const reducer::BucketAssignment four = Plan({{3}, {2}, {1}, {0}});
  const double slow = SimulateStep(WithExcess(c->replays[2]), four, c->network, 2, {}).step_us;
  const double usual = SimulateStep(WithExcess(c->replays[0]), four, c->network, 2, {}).step_us;
  EXPECT_NEAR(slow - usual, 300, 1e-6);
}

// DDP's first two iterations are its warm-up, left out: the initial plan, then the first at the
// plan after it, whose buckets are new and whose sizes a backend meets for the first time. Here
// iteration 1 ran one bucket of every gradient after backward, 5 ms slow (on 2 mpi ranks an
// 8.44 MB allreduce took 16.3 ms there, 3.1-3.6 ms after); every later iteration a bucket per
// gradient, only the last after backward. Taken in, iteration 1's is the only price of its
// size, and the line through it prices a one-bucket plan 5 ms high.
TEST(CalibrateTest, DdpsWarmUpDoesNotPriceTheAllreduce) {
  const SimModel truth = Truth();
  const NetworkModel network = TwoRankNetwork();
  trace::TraceView view = TwoRankView(1);
  for (int it = 0; it < 8; ++it) {
    const reducer::BucketAssignment plan =
        it == 1 ? Plan({{3, 2, 1, 0}}) : Plan({{3}, {2}, {1}, {0}});
    Record(SimulateStep(truth, plan, network, 2, {}), it, 10000.0 * it, view.ranks[0]);
  }
  for (trace::TraceItem& c : view.ranks[0].collectives) c.end_us += c.iteration == 1 ? 5000 : 0;
  SimModel model = Truth();
  absl::StatusOr<Calibration> c = Calibrate(view, "synthetic", model);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->replays.size(), 6u);
  const double bytes = static_cast<double>(truth.TotalBytes());
  EXPECT_LT(c->network.AllreduceUs(bytes, 2), 50 + 0.01 * bytes + 1000) << c->summary;
  EXPECT_NE(c->summary.find("1 size(s)"), std::string::npos) << c->summary;
}

// Once backward is over, the next bucket's collective started late after each one, per byte of
// the one that ended (2 mpi ranks bound to their cores: 0.83 ms after an 8.44 MB one): measured
// from the run, and replayed, the run's steps come back; a stream that starts the next one at
// once would replay them 0.56 ms short here.
TEST(CalibrateTest, TheHandOffBetweenBucketsAfterBackwardIsMeasuredAndReplayed) {
  SimModel truth = Truth();
  truth.handoff_us_per_byte = 0.02;  // 20 ms per MB
  NetworkModel network;
  network.measured[2] = {.a_us = 50, .b_us_per_byte = 0.05};  // bucket {3, 2} ends after backward
  const std::vector<reducer::BucketAssignment> plans = {Plan({{3, 2}, {1, 0}}),
                                                        Plan({{3, 2, 1, 0}})};
  trace::TraceView view = TwoRankView(1);
  for (int it = 0; it < 8; ++it) {
    const StepTimeline s = SimulateStep(truth, plans[it % 2], network, 2, {});
    RecordWithFinalize(s, it, 20000.0 * it, 0, view.ranks[0]);
  }
  SimModel model = Truth();
  absl::StatusOr<Calibration> c = Calibrate(view, "synthetic", model);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_NEAR(model.handoff_us_per_byte, 0.02, 1e-9);
  EXPECT_NE(c->summary.find("20.000 ms per MB of the one before it after that one ended (3 "
                            "hand-offs, median)"),
            std::string::npos)
      << c->summary;
  const SelfCheck check = ReplayItself(c->replays, c->network, 2, {}, c->interference);
  EXPECT_NEAR(check.replayed_us, check.measured_us, 1e-6);
  const double bucket0 = (4000 + 3000) * 4;
  const StepTimeline with = SimulateStep(model, plans[0], c->network, 2, {});
  model.handoff_us_per_byte = 0;
  const StepTimeline without = SimulateStep(model, plans[0], c->network, 2, {});
  EXPECT_NEAR(with.step_us - without.step_us, 0.02 * bucket0, 1e-6);
}

// A run with a comm hook: its work at each bucket's launch is taken out of the gradients' times
// and measured per byte, and so is its work after the collectives (up to the bucket's
// completion); simulating the same hook again gives the traced steps back.
TEST(CalibrateTest, RecoversAHooksWorkFromARunWithIt) {
  SimModel truth = Truth();
  truth.hook_measured = "fp16";
  truth.hook_launch_us_per_byte = 0.002, truth.hook_callback_us_per_byte = 0.005;
  const NetworkModel network = TwoRankNetwork();
  const Interference rates = {.comm_rate = 0.5, .compute_rate = 0.8};
  const std::vector<reducer::BucketAssignment> plans = {Plan({{3}, {2}, {1}, {0}}),
                                                        Plan({{3, 2, 1, 0}})};
  const Hook fp16 = {.kind = Hook::kFp16};
  trace::TraceView view = ViewWithHook("fp16");
  std::vector<StepTimeline> steps;
  for (int it = 0; it < 8; ++it) {
    steps.push_back(SimulateStep(truth, plans[it % 2], network, 2, fp16, rates));
    Record(steps.back(), it, 10000.0 * it, view.ranks[0]);
  }
  SimModel model = Truth();
  absl::StatusOr<Calibration> c = Calibrate(view, "synthetic", model);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(model.hook_measured, "fp16");
  EXPECT_NEAR(model.hook_launch_us_per_byte, 0.002, 1e-12);
  EXPECT_NEAR(model.hook_callback_us_per_byte, 0.005, 1e-12);
  EXPECT_NEAR(c->interference.comm_rate, 0.5, 1e-9);
  EXPECT_NEAR(c->interference.compute_rate, 0.8, 1e-9);
  for (size_t p = 0; p < truth.params.size(); ++p) {
    EXPECT_NEAR(model.params[p].backward_us, truth.params[p].backward_us, 1e-6) << p;
  }
  for (int it = 1; it < 8; ++it) {
    const StepTimeline again =
        SimulateStep(model, plans[it % 2], c->network, 2, fp16, c->interference);
    EXPECT_NEAR(again.comm_end_us, steps[it].comm_end_us, 1e-6) << it;
  }
  EXPECT_NE(c->summary.find("the run's fp16 comm hook"), std::string::npos) << c->summary;
  // Without the hook's name in the trace (a PyTorch profiler trace, an older ddpkit one), the
  // launch work stays inside the gradients' times and nothing is measured as the hook's.
  view.other_data = nlohmann::json::object();
  SimModel plain = Truth();
  ASSERT_TRUE(Calibrate(view, "synthetic", plain).ok());
  EXPECT_TRUE(plain.hook_measured.empty());
}

// PowerSGD's pattern: a bucket's three collectives, the first two queued at its launch (the
// first callback fills the second's buffer before the FIFO communication thread starts it), the
// third queued by the second's callback. The hook's work after the collectives is every gap
// the thread spent in callbacks: 200 + 50 us between them, 100 us up to the bucket's completion.
TEST(CalibrateTest, AHooksWorkBetweenABucketsCollectivesIsMeasured) {
  trace::TraceView view = ViewWithHook("powersgd");
  trace::RankView& rank = view.ranks[0];
  for (int it = 0; it < 3; ++it) {
    const double t0 = 10000.0 * it;
    auto item = [&](std::string name, double a, double b) {
      trace::TraceItem i;
      i.name = std::move(name), i.iteration = it, i.start_us = t0 + a, i.end_us = t0 + b;
      return i;
    };
    rank.phases.push_back(item("forward", 0, 100));
    rank.phases.push_back(item("backward", 100, 1000));
    for (int p = 0; p < 4; ++p) {
      trace::TraceItem h = item("hook", 200 + 100 * p, 200 + 100 * p);
      h.param = 3 - p, h.bucket = 0;
      rank.hooks.push_back(h);
    }
    trace::TraceItem launched = item("bucket 0 launched", 550, 550);
    launched.bucket = 0, launched.event = "launched";
    rank.instants.push_back(launched);
    for (const auto& [from, to, queued, bytes] : {std::tuple{1000.0, 1100.0, 600.0, 4000},
                                                  {1300.0, 1400.0, 600.0, 800},
                                                  {1500.0, 1600.0, 1450.0, 800}}) {
      trace::TraceItem a = item("allreduce", from, to);
      a.purpose = "bucket", a.bucket = 0, a.bytes = bytes, a.queued_us = t0 + queued;
      rank.collectives.push_back(a);
    }
    trace::TraceItem reduced = item("bucket 0 reduced", 1700, 1700);
    reduced.bucket = 0, reduced.event = "reduced";
    rank.instants.push_back(reduced);
  }
  SimModel model = Truth();  // 10 000 floats: 40 000 bytes in the bucket
  absl::StatusOr<Calibration> c = Calibrate(view, "synthetic", model);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(model.hook_measured, "powersgd");
  EXPECT_DOUBLE_EQ(model.hook_launch_us_per_byte, 50 / 40000.0);
  EXPECT_DOUBLE_EQ(model.hook_callback_us_per_byte, 350 / 40000.0);
}

// Two ranks, the second starting each step 0.5 ms after the first (it finished the last one's
// optimizer late): the first waits for it in the allreduce, so its step (forward's start to
// finalize's end, as measured) is 0.5 ms longer than the late rank's compute and communication.
TEST(CalibrateTest, ARankThatStartsLateSetsThePaceAndItsSkewIsInTheStep) {
  const SimModel truth = Truth();
  const NetworkModel network = TwoRankNetwork();
  trace::TraceView view = TwoRankView(2);
  const reducer::BucketAssignment plan = Plan({{3, 2, 1, 0}});
  const StepTimeline s = SimulateStep(truth, plan, network, 2, {});
  for (int it = 0; it < 6; ++it) {
    const double t0 = 10000.0 * it;
    Record(s, it, t0, view.ranks[0]);
    Record(s, it, t0 + 500, view.ranks[1]);
    // Both finalize once the last collective is done: the first rank's step is 0.5 ms longer.
    for (int r = 0; r < 2; ++r) {
      view.ranks[r].phases.push_back({.name = "finalize",
                                      .start_us = t0 + 500 * r + s.backward_end_us,
                                      .end_us = t0 + 500 + s.comm_end_us,
                                      .iteration = it});
    }
  }
  // A collective ends together on both ranks: the first rank's are the late one's.
  for (size_t k = 0; k < view.ranks[0].collectives.size(); ++k) {
    view.ranks[0].collectives[k].start_us = view.ranks[1].collectives[k].start_us;
    view.ranks[0].collectives[k].end_us = view.ranks[1].collectives[k].end_us;
  }
  SimModel model = Truth();
  absl::StatusOr<Calibration> c = Calibrate(view, "synthetic", model);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(model.start_skew_us, 500);
  for (size_t p = 0; p < truth.params.size(); ++p) {
    EXPECT_NEAR(model.params[p].backward_us, truth.params[p].backward_us, 1e-6) << p;
  }
  EXPECT_NEAR(SimulateStep(model, plan, c->network, 2, {}).step_us, s.step_us + 500, 1e-6);
  for (const Replay& r : c->replays) EXPECT_DOUBLE_EQ(r.model.start_skew_us, 500);
  // The first rank's steps, replayed: its wait for the late one is in them.
  const SelfCheck check = ReplayItself(c->replays, c->network, 2, {}, c->interference);
  EXPECT_EQ(check.iterations, 4);
  EXPECT_NEAR(check.measured_us, 500 + s.comm_end_us, 1e-6);
  EXPECT_NEAR(check.replayed_us, check.measured_us, 1e-6);
}

// Two ranks, the second starting 0.5 ms after the first but done with backward 0.1 ms sooner, so
// the first still sets the pace; the cores leave the second behind at finalize (1 ms of copies
// against none), so its step is the one measured, and it began 0.5 ms after the pace-setter's:
// that much shorter than the pace-setter's timeline plus its finalize (3 ranks on 2 cores did
// this; counted as no skew, the run replayed 13% long).
TEST(CalibrateTest, ARankThatStartsAfterThePaceSetterSeesAShorterStep) {
  const SimModel truth = Truth();
  const NetworkModel network = TwoRankNetwork();
  trace::TraceView view = TwoRankView(2);
  const reducer::BucketAssignment plan = Plan({{3, 2, 1, 0}});
  const StepTimeline s = SimulateStep(truth, plan, network, 2, {});
  for (int it = 0; it < 6; ++it) {
    const double t0 = 10000.0 * it;
    Record(s, it, t0, view.ranks[0]);
    Record(s, it, t0, view.ranks[1]);
    for (trace::TraceItem& phase : view.ranks[1].phases) {
      if (phase.iteration != it) continue;
      if (phase.name == "forward") phase.start_us += 500;
      if (phase.name == "backward") phase.end_us -= 100;
    }
    for (int r = 0; r < 2; ++r) {
      view.ranks[r].phases.push_back({.name = "finalize",
                                      .start_us = t0 + s.backward_end_us,
                                      .end_us = t0 + s.comm_end_us + 1000.0 * r,
                                      .iteration = it});
    }
  }
  SimModel model = Truth();
  absl::StatusOr<Calibration> c = Calibrate(view, "synthetic", model);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(model.start_skew_us, -500);
  EXPECT_DOUBLE_EQ(model.finalize_us, 1000);
  const SelfCheck check = ReplayItself(c->replays, c->network, 2, {}, c->interference);
  EXPECT_EQ(check.iterations, 4);
  EXPECT_NEAR(check.measured_us, s.comm_end_us + 1000 - 500, 1e-6);
  EXPECT_NEAR(check.replayed_us, check.measured_us, 1e-6);
}

// A run the model itself made, alternating two bucket plans, with finalize traced: each
// iteration replayed at the plan it ran gives its measured step back (the self-check a
// calibration reports), and one replayed at another plan would not.
TEST(CalibrateTest, TheCalibrationRunReplayedAtItsOwnPlansGivesItsStepsBack) {
  SimModel truth = Truth();
  truth.finalize_us = 300;
  const NetworkModel network = TwoRankNetwork();
  const Interference rates = {.comm_rate = 0.5, .compute_rate = 0.8};
  const std::vector<reducer::BucketAssignment> plans = {Plan({{3}, {2}, {1}, {0}}),
                                                        Plan({{3, 2, 1, 0}})};
  trace::TraceView view = TwoRankView(1);
  std::vector<double> steps;
  for (int it = 0; it < 8; ++it) {
    const StepTimeline s = SimulateStep(truth, plans[it % 2], network, 2, {}, rates);
    const double t0 = 10000.0 * it;
    RecordWithFinalize(s, it, t0, truth.finalize_us, view.ranks[0]);
    // The optimizer after it is not part of a step as measured.
    view.ranks[0].phases.push_back({.name = "optimizer",
                                    .start_us = t0 + s.comm_end_us + truth.finalize_us,
                                    .end_us = t0 + s.comm_end_us + truth.finalize_us + 200,
                                    .iteration = it});
    if (it > 1) steps.push_back(s.comm_end_us + truth.finalize_us);  // after the warm-up
  }
  SimModel model = Truth();
  absl::StatusOr<Calibration> c = Calibrate(view, "synthetic", model);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->replays.size(), 6u);
  for (size_t i = 0; i < c->replays.size(); ++i) {
    EXPECT_EQ(c->replays[i].plan.buckets, plans[i % 2].buckets) << i;
    EXPECT_NEAR(c->replays[i].measured_step_us, steps[i], 1e-6) << i;
  }
  const SelfCheck check = ReplayItself(c->replays, c->network, 2, {}, c->interference);
  EXPECT_EQ(check.iterations, 6);
  EXPECT_NEAR(check.measured_us, Median(steps), 1e-6);
  EXPECT_NEAR(check.replayed_us, check.measured_us, 1e-6);
  // The two plans' steps differ, so the run's steps spread, as Spread measures it.
  EXPECT_GT(check.spread, 0.01);
  EXPECT_NEAR(check.spread, Spread(steps), 1e-12);
  // Every iteration at the bucket-per-gradient plan: not the steps measured.
  std::vector<Replay> one_plan = c->replays;
  for (Replay& r : one_plan) r.plan = plans[0];
  EXPECT_GT(std::abs(ReplayItself(one_plan, c->network, 2, {}, c->interference).replayed_us -
                     check.measured_us),
            1);
}

// A noisy series' spread: its interquartile range over its median (nearest ranks), NaNs and
// outliers left out, none for fewer than four.
TEST(CalibrateTest, ASpreadIsTheInterquartileRangeOverTheMedian) {
  EXPECT_DOUBLE_EQ(Spread({8, 1, 7, 2, 6, 3, 5, 4}), (7.0 - 3.0) / 5.0);
  EXPECT_DOUBLE_EQ(Spread({10, 10, 10, 10, 10, 1000}), 0);  // one outlier: no spread
  EXPECT_DOUBLE_EQ(Spread({1, 2, 3, std::nan(""), 4}), (4.0 - 2.0) / 3.0);
  EXPECT_EQ(Spread({1, 2, 3}), 0);
  EXPECT_EQ(Spread({0, 0, 0, 0}), 0);
}

// The simulator's median is the one its validation measures steps with (Python's
// statistics.median): of an even count, the mean of the middle two.
TEST(CalibrateTest, AMedianOfAnEvenCountIsTheMeanOfTheMiddleTwo) {
  EXPECT_DOUBLE_EQ(Median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(Median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(Median({1, std::nan(""), 5}), 3);  // the NaN left out
  EXPECT_EQ(Median({}), 0);
}

// Without each gradient's bucket (a PyTorch profiler trace without its plan) nothing is
// replayed: the check says so rather than guessing a plan.
TEST(CalibrateTest, ATraceWithoutBucketsIsNotReplayed) {
  const NetworkModel network = TwoRankNetwork();
  trace::TraceView view = TwoRankView(1);
  for (int it = 0; it < 4; ++it) {
    const StepTimeline s = SimulateStep(Truth(), Plan({{3, 2, 1, 0}}), network, 2, {}, {});
    Record(s, it, 10000.0 * it, view.ranks[0]);
    view.ranks[0].phases.push_back({.name = "finalize",
                                    .start_us = 10000.0 * it + s.backward_end_us,
                                    .end_us = 10000.0 * it + s.comm_end_us,
                                    .iteration = it});
  }
  for (trace::TraceItem& h : view.ranks[0].hooks) h.bucket = -1;
  SimModel model = Truth();
  absl::StatusOr<Calibration> c = Calibrate(view, "synthetic", model);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(ReplayItself(c->replays, c->network, 2, {}, c->interference).iterations, 0);
}

// Collectives beside backward at full speed, but in one iteration of eight the first one stalls
// until backward's end (as a small one does when backward holds the shared cores): the rate is
// the work done over the time spent beside backward, so the stall counts for its time; a median
// of each collective's rate would not see it.
TEST(CalibrateTest, ACollectiveThatStallsBesideBackwardCountsForItsTime) {
  const SimModel truth = Truth();
  const NetworkModel network = TwoRankNetwork();
  const std::vector<reducer::BucketAssignment> plans = {Plan({{3}, {2}, {1}, {0}}),
                                                        Plan({{3, 2, 1, 0}})};
  trace::TraceView view = TwoRankView(1);
  for (int it = 0; it < 8; ++it) {
    const StepTimeline s = SimulateStep(truth, plans[it % 2], network, 2, {}, {});
    Record(s, it, 10000.0 * it, view.ranks[0]);
    if (it == 4) {
      trace::TraceItem& first = view.ranks[0].collectives[view.ranks[0].collectives.size() - 4];
      ASSERT_LT(first.end_us, 10000.0 * it + s.backward_end_us);
      first.end_us = 10000.0 * it + s.backward_end_us;  // done only as backward ends
    }
  }
  SimModel model = Truth();
  absl::StatusOr<Calibration> c = Calibrate(view, "synthetic", model);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_LT(c->interference.comm_rate, 0.9);
  EXPECT_GT(c->interference.comm_rate, 0.1);
}

TEST(CalibrateTest, WithoutGradientsSeenBothWaysTheComputeRateIsNotGuessed) {
  const SimModel truth = Truth();
  const NetworkModel network = TwoRankNetwork();
  trace::TraceView view = TwoRankView(1);
  for (int it = 0; it < 4; ++it) {
    Record(SimulateStep(truth, Plan({{3, 2, 1, 0}}), network, 2, {}, {}), it, 10000.0 * it,
           view.ranks[0]);
  }
  SimModel model = Truth();
  absl::StatusOr<Calibration> c = Calibrate(view, "synthetic", model);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->interference.compute_rate, 1);
  EXPECT_NE(c->summary.find("not measurable"), std::string::npos) << c->summary;
}

TEST(CalibrateTest, AnotherModelsTraceIsNamedAsSuch) {
  trace::TraceView view;
  view.ranks.resize(1);
  const NetworkModel network = TwoRankNetwork();
  Record(SimulateStep(Truth(), Plan({{3, 2, 1, 0}}), network, 2, {}, {}), 1, 0, view.ranks[0]);
  SimModel other = Truth();
  other.params.pop_back();
  other.grad_ready_order = {2, 1, 0};
  absl::StatusOr<Calibration> c = Calibrate(view, "t.json", other);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("t.json"), std::string::npos);
  EXPECT_NE(c.status().message().find("one gradient hook per parameter (3)"), std::string::npos)
      << c.status();
}

// Traces no run would write — spans of any length, in any order, overlapping, empty, huge —
// give a profile or a one-line error, and the step simulated with any profile given ends with
// finite times: never a crash or a hang.
TEST(CalibrateTest, AnyTraceGivesAProfileOrAnErrorAndTheStepEnds) {
  std::mt19937 rng(7);
  auto time = [&rng] {
    const double scales[] = {0, 1e-3, 1, 1e3, 1e6, 1e12};
    return std::uniform_real_distribution<double>(0, scales[rng() % 6])(rng);
  };
  int profiles = 0, replayed = 0;
  for (int trial = 0; trial < 500; ++trial) {
    trace::TraceView view;
    view.world_size = 2;
    view.ranks.resize(1 + rng() % 2);
    for (size_t r = 0; r < view.ranks.size(); ++r) {
      trace::RankView& rank = view.ranks[r];
      rank.rank = static_cast<int>(r);
      for (int it = 0; it < 3; ++it) {
        for (const char* phase : {"forward", "backward", "finalize", "unused search"}) {
          if (rng() % 5 == 0) continue;
          const double a = time();
          rank.phases.push_back(
              {.name = phase, .start_us = a, .end_us = a + time(), .iteration = it});
        }
        for (int p = 0; p < 4; ++p) {
          const double at = time();
          // Mostly a whole plan (p0, p1 | p2, p3), else any bucket number or none.
          const int buckets[] = {-1, 0, 1, 2, 3, 1 << 30};
          rank.hooks.push_back({.name = "h",
                                .start_us = at,
                                .end_us = at,
                                .iteration = it,
                                .bucket = rng() % 4 ? p / 2 : buckets[rng() % 6],
                                .param = static_cast<int>(rng() % 5) - (rng() % 9 == 0)});
        }
        for (int c = static_cast<int>(rng() % 4); c > 0; --c) {
          const double a = time();
          trace::TraceItem item{.name = "allreduce",
                                .start_us = a,
                                .end_us = a + time(),
                                .iteration = it,
                                .bucket = static_cast<int>(rng() % 4) - 1,
                                .purpose = "bucket"};
          item.bytes = static_cast<int64_t>(time());
          item.queued_us = rng() % 3 == 0 ? -1 : time();
          rank.collectives.push_back(item);
        }
        // Bucket stamps with any bucket number, a huge one included (it must not size a vector).
        for (int b = static_cast<int>(rng() % 4); b > 0; --b) {
          const double at = time();
          const int buckets[] = {-1, 0, 1, 2, 3, 1 << 30};
          rank.instants.push_back({.name = "bucket",
                                   .start_us = at,
                                   .end_us = at,
                                   .iteration = it,
                                   .bucket = buckets[rng() % 6],
                                   .event = rng() % 2 ? "launched" : "reduced"});
        }
      }
    }
    if (rng() % 2) view.other_data = {{"ranks", {{{"ddp_options", {{"comm_hook", "fp16"}}}}}}};
    SimModel model = Truth();
    absl::StatusOr<Calibration> c = Calibrate(view, "random", model);
    if (!c.ok()) {
      EXPECT_EQ(c.status().message().find('\n'), std::string::npos) << c.status();
      continue;
    }
    ++profiles;
    EXPECT_GT(c->interference.comm_rate, 0);
    EXPECT_LE(c->interference.compute_rate, 1);
    for (const Hook& hook : {Hook{}, Hook{.kind = Hook::kFp16}}) {
      const StepTimeline s =
          SimulateStep(model, Plan({{3}, {2}, {1, 0}}), c->network, 2, hook, c->interference);
      EXPECT_TRUE(std::isfinite(s.step_us)) << c->summary;
      // The run replayed at the plans its hooks name (none where they name no whole plan).
      const SelfCheck check = ReplayItself(c->replays, c->network, 2, hook, c->interference);
      EXPECT_TRUE(std::isfinite(check.replayed_us) && std::isfinite(check.measured_us));
      replayed += check.iterations > 0;
    }
  }
  EXPECT_GT(profiles, 0);  // some random traces are usable, so the step is exercised too
  EXPECT_GT(replayed, 0);  // and some name whole plans, so the replay is too
}

}  // namespace
}  // namespace ddpkit::jobs::sim::calibrate_test
