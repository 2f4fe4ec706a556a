// --calibrate measured on traces whose truth is known: steps the event model itself simulated
// with a chosen compute profile, network and interference, written out as a trace.
#include "tools/jobs/simulate/calibrate.h"

#include <cmath>
#include <random>

#include "gtest/gtest.h"
#include "tests/tools/jobs/simulate/plans.h"

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
    h.param = static_cast<int>(p);
    rank.hooks.push_back(h);
  }
  for (const Collective& c : s.collectives) {
    trace::TraceItem a = item("allreduce", c.start_us, c.end_us);
    a.purpose = "bucket", a.bucket = c.bucket, a.bytes = static_cast<int64_t>(c.bytes);
    rank.collectives.push_back(a);
  }
}

TEST(CalibrateTest, RecoversTheProfilesAndTheInterferenceItWasSimulatedWith) {
  const SimModel truth = Truth();
  NetworkModel network;
  network.measured[2] = {.a_us = 50, .b_us_per_byte = 0.01};
  const Interference rates = {.comm_rate = 0.5, .compute_rate = 0.8};
  // A bucket per gradient (all but the last overlap backward), and one bucket after it: the
  // gradients after the first are seen both beside a collective and alone, and sizes run alone.
  const std::vector<reducer::BucketAssignment> plans = {Plan({{3}, {2}, {1}, {0}}),
                                                        Plan({{3, 2, 1, 0}})};
  trace::TraceView view;
  view.world_size = 2;
  view.ranks.resize(1);
  for (int it = 0; it < 8; ++it) {
    const StepTimeline s = SimulateStep(truth, plans[it % 2], network, 2, {}, rates);
    Record(s, it, 10000.0 * it, view.ranks[0]);
  }
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
  ASSERT_EQ(c->replays.size(), 7u);  // iterations 1..7
  for (const Replay& r : c->replays) {
    EXPECT_NEAR(r.comm_scale, 1, 1e-9);
    for (size_t p = 0; p < truth.params.size(); ++p) {
      EXPECT_NEAR(r.model.params[p].backward_us, truth.params[p].backward_us, 1e-6) << p;
    }
  }
  // p3, ready first, never has a collective beside it; the other three are seen both ways.
  EXPECT_NE(c->summary.find("3 gradient(s) seen both"), std::string::npos) << c->summary;
}

TEST(CalibrateTest, WithoutGradientsSeenBothWaysTheComputeRateIsNotGuessed) {
  const SimModel truth = Truth();
  NetworkModel network;
  network.measured[2] = {.a_us = 50, .b_us_per_byte = 0.01};
  trace::TraceView view;
  view.world_size = 2;
  view.ranks.resize(1);
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
  NetworkModel network;
  network.measured[2] = {.a_us = 50, .b_us_per_byte = 0.01};
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
  int profiles = 0;
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
          rank.hooks.push_back({.name = "h",
                                .start_us = at,
                                .end_us = at,
                                .iteration = it,
                                .param = static_cast<int>(rng() % 5) - (rng() % 9 == 0)});
        }
        for (int c = static_cast<int>(rng() % 4); c > 0; --c) {
          const double a = time();
          trace::TraceItem item{.name = "allreduce",
                                .start_us = a,
                                .end_us = a + time(),
                                .iteration = it,
                                .purpose = "bucket"};
          item.bytes = static_cast<int64_t>(time());
          rank.collectives.push_back(item);
        }
      }
    }
    SimModel model = Truth();
    absl::StatusOr<Calibration> c = Calibrate(view, "random", model);
    if (!c.ok()) {
      EXPECT_EQ(c.status().message().find('\n'), std::string::npos) << c.status();
      continue;
    }
    ++profiles;
    EXPECT_GT(c->interference.comm_rate, 0);
    EXPECT_LE(c->interference.compute_rate, 1);
    const StepTimeline s =
        SimulateStep(model, Plan({{3}, {2}, {1, 0}}), c->network, 2, {}, c->interference);
    EXPECT_TRUE(std::isfinite(s.step_us)) << c->summary;
  }
  EXPECT_GT(profiles, 0);  // some random traces are usable, so the step is exercised too
}

}  // namespace
}  // namespace ddpkit::jobs::sim::calibrate_test
