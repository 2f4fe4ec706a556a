// One rank's flight-recorder dump as `ddpkit fr analyze` compares it, whichever recorder wrote
// it (ddpkit's comm/flight_recorder_dump.h or PyTorch's): its entries in one process group,
// keyed by sequence number, and the calls they record.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "comm/types.h"
#include "tools/jobs/fr/fr_report.pb.h"

namespace ddpkit::jobs {

// What a PyTorch entry says about its call: ranks that issued the same collective agree on all.
struct TorchCall {
  std::string op;  // profiling_name: "gloo:all_reduce", "nccl:all_reduce", ...
  std::string input_sizes, input_dtypes, output_sizes, output_dtypes;  // as JSON text
};

struct Dump {
  int rank = 0;
  int world_size = 1;
  std::string reason;
  std::map<int64_t, FrEntry> entries;
  std::map<int64_t, comm::CollectiveFingerprint> calls;  // ddpkit's dumps: the entries' calls
  std::map<int64_t, TorchCall> torch_calls;              // PyTorch's dumps
};

}  // namespace ddpkit::jobs
