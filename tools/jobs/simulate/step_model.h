// The event model of one DDP step on N identical ranks (every rank's timeline is the same, so
// one is simulated):
//  * forward, then backward: gradients become ready in the grad-ready order, each after its
//    own backward time;
//  * a bucket is ready when its last gradient is; buckets launch strictly in plan order (the
//    reducer's next_bucket_), on one communication stream, so bucket b starts at
//    max(ready_b, end of bucket b-1) — or on K round-robin groups' streams, collective i on
//    stream i mod K, which then share the link (Streams);
//  * a comm hook changes what a bucket sends: fp16 halves float32 bytes; PowerSGD rank R sends
//    the uncompressed tensors, then P (rows·R), then Q (cols·R) per matrix worth compressing;
//    and it adds work: before the bucket's collective on backward's thread (a cast down), after
//    it on the communication stream (HookWorkUs);
//  * interference: while backward and a collective run at once they share the machine (CPU
//    cores and memory bandwidth; on a GPU its SMs and HBM), so each goes at a fraction of its
//    own speed (Interference; 1 and 1 when unknown). Backward's times and a collective's cost
//    are those each takes alone; calibrate.h measures the fractions from a trace;
//  * the step is paced by the rank whose backward ends last and measured at the rank with the
//    longest step, which started SimModel::start_skew_us before the pace-setter (after it, when
//    negative);
//  * backward ends, then finalize waits for the last bucket (the exposed tail) and copies the
//    gradients out of the buckets (SimModel::finalize_us), then the optimizer runs. Every bucket is
//    ready by backward's end, so the stream is busy from then on: exposed = max(0, comm end -
//    backward end), overlapped = comm - exposed.
#pragma once

#include <string>
#include <vector>

#include "reducer/bucket_assignment.h"
#include "tools/jobs/simulate/network.h"
#include "tools/jobs/simulate/sim_model.h"

namespace ddpkit::jobs::sim {

struct Hook {
  enum Kind { kNone, kFp16, kPowerSgd } kind = kNone;
  int rank = 1;                     // PowerSGD's matrix approximation rank
  double min_compression_rate = 2;  // PowerSGD compresses a matrix only when it saves this much
};

// How much overlapped work slows down: each rate is a fraction of the work's own speed (1: no
// interference, the model of independent compute and network).
struct Interference {
  double comm_rate = 1;     // a collective's speed while backward runs beside it
  double compute_rate = 1;  // backward's speed while a collective runs beside it
};

// The communication streams: DDP's process group, or K round-robin groups (--round-robin-groups,
// comm/round_robin.h) that run up to K collectives at once. share: the part of the link's
// capacity one collective alone fills, so that collectives running at once each go at
// min(1, 1 / (running · share)) of their speed alone: 1 where one collective already fills the
// link (K groups then only split it), 1/K where K of them fill it together (a Gloo group's one
// thread, an NCCL communicator's few channels). `ddpkit bench allreduce --round-robin-groups K`
// measures it.
struct Streams {
  int groups = 1;
  double share = 1;
};

struct Collective {
  int bucket = 0;
  double start_us = 0, end_us = 0;
  double callback_end_us = 0;  // the hook's work after it done (end_us when there is none)
  double bytes = 0;
};

struct StepTimeline {
  double forward_end_us = 0;
  std::vector<double> grad_ready_us;  // per parameter (registration index)
  std::vector<double> bucket_ready_us;
  std::vector<double> bucket_launch_us;  // the reducer launches it: its hook's work starts
  std::vector<double> bucket_queued_us;  // that work done: its first collective is queued
  std::vector<int> param_bucket;         // per parameter: its bucket in the plan
  std::vector<Collective> collectives;   // in launch order
  double backward_end_us = 0;
  double comm_end_us = 0;     // last collective's end (backward's end when nothing is sent)
  double step_us = 0;         // optimizer's end, from the first rank's start (start skew in)
  double compute_us = 0;      // forward + backward + finalize's copies + optimizer, each alone
  double hook_launch_us = 0;  // of it: a comm hook's work before each bucket's collective
  double slowdown_us = 0;     // what interference added to backward
  double comm_us = 0;         // the time any stream was busy
  double exposed_us = 0;
  double overlapped_us = 0;
  double bytes_sent = 0;  // per rank, as the collectives count them
};

// The hook's own compute for one bucket, estimated from the machine's speeds (0 when the model
// does not know its copy speed): fp16 casts the bucket down and back, about two copies of it;
// PowerSGD reads each matrix it compresses about five times (error feedback, its two products,
// the decompression, the new error), two and a half copies, or does its 6·rows·cols·R FLOPs,
// whichever is longer.
double HookComputeUs(const SimModel& model, const std::vector<size_t>& bucket, const Hook& hook);

// Whether `model`'s hook work was measured from a run with `hook`'s kind (SimModel::hook_measured).
bool HookWorkMeasured(const SimModel& model, const Hook& hook);

// A hook's work for one bucket, in the two places a DDP step does it: when the reducer launches
// the bucket, on backward's thread (backward waits for it, and the collective starts after it),
// and after the bucket's collectives, on the communication stream. Measured (HookWorkMeasured),
// or else HookComputeUs, all of it after the collectives.
struct HookWork {
  double launch_us = 0, callback_us = 0;
};
HookWork HookWorkUs(const SimModel& model, const std::vector<size_t>& bucket, const Hook& hook);

// The collectives' byte counts for one bucket under `hook`, in the order they run.
std::vector<double> BucketPayloads(const SimModel& model, const std::vector<size_t>& bucket,
                                   const Hook& hook);

// One synced step with `plan` (buckets in launch order) on `world` ranks.
StepTimeline SimulateStep(const SimModel& model, const reducer::BucketAssignment& plan,
                          const NetworkModel& network, int world, const Hook& hook,
                          const Interference& interference = {}, const Streams& streams = {});

// A micro-batch under no_sync: forward and backward only, no communication, no optimizer.
double NoSyncMicroBatchUs(const SimModel& model);

}  // namespace ddpkit::jobs::sim
