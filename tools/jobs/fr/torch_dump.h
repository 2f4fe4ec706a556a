// PyTorch's flight-recorder dumps, the JSON form (version 2.x): what
// torch._C._distributed_c10d._dump_fr_trace_json() (gloo) or _dump_nccl_trace_json() (NCCL)
// returns, one file per rank: {"version", "pg_config", "pg_status", "entries": [{record_id,
// pg_id, process_group, collective_seq_id, profiling_name, input_sizes, input_dtypes,
// output_sizes, output_dtypes, state, time_created_ns, time_discovered_*_ns, timeout_ms,
// is_p2p, ...}]}. The pickle form (PyTorch's default dump file) holds the same dictionary; no
// well-kept C++ pickle reader exists, so ddpkit asks for the JSON (TorchPickleRefusal says how).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "tools/jobs/fr/dump.h"

namespace ddpkit::jobs {

// The rank a dump file's name ends with, as PyTorch's fr_trace reads it ("nccl_trace_rank_3",
// "fr_rank_3.json"); nullopt when it ends with no number.
std::optional<int> RankFromFileName(std::string_view name);

// Whether `text` starts like a pickle (PyTorch's default dump form).
bool LooksLikePickle(std::string_view text);

// One line: `path` is the pickle form, and the command that turns it into the JSON form.
std::string TorchPickleRefusal(std::string_view path);

struct TorchDump {
  std::string version;                 // the dump's "version", "2.10"
  int world_size = 1;                  // the largest process group's size (pg_config)
  std::map<std::string, Dump> groups;  // by process group name: "0" is the default group
};

// The dump of `rank` read from `text`, one Dump per process group its collectives ran in.
// Point-to-point entries are left out (they pair up, they do not line up by collective_seq_id).
// InvalidArgument, starting with `path`, for anything that is not a well-formed dump.
absl::StatusOr<TorchDump> ParseTorchDump(std::string_view text, int rank, std::string_view path);

}  // namespace ddpkit::jobs
