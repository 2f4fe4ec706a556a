// A simulated step as a trace, so `ddpkit trace svg`'s drawing shows it unchanged.
#include "tools/jobs/simulate/simulate.h"
#include "tools/trace/timeline.h"

namespace ddpkit::jobs {
namespace {

using sim::StepTimeline;
using trace::TraceItem;

// Appends one iteration's phases, hooks and collectives starting at `t0`.
void AddIteration(const sim::SimModel& model, const StepTimeline& s, int iteration, double t0,
                  trace::RankView& rank) {
  auto phase = [&](const std::string& name, double a, double b) {
    if (b > a)
      rank.phases.push_back(
          {.name = name, .start_us = t0 + a, .end_us = t0 + b, .iteration = iteration});
  };
  phase("forward", 0, s.forward_end_us);
  phase("backward", s.forward_end_us, s.backward_end_us);
  phase("finalize", s.backward_end_us, s.comm_end_us);
  phase("optimizer", s.comm_end_us, s.step_us);
  for (const sim::Collective& c : s.collectives) {
    rank.collectives.push_back({.name = "allreduce",
                                .start_us = t0 + c.start_us,
                                .end_us = t0 + c.end_us,
                                .iteration = iteration,
                                .bucket = c.bucket,
                                .purpose = "bucket",
                                .op = "sum",
                                .bytes = static_cast<int64_t>(c.bytes)});
  }
  for (size_t p = 0; p < model.params.size(); ++p) {
    rank.hooks.push_back({.name = model.params[p].name,
                          .start_us = t0 + s.grad_ready_us[p],
                          .end_us = t0 + s.grad_ready_us[p],
                          .iteration = iteration,
                          .bucket = s.param_bucket[p],
                          .param = static_cast<int>(p)});
  }
}

}  // namespace

absl::StatusOr<std::string> SimulatedTimelineSvg(const sim::SimModel& model,
                                                 const StepTimeline& first,
                                                 const StepTimeline& rebuilt, int world,
                                                 const std::string& title) {
  trace::TraceView view;
  view.job = "simulate";
  view.backend = title;
  view.world_size = world;
  trace::RankView rank;
  AddIteration(model, first, 0, 0, rank);
  AddIteration(model, rebuilt, 1, first.step_us, rank);
  rank.instants.push_back(
      {.name = "rebuild", .start_us = first.step_us, .end_us = first.step_us, .iteration = 1});
  view.ranks.push_back(std::move(rank));
  return trace::TimelineSvg(view, {.first_iteration = 0, .end_iteration = 2});
}

}  // namespace ddpkit::jobs
