// `ddpkit simulate --calibrate`: the compute profile, the network profile and how much the two
// slow each other when they overlap, all measured from one short traced run on the user's
// machine — a ddpkit --trace, or a PyTorch DDP job's profiler traces (trace/read_traces.h).
//
// From the iterations after DDP's first two, its warm-up (trace_samples.h), every rank pooled:
//  * an allreduce alone: time = a + b·bytes fitted to the medians, per size, of the bucket
//    allreduces that started after backward ended (nothing computes beside them);
//  * a collective's speed during backward: the ones that started before backward's end did
//    (their cost alone - their time after backward) in their time during backward, summed;
//  * backward alone and its speed beside a collective: a gradient's gap to the one before, g,
//    with a share f of it beside a collective, did w = g·(1 - f) + g·f·rate of its work; the
//    rate is the one that fits all gaps best, w each gradient's median. Only gradients seen
//    both with and without a collective beside them tell the rate apart from w; with none it
//    stays 1 and the gaps are taken as measured (the summary says so).
//  * the compute is each iteration's slowest rank's (forward + backward): a synchronous step
//    goes at its pace, and ranks sharing cores take turns at being slowest. A collective starts
//    when the last rank in the trace started it: before that a rank waits for its peers, it does
//    not send.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "reducer/bucket_assignment.h"
#include "tools/jobs/simulate/network.h"
#include "tools/jobs/simulate/sim_model.h"
#include "tools/jobs/simulate/step_model.h"
#include "tools/trace/trace_view.h"

namespace ddpkit::jobs::sim {

// One calibration iteration to replay: its own compute (each gradient's gap with the
// interference taken out, forward, finalize's copies; the optimizer is the median's, which no
// plan changes) and how much longer than the fitted cost alone its allreduces took. A step's
// parts are skewed (a slow allreduce, a preempted gradient), and the median of their sum is more
// than the sum of their medians: simulating every iteration and reporting the median step keeps
// that (simulate.h, SimulateConfig).
struct Replay {
  SimModel model;
  // Its allreduces that ran alone, as the rank whose step is measured saw them: their times less
  // their fitted costs, summed (calibrate.cc, CommExcess). That rank waits for it once, after
  // the last collective (WithExcess).
  double comm_excess_us = 0;
  reducer::BucketAssignment plan = {};  // the buckets it ran (empty: the trace does not say)
  double measured_step_us = -1;         // its step as measured, optimizer left out (-1: not traced)
};

struct Calibration {
  int world_size = 0;    // the traced run's
  NetworkModel network;  // the allreduce alone, at the trace's world size
  Interference interference;
  std::vector<Replay> replays;  // one per iteration learned from
  std::string summary;          // what was measured, and from how many samples, in words
  // The smallest and largest allreduce the price alone was fitted to, in bytes: beyond them the
  // price is the line's extrapolation (simulate.cc, PriceRangeNote).
  double priced_min_bytes = 0, priced_max_bytes = 0;
  // Sizes the run's bucket allreduces had but none ran alone at, though some ran after their own
  // rank's backward: beside a lagging rank's, every time, so none priced them.
  std::vector<double> unpriced_bytes;
};

// Sets `model`'s compute profile (medians over the iterations) (each gradient's backward alone, the
// tail, forward, optimizer, the observed grad-ready order) and returns the rest. InvalidArgument
// naming `what` when the trace is not this model's, or has no bucket allreduce with its size.
// `hook`: the comm hook simulated (--hook), to replay the run with when it is the run's own.
absl::StatusOr<Calibration> Calibrate(const trace::TraceView& view, const std::string& what,
                                      SimModel& model, const Hook& hook = {});

// The replay's model with its allreduces' excess over the fit waited for after its last
// collective (SimModel::comm_wait_us): communication time, whatever DDP's options.
SimModel WithExcess(const Replay& r);

// The calibration run predicted again: each replayed iteration simulated at the bucket plan it
// ran, beside its step as measured — the model's error on the very run it learned from, which
// bounds how close a prediction of another run can be. Medians over the iterations that have
// both; `iterations` 0 when none has. `spread`: the measured steps' interquartile range over
// their median (Spread), the run's own noise.
struct SelfCheck {
  int iterations = 0;
  double measured_us = 0, replayed_us = 0;
  double spread = 0;
};
SelfCheck ReplayItself(const std::vector<Replay>& replays, const NetworkModel& network, int world,
                       const Hook& hook, const Interference& interference);

}  // namespace ddpkit::jobs::sim
