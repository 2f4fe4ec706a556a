// PyTorch's flight-recorder dumps, in either form, dump versions 1.x and 2.x (PyTorch 2.3 wrote
// 1.4; 2.4 2.1; 2.5-2.6 2.4; 2.8 2.9; 2.9-2.15 2.10): a dictionary {"version", "pg_config",
// "entries": [{record_id, pg_id, process_group, collective_seq_id (1.x: seq_id),
// profiling_name, input_sizes, input_dtypes (2.x), output_sizes, output_dtypes, state,
// time_discovered_*_ns, timeout_ms, is_p2p, frames, ...}], ...}. The JSON form is what
// _dump_fr_trace_json() (2.8+; before: _dump_nccl_trace_json(), 2.5+) returns; the pickle form
// is PyTorch's default dump file and what _dump_fr_trace() / _dump_nccl_trace() return, the only
// form before 2.5, and the one that keeps stack frames (pickle_reader.h reads it).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "tools/torch_formats/fr_dump.h"

namespace ddpkit::torch_formats {

// The rank a dump file's name ends with, as PyTorch's fr_trace reads it ("nccl_trace_rank_3",
// "fr_rank_3.json"); nullopt when it ends with no number.
std::optional<int> RankFromFileName(std::string_view name);

// Whether `text` starts like a pickle (PyTorch's default dump form).
bool LooksLikePickle(std::string_view text);

struct TorchDump {
  std::string version;                 // the dump's "version", "2.10"
  int world_size = 1;                  // the largest process group's size (pg_config)
  std::map<std::string, Dump> groups;  // by process group name: "0" is the default group
  // The members of each process group pg_config names (gloo's are named "": see
  // ExpectedRanks in torch_match.h).
  std::map<std::string, std::set<int>> group_ranks;
};

// The dump of `rank` read from `text` (either form), one Dump per process group its
// collectives ran in. Point-to-point entries are left out (they pair up, they do not line up by
// collective_seq_id). InvalidArgument, starting with `path`, for anything that is not a
// well-formed dump.
absl::StatusOr<TorchDump> ParseTorchDump(std::string_view text, int rank, std::string_view path);

// The PyTorch releases known to write dump version `version` ("2.9-2.15"), or "".
std::string_view TorchReleasesOf(std::string_view version);

}  // namespace ddpkit::torch_formats
