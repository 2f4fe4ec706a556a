#include "tools/jobs/simulate/simulate.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "autograd/base/error.h"
#include "autograd/base/file_util.h"
#include "comm/round_robin.h"
#include "reducer/distributed_data_parallel.h"

namespace ddpkit::jobs {
namespace {

using sim::StepTimeline;

std::string HookName(const sim::Hook& hook) {
  switch (hook.kind) {
    case sim::Hook::kFp16: return "fp16";
    case sim::Hook::kPowerSgd: return StrCat("powersgd:", hook.rank);
    default: return "none";
  }
}

// Where the comm hook's own work comes from, or what a calibration with another hook means.
std::string HookNote(const SimulateConfig& c) {
  const sim::SimModel& m = c.model;
  const std::string ran = m.hook_measured.empty() ? "" : StrCat("the ", m.hook_measured, " hook");
  if (c.hook.kind == sim::Hook::kNone) {
    return ran.empty() ? ""
                       : StrCat("the calibration run had ", ran,
                                ": its allreduces were the hook's, and they price this step "
                                "without one (calibrate from a run without it)");
  }
  if (sim::HookWorkMeasured(m, c.hook)) {
    return absl::StrFormat(
        "%s hook: its own work measured from the calibration run (%s), %.3f ms per MB of "
        "gradients at each bucket's launch, %.3f ms per MB after its collectives",
        HookName(c.hook), ran, m.hook_launch_us_per_byte * 1e3, m.hook_callback_us_per_byte * 1e3);
  }
  const std::string other =
      ran.empty() ? "" : StrCat(" (the calibration run had ", ran, ", not this one)");
  return m.copy_us_per_byte > 0
             ? StrCat(HookName(c.hook),
                      " hook: its own work is ESTIMATED from the copy speed and FLOP rate, "
                      "coarsely",
                      other, ": calibrate from a run with the hook to measure it")
             : StrCat(HookName(c.hook), " hook: its own work is NOT PRICED", other,
                      ": calibrate from a run with the hook to measure it");
}

// What find_unused_parameters, static_graph and gradient_as_bucket_view (and a comm hook) change
// in the step, and which of it the profiles price ("" when none is set).
std::string DdpOptionsNote(const SimulateConfig& c) {
  std::vector<std::string> notes;
  const sim::SimModel& m = c.model;
  if (std::string hook = HookNote(c); !hook.empty()) notes.push_back(std::move(hook));
  if (c.ddp.find_unused_parameters && !c.ddp.static_graph) {
    notes.push_back(
        "find_unused_parameters: DDP never rebuilds its buckets, so every iteration runs the "
        "initial plan (registration order), not the grad-ready order");
    notes.push_back(
        m.unused_search_us > 0
            ? absl::StrFormat("find_unused_parameters: the graph search, %.3f ms per forward "
                              "(measured)",
                              m.unused_search_us / 1e3)
            : "find_unused_parameters: its graph search is NOT PRICED (no \"unused search\" in a "
              "calibration trace: calibrate from a run with find_unused_parameters on)");
    notes.push_back(
        m.unused_search_us > 0
            ? "its used-map allreduce (4 bytes per parameter), launched after the last bucket "
              "and waited for at finalize's end, is not simulated on its own: its wait is in "
              "finalize's time as the calibration run (with the option on) measured it"
            : "its used-map allreduce (4 bytes per parameter), launched after the last bucket "
              "and waited for at finalize's end, is left out");
  }
  if (c.ddp.static_graph) {
    notes.push_back("static_graph: no graph search after the first iteration");
  }
  if (c.ddp.gradient_as_bucket_view) {
    notes.push_back(m.finalize_us > 0
                        ? absl::StrFormat("gradient_as_bucket_view: finalize's copies out of the "
                                          "buckets (%.3f ms, measured) dropped",
                                          m.finalize_us / 1e3)
                        : "gradient_as_bucket_view: finalize's copies are not in the profile "
                          "(only --calibrate measures them), so nothing changes");
  }
  return absl::StrJoin(notes, "; ");
}

constexpr double kMiB = 1024.0 * 1024.0;

// The options with `cap_mb` passed as bucket_cap_mb, as a user sweeping caps would pass it
// (from PyTorch 2.4 it then caps the first bucket too, so first_bucket_mb is dropped there).
reducer::DdpOptions WithCap(reducer::DdpOptions options, double cap_mb) {
  options.bucket_cap_mb = cap_mb;
  if (reducer::Follows(options.pytorch_version, reducer::DdpRule::kGivenCapCapsFirstBucket)) {
    options.first_bucket_mb.reset();
  }
  return options;
}

}  // namespace

sim::SimModel AsDdpRunsIt(const sim::SimModel& model, const reducer::DdpOptions& options) {
  sim::SimModel m = model;
  if (options.find_unused_parameters && !options.static_graph) m.forward_us += m.unused_search_us;
  if (options.gradient_as_bucket_view) m.finalize_us = 0, m.handoff_us_per_byte = 0;  // no copies
  return m;
}

namespace {

// The point for one model (the median profile, or one replayed iteration) and network.
SimPoint PointOf(const SimulateConfig& config, const sim::SimModel& model,
                 const sim::NetworkModel& network, int world, const reducer::DdpOptions& options) {
  SimulateConfig c = config;
  c.model = AsDdpRunsIt(model, options);
  c.network = network;
  const reducer::BucketAssignment plan = SteadyPlan(c.model, options);
  const StepTimeline step =
      sim::SimulateStep(c.model, plan, c.network, world, c.hook, c.interference, c.streams);
  const StepTimeline first = sim::SimulateStep(c.model, InitialPlan(c.model, options), c.network,
                                               world, c.hook, c.interference, c.streams);
  SimPoint p;
  p.set_world_size(world);
  p.set_bucket_cap_mb(static_cast<double>(reducer::LimitsOf(options).bucket_cap_bytes) / kMiB);
  p.set_buckets(static_cast<int>(plan.buckets.size()));
  p.set_step_ms(step.step_us / 1e3);
  p.set_compute_ms(step.compute_us / 1e3);
  p.set_comm_ms(step.comm_us / 1e3);
  p.set_exposed_ms(step.exposed_us / 1e3);
  p.set_overlapped_ms(step.overlapped_us / 1e3);
  p.set_slowdown_ms(step.slowdown_us / 1e3);
  p.set_first_step_ms(first.step_us / 1e3);
  // K - 1 micro-batches without communication, then the synced one (its optimizer step).
  const int k = c.no_sync_every;
  const double no_sync_us = sim::NoSyncMicroBatchUs(c.model);
  p.set_iteration_ms(((k - 1) * no_sync_us + step.step_us) / k / 1e3);
  p.set_scaling_efficiency(((k - 1) * no_sync_us + step.compute_us) / k / 1e3 / p.iteration_ms());
  p.set_bytes_per_rank(step.bytes_sent);
  return p;
}

// Two points of one plan averaged field by field: the times still add up (step = compute +
// slowdown + exposed + start skew), and the efficiency is the mean compute over the mean
// micro-batch.
SimPoint MeanOf(const SimPoint& a, const SimPoint& b) {
  SimPoint m = a;
  const auto mean = [](double x, double y) { return (x + y) / 2; };
  m.set_step_ms(mean(a.step_ms(), b.step_ms()));
  m.set_compute_ms(mean(a.compute_ms(), b.compute_ms()));
  m.set_comm_ms(mean(a.comm_ms(), b.comm_ms()));
  m.set_exposed_ms(mean(a.exposed_ms(), b.exposed_ms()));
  m.set_overlapped_ms(mean(a.overlapped_ms(), b.overlapped_ms()));
  m.set_slowdown_ms(mean(a.slowdown_ms(), b.slowdown_ms()));
  m.set_first_step_ms(mean(a.first_step_ms(), b.first_step_ms()));
  m.set_iteration_ms(mean(a.iteration_ms(), b.iteration_ms()));
  if (m.iteration_ms() > 0) {
    m.set_scaling_efficiency(
        mean(a.scaling_efficiency() * a.iteration_ms(), b.scaling_efficiency() * b.iteration_ms()) /
        m.iteration_ms());
  }
  m.set_bytes_per_rank(mean(a.bytes_per_rank(), b.bytes_per_rank()));
  return m;
}

// With replays, every calibration iteration is simulated and the median time per micro-batch
// reported: the middle iteration's point, or for an even count the mean of the middle two (the
// median a measured step is taken as; a run's noisy iterations can lie 10% apart there).
SimPoint PointAt(const SimulateConfig& c, int world, const reducer::DdpOptions& options) {
  if (c.replays.empty()) return PointOf(c, c.model, c.network, world, options);
  std::vector<SimPoint> points;
  for (const sim::Replay& r : c.replays) {
    points.push_back(PointOf(c, sim::WithExcess(r), c.network, world, options));
  }
  std::sort(points.begin(), points.end(), [](const SimPoint& a, const SimPoint& b) {
    return a.iteration_ms() < b.iteration_ms();
  });
  const size_t n = points.size();
  return n % 2 == 1 ? points[n / 2] : MeanOf(points[n / 2 - 1], points[n / 2]);
}

CapSweep SweepAt(const SimulateConfig& c, int world) {
  CapSweep sweep;
  sweep.set_world_size(world);
  for (double cap : c.caps) {
    const SimPoint p = PointAt(c, world, WithCap(c.ddp, cap));
    *sweep.add_points() = p;
    // Caps are swept in increasing order: a larger cap must win by more than 0.1%.
    if (sweep.points_size() == 1 || p.iteration_ms() < sweep.best_step_ms() * 0.999) {
      sweep.set_best_bucket_cap_mb(cap);
      sweep.set_best_step_ms(p.iteration_ms());
    }
  }
  for (const SimPoint& p : sweep.points()) {
    if (p.bucket_cap_mb() != sweep.best_bucket_cap_mb() &&
        p.iteration_ms() <= sweep.best_step_ms() * 1.001) {
      sweep.add_tied_caps_mb(p.bucket_cap_mb());
    }
  }
  return sweep;
}

absl::Status CheckConfig(const SimulateConfig& c) {
  if (c.world_sizes.empty()) return absl::InvalidArgumentError("no world size");
  for (int n : c.world_sizes) {
    if (n < 1 || n > (1 << 20)) return absl::InvalidArgumentError(StrCat("bad world size ", n));
  }
  DDPKIT_RETURN_IF_ERROR(reducer::ValidateDdpOptions(c.ddp));
  if (c.sweep_caps && !c.ddp.bucket_cap_mb_list.empty()) {
    return absl::InvalidArgumentError(
        "--sweep-caps passes each cap as bucket_cap_mb; a --bucket-cap-mb-list sets its own: "
        "give one or the other");
  }
  if (c.no_sync_every < 1) return absl::InvalidArgumentError("--no-sync-every must be >= 1");
  if (c.streams.groups < 1 || c.streams.groups > comm::kMaxRoundRobinGroups) {
    return absl::InvalidArgumentError(StrCat("--round-robin-groups must be in [1, ",
                                             comm::kMaxRoundRobinGroups, "], got ",
                                             c.streams.groups));
  }
  if (!(c.streams.share > 0 && c.streams.share <= 1)) {
    return absl::InvalidArgumentError(
        StrCat("--collective-share must be in (0, 1] (the part of the link one collective "
               "fills), got ",
               c.streams.share));
  }
  if (c.model.grad_ready_order.size() != c.model.params.size()) {
    return absl::InvalidArgumentError("the model's grad-ready order does not cover its parameters");
  }
  return absl::OkStatus();
}

// The calibration run predicted again at its own plans, with the hook it ran (calibrate.h,
// ReplayItself); a note instead when that hook is not the one simulated.
void ReplayCalibration(const SimulateConfig& c, SimulateReport& r) {
  if (c.replays.empty()) return;
  if (c.calibration_world < 1) {
    r.set_replay_note("not replayed: --network or --interference replaced what the run measured");
    return;
  }
  const std::string& ran = c.model.hook_measured;
  if (!ran.empty() && !sim::HookWorkMeasured(c.model, c.hook)) {
    r.set_replay_note(StrCat("not replayed: the calibration run had the ", ran,
                             " comm hook; give --hook ", ran, " to replay it"));
    return;
  }
  const sim::SelfCheck check =
      sim::ReplayItself(c.replays, c.network, c.calibration_world,
                        ran.empty() ? sim::Hook{} : c.hook, c.interference);
  if (check.iterations == 0) {
    r.set_replay_note(
        "not replayed: the trace does not say each gradient's bucket and each step's end (a "
        "ddpkit trace does; a PyTorch profiler trace needs --torch-plan)");
    return;
  }
  r.set_replay_iterations(check.iterations);
  r.set_replay_measured_ms(check.measured_us / 1e3);
  r.set_replay_predicted_ms(check.replayed_us / 1e3);
  r.set_replay_spread(check.spread);
}

// Sizes in MB: at most the two smallest and the two largest, joined ("3.22, 8.44", "0.10, 0.20,
// ..., 5.00, 9.00").
std::string SomeSizes(const std::set<double>& mb) {
  std::string out;
  size_t k = 0;
  for (double size : mb) {
    if (k < 2 || k + 2 >= mb.size()) {
      absl::StrAppend(&out, out.empty() ? "" : ", ", absl::StrFormat("%.2f", size));
    } else if (k == 2) {
      absl::StrAppend(&out, ", ...");
    }
    ++k;
  }
  return out;
}

// What to do about sizes outside the priced ones; `all_seen`: the calibration's runs had them,
// but never alone (a second run at the cap, whose one allreduce waited for a lagging rank).
std::string_view PriceAdvice(bool all_seen) {
  return all_seen ? "the calibration's runs have buckets of that size, but each of their "
                    "allreduces waited for another rank still in backward, so none measured it "
                    "alone: calibrate from a run at such a cap on quieter cores"
                  : "to measure those sizes, calibrate from a run at such a cap too (--calibrate "
                    "A.json,B.json)";
}

// The caps asked about (the one simulated, and the sweep's) whose plans have a bucket whose
// payload lies more than 10% outside the sizes the calibration priced its allreduce at: there
// the price extends the fitted line, which a link's cost need not follow.
std::string PriceRangeNote(const SimulateConfig& c) {
  if (c.priced_max_bytes <= 0) return "";
  std::vector<reducer::DdpOptions> asked = {c.ddp};
  if (c.sweep_caps) {
    for (double cap : c.caps) asked.push_back(WithCap(c.ddp, cap));
  }
  std::set<double> sizes;  // MB, to the hundredth: one size of several buckets said once
  std::set<double> caps;
  bool all_seen = true;  // every such size among the calibration's, none of them alone
  const auto seen = [&](double bytes) {
    return std::any_of(c.unpriced_bytes.begin(), c.unpriced_bytes.end(),
                       [&](double b) { return std::abs(bytes - b) <= 0.1 * b; });
  };
  for (const reducer::DdpOptions& options : asked) {
    for (const std::vector<size_t>& bucket : SteadyPlan(c.model, options).buckets) {
      for (double bytes : sim::BucketPayloads(c.model, bucket, c.hook)) {
        if (bytes <= c.priced_max_bytes * 1.1 && bytes >= c.priced_min_bytes / 1.1) continue;
        sizes.insert(std::round(bytes / 1e4) / 100);
        caps.insert(static_cast<double>(reducer::LimitsOf(options).bucket_cap_bytes) / kMiB);
        all_seen = all_seen && seen(bytes);
      }
    }
  }
  if (caps.empty()) return "";
  const std::string priced =
      c.priced_min_bytes == c.priced_max_bytes
          ? absl::StrFormat("the one size, %.2f MB,", c.priced_max_bytes / 1e6)
          : absl::StrFormat("the %.2f-%.2f MB", c.priced_min_bytes / 1e6, c.priced_max_bytes / 1e6);
  return absl::StrFormat(
      "bucket_cap_mb %s plan%s buckets of %s MB, outside %s the calibration priced its "
      "allreduce at: there the price extends the fitted line, which a link's cost need not "
      "follow; %s",
      absl::StrJoin(
          caps, ", ",
          [](std::string* out, double cap) { absl::StrAppend(out, absl::StrFormat("%g", cap)); }),
      caps.size() == 1 ? "s" : "", SomeSizes(sizes), priced, PriceAdvice(all_seen));
}

void Describe(const SimulateConfig& c, SimulateReport& r) {
  r.set_model(c.model.name);
  r.set_round_robin_groups(c.streams.groups);
  r.set_collective_share(c.streams.share);
  r.set_parameter_tensors(static_cast<int>(c.model.params.size()));
  r.set_parameter_bytes(c.model.TotalBytes());
  r.set_grad_ready_order(c.model.order_estimated ? "estimated: reverse registration order"
                                                 : "observed");
  r.set_compute(c.model.compute_source);
  const sim::NetworkModel& n = c.network;
  r.set_network(n.measured.empty()
                    ? StrCat(n.name, ": ", n.algorithm, ", ", n.latency_us, " us, ", n.gbytes_per_s,
                             " GB/s per rank",
                             n.ranks_per_node > 1 ? StrCat("; ", n.ranks_per_node, " per node at ",
                                                           n.intra_latency_us, " us, ",
                                                           n.intra_gbytes_per_s, " GB/s")
                                                  : "")
                    : StrCat(n.name, ": fitted at ", n.measured.size(), " world size(s)"));
  r.set_network_source(n.source);
  r.set_interference_comm_rate(c.interference.comm_rate);
  r.set_interference_compute_rate(c.interference.compute_rate);
  r.set_calibration(c.calibration);
  r.set_hook(HookName(c.hook));
  r.set_no_sync_every(c.no_sync_every);
  r.set_forward_ms(c.model.forward_us / 1e3);
  r.set_backward_ms(c.model.BackwardUs() / 1e3);
  r.set_optimizer_ms(c.model.optimizer_us / 1e3);
  const sim::SimModel as_run = AsDdpRunsIt(c.model, c.ddp);
  r.set_finalize_ms(as_run.finalize_us / 1e3);
  r.set_unused_search_ms((as_run.forward_us - c.model.forward_us) / 1e3);
  r.set_start_skew_ms(c.model.start_skew_us / 1e3);
  ReplayCalibration(c, r);
  r.set_price_note(PriceRangeNote(c));
  r.set_ddp_options(DdpOptionsNote(c));
  r.set_first_bucket_mb(static_cast<double>(reducer::LimitsOf(c.ddp).first_bucket_bytes) / kMiB);
  r.set_pytorch_rules(reducer::RulesFollowed(c.ddp.pytorch_version));
  if (const auto& recorded = c.model.recorded_rules) {
    r.set_pytorch_rules_note(*recorded == c.ddp.pytorch_version
                                 ? StrCat("the plan file's torch_version",
                                          c.model.recorded_rules_note.empty()
                                              ? ""
                                              : StrCat(": ", c.model.recorded_rules_note))
                                 : StrCat("the plan file was recorded with PyTorch ",
                                          recorded->ToString(), "; --pytorch-version chose ",
                                          c.ddp.pytorch_version.ToString()));
  }
}

absl::Status WriteSvg(const SimulateConfig& config, SimulateReport& r) {
  SimulateConfig c = config;
  c.model = AsDdpRunsIt(config.model, config.ddp);
  int world = 1;
  for (int n : c.world_sizes) world = std::max(world, n);
  const StepTimeline first = sim::SimulateStep(c.model, InitialPlan(c.model, c.ddp), c.network,
                                               world, c.hook, c.interference, c.streams);
  const StepTimeline rebuilt = sim::SimulateStep(c.model, SteadyPlan(c.model, c.ddp), c.network,
                                                 world, c.hook, c.interference, c.streams);
  DDPKIT_ASSIGN_OR_RETURN(
      const std::string svg,
      SimulatedTimelineSvg(
          c.model, first, rebuilt, world,
          StrCat("simulated on ", c.network.name, ", bucket_cap_mb ",
                 static_cast<double>(reducer::LimitsOf(c.ddp).bucket_cap_bytes) / kMiB, ", hook ",
                 HookName(c.hook), ", ", reducer::RulesFollowed(c.ddp.pytorch_version))));
  // Atomically: a picture the user kept from an earlier run is replaced whole or not at all.
  DDPKIT_RETURN_IF_ERROR(WriteFileAtomically(c.svg_path, svg));
  r.set_svg_path(c.svg_path);
  return absl::OkStatus();
}

}  // namespace

reducer::BucketAssignment RebuiltPlan(const sim::SimModel& model,
                                      const reducer::DdpOptions& options) {
  return reducer::RebuiltBucketAssignment(model.Specs(), model.grad_ready_order,
                                          reducer::LimitsOf(options));
}

reducer::BucketAssignment InitialPlan(const sim::SimModel& model,
                                      const reducer::DdpOptions& options) {
  return reducer::InitialBucketAssignment(model.Specs(), options);
}

reducer::BucketAssignment SteadyPlan(const sim::SimModel& model,
                                     const reducer::DdpOptions& options) {
  const bool rebuilds = options.static_graph || !options.find_unused_parameters;
  return rebuilds ? RebuiltPlan(model, options) : InitialPlan(model, options);
}

absl::StatusOr<SimulateReport> Simulate(const SimulateConfig& config) {
  DDPKIT_RETURN_IF_ERROR(CheckConfig(config));
  const absl::Time start = absl::Now();
  SimulateReport report;
  Describe(config, report);
  for (int world : config.world_sizes) {
    *report.add_worlds() = PointAt(config, world, config.ddp);
    if (config.sweep_caps) *report.add_sweeps() = SweepAt(config, world);
  }
  report.set_simulate_ms(absl::ToDoubleMilliseconds(absl::Now() - start));
  if (!config.svg_path.empty()) DDPKIT_RETURN_IF_ERROR(WriteSvg(config, report));
  return report;
}

}  // namespace ddpkit::jobs
