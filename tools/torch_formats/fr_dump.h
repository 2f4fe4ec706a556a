// One rank's flight-recorder dump as `ddpkit fr analyze` compares it, whichever recorder wrote
// it (ddpkit's comm/flight_recorder_dump.h or PyTorch's): its entries in one process group,
// keyed by sequence number, and the calls they record.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "comm/types.h"
#include "tools/torch_formats/fr_entry.pb.h"

namespace ddpkit::torch_formats {

// What a PyTorch entry says about its call: what PyTorch's analyser compares across ranks.
struct TorchCall {
  std::string op;    // profiling_name: "gloo:all_reduce", "nccl:all_reduce", ...
  std::string type;  // the op's name without its library: "all_reduce"
  std::vector<std::vector<int64_t>> input_sizes, output_sizes;
  std::vector<std::string> input_dtypes, output_dtypes;
  bool has_dtypes = false;          // dump version 1.x records no dtypes
  std::string state;                // as recorded: scheduled, started or completed
  std::vector<std::string> frames;  // "all_reduce at file.py:12", innermost first
};

struct Dump {
  int rank = 0;
  int world_size = 1;
  std::string reason;
  std::map<int64_t, FrEntry> entries;
  std::map<int64_t, comm::CollectiveFingerprint> calls;  // ddpkit's dumps: the entries' calls
  // PyTorch's dumps: the calls recorded under each sequence number, in order (more than one
  // for a coalesced group, which shares its number).
  std::map<int64_t, std::vector<TorchCall>> torch_calls;
};

}  // namespace ddpkit::torch_formats
