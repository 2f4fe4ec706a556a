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

// The collectives to run, in launch order, each with its cost alone (the network's price), the
// hook's work after it and the hand-off to the next bucket's once backward is over (a bucket's
// last collective carries its bucket's).
struct Pending {
  int bucket;
  double bytes, alone_us, callback_us, handoff_us;
};

std::vector<Pending> PlanCollectives(const SimModel& model, const reducer::BucketAssignment& plan,
                                     const NetworkModel& network, int world, const Hook& hook) {
  std::vector<Pending> out;
  for (size_t b = 0; b < plan.buckets.size(); ++b) {
    const size_t first = out.size();
    for (double bytes : BucketPayloads(model, plan.buckets[b], hook)) {
      out.push_back({static_cast<int>(b), bytes, network.AllreduceUs(bytes, world), 0, 0});
    }
    if (out.size() > first) {
      out.back().callback_us = HookWorkUs(model, plan.buckets[b], hook).callback_us;
      out.back().handoff_us = model.handoff_us_per_byte * out.back().bytes;
    }
  }
  return out;
}

// One piece of backward's thread's work: a gradient, the launch of a bucket (its hook's work
// before the collective, 0 without a hook), or the tail after the last gradient.
struct WorkItem {
  enum Kind { kGradient, kLaunch, kTail } kind;
  size_t index;  // the parameter, or the bucket
  double us;
};

// Backward's work in order: each gradient in grad-ready order, and after the gradient that
// completes a bucket, the launch of every bucket now ready in plan order (the reducer launches
// strictly in order: a ready bucket waits for the earlier ones), then the tail.
std::vector<WorkItem> BackwardWork(const SimModel& model, const reducer::BucketAssignment& plan,
                                   const std::vector<int>& param_bucket, const Hook& hook) {
  std::vector<size_t> left(plan.buckets.size());
  std::vector<double> launch_us(plan.buckets.size());
  for (size_t b = 0; b < plan.buckets.size(); ++b) {
    left[b] = plan.buckets[b].size();
    launch_us[b] = HookWorkUs(model, plan.buckets[b], hook).launch_us;
  }
  std::vector<WorkItem> work;
  size_t next = 0;
  for (size_t p : model.grad_ready_order) {
    work.push_back({WorkItem::kGradient, p, model.params[p].backward_us});
    if (param_bucket[p] >= 0) --left[param_bucket[p]];
    for (; next < left.size() && left[next] == 0; ++next) {
      work.push_back({WorkItem::kLaunch, next, launch_us[next]});
    }
  }
  work.push_back({WorkItem::kTail, 0, model.backward_tail_us});
  return work;
}

// Backward's work items and the communication streams, advanced together from event to event:
// the current item done, or a running collective (or its hook's work after it) done. Backward
// and the collectives each go at their interference rate while the other side is running.
// Collective i runs on stream i mod K (round-robin groups: ProcessGroupRoundRobin hands call i to
// group i mod K), each stream in order; a bucket's collectives one after another (a hook chains
// them). Collectives running at once share the link: each goes at min(1, 1 / (running · share))
// of its speed alone, share being the part of the link one collective fills (Streams).
class StepRun {
 public:
  StepRun(const SimModel& model, const reducer::BucketAssignment& plan,
          std::vector<Pending> collectives, const Hook& hook, const Interference& rates,
          const Streams& streams, StepTimeline& t)
      : queue_(std::move(collectives)), rates_(rates), share_(streams.share), t_(t) {
    left_in_bucket_.resize(plan.buckets.size());
    for (size_t b = 0; b < plan.buckets.size(); ++b) {
      left_in_bucket_[b] = plan.buckets[b].size();
      for (size_t p : plan.buckets[b]) t_.param_bucket[p] = static_cast<int>(b);
    }
    t_.bucket_ready_us.assign(plan.buckets.size(), -1);
    t_.bucket_launch_us.assign(plan.buckets.size(), -1);
    t_.bucket_queued_us.assign(plan.buckets.size(), -1);
    launched_.assign(plan.buckets.size(), false);
    done_.assign(queue_.size(), false);
    lanes_.resize(std::max(1, streams.groups));
    for (size_t k = 0; k < lanes_.size(); ++k) lanes_[k].next = k;
    work_ = BackwardWork(model, plan, t_.param_bucket, hook);
    work_left_ = work_[0].us;
  }

