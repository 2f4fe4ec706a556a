#include "comm/gloo/loop_scheduling.h"

#include <gloo/transport/tcp/device.h>
#include <sched.h>

#include <cstdlib>
#include <string_view>

#include "autograd/base/error.h"

namespace ddpkit::comm {
namespace {

// Puts the calling thread under SCHED_BATCH for its lifetime, then restores what it had. Only
// an ordinary (SCHED_OTHER) thread is changed: a real-time or idle caller keeps its policy,
// which its threads then inherit, as the user chose.
class ScopedBatchPolicy {
 public:
  ScopedBatchPolicy() {
    if (sched_getscheduler(0) != SCHED_OTHER || sched_getparam(0, &saved_) != 0) return;
    const sched_param zero{};
    changed_ = sched_setscheduler(0, SCHED_BATCH, &zero) == 0;
  }
  ~ScopedBatchPolicy() {
    if (changed_) sched_setscheduler(0, SCHED_OTHER, &saved_);
  }
  ScopedBatchPolicy(const ScopedBatchPolicy&) = delete;
  ScopedBatchPolicy& operator=(const ScopedBatchPolicy&) = delete;

 private:
  sched_param saved_{};
  bool changed_ = false;
};

}  // namespace

absl::StatusOr<GlooLoopPolicy> GlooLoopPolicyFromEnv() {
  const char* value = std::getenv("DDPKIT_GLOO_LOOP");
  if (value == nullptr || *value == '\0' || std::string_view(value) == "batch") {
    return GlooLoopPolicy::kBatch;
  }
  if (std::string_view(value) == "inherit") return GlooLoopPolicy::kInherit;
  return absl::InvalidArgumentError(
      StrCat("DDPKIT_GLOO_LOOP='", value,
             "' is not a policy for Gloo's loop thread; use batch (the default) or inherit"));
}

std::shared_ptr<gloo::transport::Device> CreateGlooDevice(const gloo::transport::tcp::attr& attr,
                                                          GlooLoopPolicy policy) {
  if (policy == GlooLoopPolicy::kInherit) return gloo::transport::tcp::CreateDevice(attr);
  ScopedBatchPolicy batch;
  return gloo::transport::tcp::CreateDevice(attr);
}

void ScheduleCommThread(GlooLoopPolicy policy) {
  if (policy == GlooLoopPolicy::kInherit || sched_getscheduler(0) != SCHED_OTHER) return;
  const sched_param zero{};
  sched_setscheduler(0, SCHED_BATCH, &zero);
}

}  // namespace ddpkit::comm
