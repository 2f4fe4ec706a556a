#include "tools/jobs/simulate/step_model.h"

#include <algorithm>

namespace ddpkit::jobs::sim {

std::vector<double> BucketPayloads(const SimModel& model, const std::vector<size_t>& bucket,
                                   const Hook& hook) {
  double plain = 0, p_bytes = 0, q_bytes = 0;
  for (size_t i : bucket) {
    const SimParam& param = model.params[i];
    const double bytes = static_cast<double>(param.nbytes());
    if (hook.kind == Hook::kFp16) {
      // fp16_compress_hook casts to half precision; half or bfloat16 gradients stay as they are.
      plain += param.dtype == DType::kFloat32 || param.dtype == DType::kFloat64
                   ? 2.0 * param.numel()
                   : bytes;
      continue;
    }
    const double rows = static_cast<double>(param.rows()), cols = static_cast<double>(param.cols());
    const bool compress = hook.kind == Hook::kPowerSgd && param.shape.size() > 1 &&
                          rows * cols >= (rows + cols) * hook.rank * hook.min_compression_rate;
    if (!compress) {
      plain += bytes;
      continue;
    }
    p_bytes += rows * hook.rank * 4;  // P and Q are float32
    q_bytes += cols * hook.rank * 4;
  }
  std::vector<double> payloads;
  if (plain > 0 || hook.kind != Hook::kPowerSgd) payloads.push_back(plain);
  if (p_bytes > 0) payloads.push_back(p_bytes), payloads.push_back(q_bytes);
  return payloads;
}

namespace {

// The collectives to run, in launch order, each with its cost alone (the network's price).
struct Pending {
  int bucket;
  double bytes, alone_us;
};

std::vector<Pending> PlanCollectives(const SimModel& model, const reducer::BucketAssignment& plan,
                                     const NetworkModel& network, int world, const Hook& hook) {
  std::vector<Pending> out;
  for (size_t b = 0; b < plan.buckets.size(); ++b) {
    const size_t first = out.size();
    for (double bytes : BucketPayloads(model, plan.buckets[b], hook)) {
      out.push_back({static_cast<int>(b), bytes, network.AllreduceUs(bytes, world)});
    }
    if (out.size() > first) out[first].alone_us += HookComputeUs(model, plan.buckets[b], hook);
  }
  return out;
}

// Backward as work items in grad-ready order (each gradient's compute, then the tail) and the
// communication stream, advanced together from event to event: the next gradient done or the
// running collective done. Each goes at its interference rate while the other is running.
class StepRun {
 public:
  StepRun(const SimModel& model, const reducer::BucketAssignment& plan,
          std::vector<Pending> collectives, const Interference& rates, StepTimeline& t)
      : model_(model), queue_(std::move(collectives)), rates_(rates), t_(t) {
    left_in_bucket_.resize(plan.buckets.size());
    for (size_t b = 0; b < plan.buckets.size(); ++b) {
      left_in_bucket_[b] = plan.buckets[b].size();
      for (size_t p : plan.buckets[b]) t_.param_bucket[p] = static_cast<int>(b);
    }
    t_.bucket_ready_us.assign(plan.buckets.size(), -1);
    work_left_ = NextWork();
  }

  void Run(double start_us) {
    now_ = start_us;
    while (backward_running() || running_ >= 0 || next_ < queue_.size()) {
      if (running_ < 0 && next_ < queue_.size() && t_.bucket_ready_us[queue_[next_].bucket] >= 0) {
        running_ = static_cast<int>(next_++);
        comm_left_ = queue_[running_].alone_us;
        t_.collectives.push_back({queue_[running_].bucket, now_, now_, queue_[running_].bytes});
      }
      const double compute_speed = running_ >= 0 ? rates_.compute_rate : 1;
      const double comm_speed = backward_running() ? rates_.comm_rate : 1;
      const double to_grad = backward_running() ? work_left_ / compute_speed : kNever;
      const double to_comm = running_ >= 0 ? comm_left_ / comm_speed : kNever;
      const double dt = std::min(to_grad, to_comm);
      // Nothing runs and nothing can start (every bucket was sent), or a time that is not a
      // number (a profile gone wrong must not spin here forever).
      if (dt == kNever || !(dt >= 0)) break;
      now_ += dt;
      work_left_ -= dt * compute_speed, comm_left_ -= dt * comm_speed;
      if (to_grad <= to_comm) FinishWork();
      if (to_comm <= to_grad) {
        t_.collectives.back().end_us = now_;
        running_ = -1;
      }
    }
  }