  void Run(double start_us) {
    now_ = item_start_ = start_us;
    while (backward_running() || busy() || pending()) {
      for (Lane& lane : lanes_) {
        if (lane.running < 0 && CanStart(lane.next)) Start(lane);
      }
      // A hook's work after a collective is the machine's own compute: it runs at its own speed
      // and slows neither side (only a collective and backward contend).
      const int sending = Sending();
      const double compute_speed = sending > 0 ? rates_.compute_rate : 1;
      const double comm_speed = (sending > 0 && backward_running() ? rates_.comm_rate : 1) *
                                std::min(1.0, 1 / (std::max(sending, 1) * share_));
      const double to_work = backward_running() ? work_left_ / compute_speed : kNever;
      double to_comm = kNever;
      for (const Lane& lane : lanes_) {
        if (lane.running >= 0) to_comm = std::min(to_comm, lane.left / Speed(lane, comm_speed));
      }
      const double dt = std::min(to_work, to_comm);
      // Nothing runs and nothing can start (every bucket was sent), or a time that is not a
      // number (a profile gone wrong must not spin here forever).
      if (dt == kNever || !(dt >= 0)) break;
      now_ += dt;
      work_left_ -= dt * compute_speed;
      for (Lane& lane : lanes_) {
        if (lane.running < 0) continue;
        lane.ending = lane.left / Speed(lane, comm_speed) <= dt;
        lane.left -= dt * Speed(lane, comm_speed);
      }
      // Backward's item first: a collective that ends with backward's tail hands off to the next.
      if (to_work <= to_comm) FinishWork();
      for (Lane& lane : lanes_) {
        if (lane.running >= 0 && lane.ending) Finish(lane);
      }
    }
  }

 private:
  static constexpr double kNever = 1e300;
  // One communication stream: the collective on it (an index into queue_), what is left of it
  // (or of its hook's work after it) at full speed, and the next collective it takes.
  struct Lane {
    int running = -1;
    size_t next = 0, record = 0;  // record: its entry in t_.collectives
    double left = 0;
    bool in_callback = false, ending = false;
  };

  bool backward_running() const { return item_ < work_.size(); }
  bool busy() const {
    return std::any_of(lanes_.begin(), lanes_.end(), [](const Lane& l) { return l.running >= 0; });
  }
  bool pending() const {
    return std::any_of(lanes_.begin(), lanes_.end(),
                       [&](const Lane& l) { return l.next < queue_.size(); });
  }
  int Sending() const {
    return static_cast<int>(std::count_if(lanes_.begin(), lanes_.end(), [](const Lane& l) {
      return l.running >= 0 && !l.in_callback;
    }));
  }
  static double Speed(const Lane& lane, double comm_speed) {
    return lane.in_callback ? 1 : comm_speed;
  }
  // Its bucket launched, and the bucket's collective before it (a hook's chain) done.
  bool CanStart(size_t i) const {
    if (i >= queue_.size() || !launched_[queue_[i].bucket]) return false;
    return i == 0 || queue_[i - 1].bucket != queue_[i].bucket || done_[i - 1];
  }

  void Start(Lane& lane) {
    lane.running = static_cast<int>(lane.next);
    lane.next += lanes_.size();
    lane.left = queue_[lane.running].alone_us, lane.in_callback = false;
    lane.record = t_.collectives.size();
    t_.collectives.push_back(
        {queue_[lane.running].bucket, now_, now_, now_, queue_[lane.running].bytes});
  }

  // The collective is done: its hook's work after it starts (at its own speed, so it ends
  // callback_us on), then, where backward is over and another bucket's collective follows, the
  // hand-off to it. Or that work is done.
  void Finish(Lane& lane) {
    const Pending& p = queue_[lane.running];
    if (!lane.in_callback) {
      Collective& c = t_.collectives[lane.record];
      c.end_us = now_, c.callback_end_us = now_ + p.callback_us;
      const bool last = static_cast<size_t>(lane.running) + 1 >= queue_.size();
      const double handoff = backward_running() || last ? 0 : p.handoff_us;
      if (p.callback_us + handoff > 0) {
        lane.in_callback = true, lane.left = p.callback_us + handoff;
        return;
      }
    }
    done_[lane.running] = true;
    lane.running = -1;
  }

