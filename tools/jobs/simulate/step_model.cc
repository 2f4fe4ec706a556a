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

StepTimeline SimulateStep(const SimModel& model, const reducer::BucketAssignment& plan,
                          const NetworkModel& network, int world, const Hook& hook) {
  StepTimeline t;
  t.forward_end_us = model.forward_us;
  t.grad_ready_us.assign(model.params.size(), 0);
  double now = model.forward_us;
  for (size_t p : model.grad_ready_order) {
    now += model.params[p].backward_us;
    t.grad_ready_us[p] = now;
  }
  t.backward_end_us = now + model.backward_tail_us;
  t.param_bucket.assign(model.params.size(), -1);
  double stream_free = 0;
  for (size_t b = 0; b < plan.buckets.size(); ++b) {
    double ready = 0;
    for (size_t p : plan.buckets[b]) {
      ready = std::max(ready, t.grad_ready_us[p]);
      t.param_bucket[p] = static_cast<int>(b);
    }
    t.bucket_ready_us.push_back(ready);
    // Strict order: bucket b cannot start before bucket b-1 has (one stream, in order).
    double start = std::max(ready, stream_free);
    for (double bytes : BucketPayloads(model, plan.buckets[b], hook)) {
      const double us = network.AllreduceUs(bytes, world);
      t.collectives.push_back({static_cast<int>(b), start, start + us, bytes});
      t.comm_us += us, t.bytes_sent += bytes;
      start += us;
    }
    stream_free = start;
  }
  t.comm_end_us = std::max(t.backward_end_us, stream_free);
  t.exposed_us = t.comm_end_us - t.backward_end_us;
  t.overlapped_us = t.comm_us - t.exposed_us;
  t.step_us = t.comm_end_us + model.optimizer_us;
  t.compute_us = t.backward_end_us + model.optimizer_us;
  return t;
}

double NoSyncMicroBatchUs(const SimModel& model) { return model.forward_us + model.BackwardUs(); }

}  // namespace ddpkit::jobs::sim