 private:
  static constexpr double kNever = 1e300;
  bool backward_running() const { return grad_ <= model_.grad_ready_order.size(); }

  double NextWork() const {
    return grad_ < model_.grad_ready_order.size()
               ? model_.params[model_.grad_ready_order[grad_]].backward_us
               : model_.backward_tail_us;
  }

  // A gradient is ready (its bucket too, with its last one), or backward's tail is done.
  void FinishWork() {
    if (grad_ == model_.grad_ready_order.size()) {
      t_.backward_end_us = now_;
      ++grad_;
      return;
    }
    const size_t p = model_.grad_ready_order[grad_++];
    t_.grad_ready_us[p] = now_;
    const int b = t_.param_bucket[p];
    if (b >= 0 && --left_in_bucket_[b] == 0) t_.bucket_ready_us[b] = now_;
    work_left_ = NextWork();
  }

  const SimModel& model_;
  std::vector<Pending> queue_;
  Interference rates_;
  StepTimeline& t_;
  std::vector<size_t> left_in_bucket_;
  double now_ = 0, work_left_ = 0, comm_left_ = 0;
  size_t grad_ = 0, next_ = 0;
  int running_ = -1;  // the collective on the stream, an index into queue_
};

}  // namespace

double HookComputeUs(const SimModel& model, const std::vector<size_t>& bucket, const Hook& hook) {
  if (hook.kind == Hook::kNone || model.copy_us_per_byte <= 0) return 0;
  double us = 0;
  for (size_t i : bucket) {
    const SimParam& p = model.params[i];
    const double bytes = static_cast<double>(p.nbytes());
    if (hook.kind == Hook::kFp16) {
      us += 2 * bytes * model.copy_us_per_byte;
      continue;
    }
    const double rows = static_cast<double>(p.rows()), cols = static_cast<double>(p.cols());
    if (p.shape.size() < 2 || rows * cols < (rows + cols) * hook.rank * hook.min_compression_rate) {
      continue;  // sent as it is
    }
    const double flops_us =
        model.flops_per_us > 0 ? 6 * rows * cols * hook.rank / model.flops_per_us : 0;
    us += std::max(2.5 * bytes * model.copy_us_per_byte, flops_us);
  }
  return us;
}

StepTimeline SimulateStep(const SimModel& model, const reducer::BucketAssignment& plan,
                          const NetworkModel& network, int world, const Hook& hook,
                          const Interference& interference) {
  StepTimeline t;
  t.forward_end_us = model.forward_us;
  t.grad_ready_us.assign(model.params.size(), 0);
  t.param_bucket.assign(model.params.size(), -1);
  StepRun run(model, plan, PlanCollectives(model, plan, network, world, hook), interference, t);
  run.Run(model.forward_us);
  for (const Collective& c : t.collectives) {
    t.comm_us += c.end_us - c.start_us, t.bytes_sent += c.bytes;
  }
  const double stream_end = t.collectives.empty() ? 0 : t.collectives.back().end_us;
  t.comm_end_us = std::max(t.backward_end_us, stream_end);
  t.exposed_us = t.comm_end_us - t.backward_end_us;
  t.overlapped_us = t.comm_us - t.exposed_us;
  t.step_us = t.comm_end_us + model.finalize_us + model.optimizer_us;
  t.compute_us = model.forward_us + model.BackwardUs() + model.finalize_us + model.optimizer_us;
  t.slowdown_us = t.backward_end_us - model.forward_us - model.BackwardUs();
  return t;
}

double NoSyncMicroBatchUs(const SimModel& model) { return model.forward_us + model.BackwardUs(); }

}  // namespace ddpkit::jobs::sim