  // A gradient is ready (its bucket too, with its last one), a bucket is launched, or
  // backward's tail is done.
  void FinishWork() {
    const WorkItem& w = work_[item_++];
    if (w.kind == WorkItem::kTail) t_.backward_end_us = now_;
    if (w.kind == WorkItem::kLaunch) {
      launched_[w.index] = true, t_.hook_launch_us += w.us;
      t_.bucket_launch_us[w.index] = item_start_, t_.bucket_queued_us[w.index] = now_;
    }
    if (w.kind == WorkItem::kGradient) {
      t_.grad_ready_us[w.index] = now_;
      const int b = t_.param_bucket[w.index];
      if (b >= 0 && --left_in_bucket_[b] == 0) t_.bucket_ready_us[b] = now_;
    }
    if (backward_running()) work_left_ = work_[item_].us;
    item_start_ = now_;
  }

  std::vector<Pending> queue_;
  Interference rates_;
  double share_;
  StepTimeline& t_;
  std::vector<size_t> left_in_bucket_;
  std::vector<bool> launched_, done_;  // per bucket; per collective (its hook's work too)
  std::vector<Lane> lanes_;
  std::vector<WorkItem> work_;
  double now_ = 0, work_left_ = 0;
  double item_start_ = 0;  // when backward's current work item began
  size_t item_ = 0;
};

}  // namespace

bool HookWorkMeasured(const SimModel& model, const Hook& hook) {
  const std::string& m = model.hook_measured;
  switch (hook.kind) {
    case Hook::kNone: return false;
    case Hook::kFp16: return m == "fp16" || m == "bf16";
    case Hook::kPowerSgd: return m == "powersgd" || m == "batched_powersgd";
  }
  return false;
}

HookWork HookWorkUs(const SimModel& model, const std::vector<size_t>& bucket, const Hook& hook) {
  if (!HookWorkMeasured(model, hook)) return {0, HookComputeUs(model, bucket, hook)};
  double bytes = 0;
  for (size_t i : bucket) bytes += static_cast<double>(model.params[i].nbytes());
  return {bytes * model.hook_launch_us_per_byte, bytes * model.hook_callback_us_per_byte};
}

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
                          const Interference& interference, const Streams& streams) {
  StepTimeline t;
  t.forward_end_us = model.forward_us;
  t.grad_ready_us.assign(model.params.size(), 0);
  t.param_bucket.assign(model.params.size(), -1);
  StepRun run(model, plan, PlanCollectives(model, plan, network, world, hook), hook, interference,
              streams, t);
  run.Run(model.forward_us);
  // Busy time is the union of the collectives' spans (on one stream they never overlap).
  double busy_until = -1e300, last_end = 0;
  for (const Collective& c : t.collectives) {
    t.comm_us += std::max(0.0, c.callback_end_us - std::max(c.start_us, busy_until));
    busy_until = std::max(busy_until, c.callback_end_us), t.bytes_sent += c.bytes;
    last_end = std::max(last_end, c.callback_end_us);
  }
  // A replayed iteration's collectives ended comm_wait_us later (or sooner) than priced.
  const double wait = t.collectives.empty() ? 0 : std::max(model.comm_wait_us, -t.comm_us);
  t.comm_us += wait;
  const double stream_end = t.collectives.empty() ? 0 : last_end + wait;
  t.comm_end_us = std::max(t.backward_end_us, stream_end);
  t.exposed_us = t.comm_end_us - t.backward_end_us;
  t.overlapped_us = t.comm_us - t.exposed_us;
  t.step_us = model.start_skew_us + t.comm_end_us + model.finalize_us + model.optimizer_us;
  t.compute_us = model.forward_us + model.BackwardUs() + t.hook_launch_us + model.finalize_us +
                 model.optimizer_us;
  t.slowdown_us = t.backward_end_us - model.forward_us - model.BackwardUs() - t.hook_launch_us;
  return t;
}

double NoSyncMicroBatchUs(const SimModel& model) { return model.forward_us + model.BackwardUs(); }

}  // namespace ddpkit::jobs::sim
