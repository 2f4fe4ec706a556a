// The job behind `ddpkit simulate`: DDP's step on N ranks predicted from a model (its
// parameters, gradient order and compute profile) and a network profile, for a list of world
// sizes, one bucket cap or a sweep of them, with a timeline picture of one simulated step.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "reducer/ddp_options.h"
#include "tools/jobs/simulate/calibrate.h"
#include "tools/jobs/simulate/network.h"
#include "tools/jobs/simulate/sim_model.h"
#include "tools/jobs/simulate/simulate_report.pb.h"
#include "tools/jobs/simulate/step_model.h"

namespace ddpkit::jobs {

struct SimulateConfig {
  sim::SimModel model;  // with its compute profile applied
  sim::NetworkModel network;
  sim::Interference interference;  // from --calibrate, or none
  // From --calibrate: every measured iteration simulated with its own times, the median step
  // reported (calibrate.h, Replay); empty: `model` alone.
  std::vector<sim::Replay> replays;
  int calibration_world = 0;  // the calibration run's world size (0: not replayed as measured)
  std::string calibration;    // what --calibrate measured, for the report ("" without)
  // From --calibrate: the sizes of the allreduces its price was fitted to (0: none, or a
  // --network replaced it), to say where a plan's buckets lie beyond them.
  double priced_min_bytes = 0, priced_max_bytes = 0;
  std::vector<double> unpriced_bytes;  // sizes the calibration's runs had but never alone
  std::vector<int> world_sizes = {2, 8, 64, 1024};
  // Whose DDP plans the buckets, and the caps (only these fields of the options are read).
  reducer::DdpOptions ddp;
  bool sweep_caps = false;  // each of `caps` passed as bucket_cap_mb
  std::vector<double> caps = {1, 2, 5, 10, 15, 25, 50, 100, 200};
  int no_sync_every = 1;  // K: K - 1 micro-batches under no_sync, then a synced one
  sim::Hook hook;
  // --round-robin-groups K and --collective-share: the streams the collectives run on.
  sim::Streams streams;
  std::string svg_path;  // "": no picture; else the largest world's step under `ddp`
};

absl::StatusOr<SimulateReport> Simulate(const SimulateConfig& config);

// The model as DDP runs it under `options`: find_unused_parameters without static_graph adds
// the graph search to forward; gradient_as_bucket_view drops finalize's copies out of the
// buckets (the gradients are the buckets).
sim::SimModel AsDdpRunsIt(const sim::SimModel& model, const reducer::DdpOptions& options);

// DDP's plan after its rebuild: the grad-ready order walked under the options' limits.
reducer::BucketAssignment RebuiltPlan(const sim::SimModel& model,
                                      const reducer::DdpOptions& options);
// DDP's plan before it: one bucket per dtype (a cap list: the list), reverse registration order.
reducer::BucketAssignment InitialPlan(const sim::SimModel& model,
                                      const reducer::DdpOptions& options);

// The plan DDP runs after its first iteration: the rebuilt one, except under
// find_unused_parameters without static_graph, which never rebuilds (PyTorch's
// should_rebuild_buckets) and keeps the initial plan.
reducer::BucketAssignment SteadyPlan(const sim::SimModel& model,
                                     const reducer::DdpOptions& options);

// Iterations 0 (initial plan) and 1 (rebuilt) of one rank of `world`, drawn as `ddpkit trace svg`
// draws a trace.
absl::StatusOr<std::string> SimulatedTimelineSvg(const sim::SimModel& model,
                                                 const sim::StepTimeline& first,
                                                 const sim::StepTimeline& rebuilt, int world,
                                                 const std::string& title);

}  // namespace ddpkit::jobs
