#include "tools/jobs/fr/torch_dump.h"

#include <algorithm>
#include <cctype>
#include <cstdint>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "autograd/error.h"
#include "nlohmann/json.hpp"

namespace ddpkit::jobs {
namespace {

using nlohmann::json;

// Refusals raised while reading one entry; ParseTorchDump prefixes the path.
struct Malformed {
  std::string what;
};

// An integer field; nlohmann's own conversion of a float or a too-large number is undefined.
int64_t Int(const json& v) {
  if (!v.is_number_integer() ||
      (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX})) {
    throw Malformed{StrCat("not an integer: ", v.dump())};
  }
  return v.get<int64_t>();
}

// Elements of one tensor's sizes, [] being a scalar; refuses negative or overflowing sizes.
int64_t Numel(const json& sizes) {
  int64_t n = 1;
  for (const json& d : sizes) {
    const int64_t dim = Int(d);
    if (dim < 0 || __builtin_mul_overflow(n, dim, &n)) throw Malformed{"a tensor size is invalid"};
  }
  return n;
}

// The first tensor's dtype and element count, from its inputs, else its outputs.
void SetFirstTensor(const json& e, FrEntry& entry) {
  for (const char* side : {"input", "output"}) {
    const json& sizes = e.at(StrCat(side, "_sizes"));
    const json& dtypes = e.at(StrCat(side, "_dtypes"));
    if (!sizes.is_array() || !dtypes.is_array()) throw Malformed{"sizes or dtypes not a list"};
    for (const json& s : sizes) Numel(s);  // every size checked, not only the first
    if (sizes.empty()) continue;
    entry.set_count(Numel(sizes.at(0)));
    entry.set_dtype(dtypes.empty() ? "?" : dtypes.at(0).get<std::string>());
    return;
  }
}

std::string GroupOf(const json& e) {
  if (e.contains("process_group") && e["process_group"].is_array() && !e["process_group"].empty()) {
    return e["process_group"].at(0).get<std::string>();
  }
  return std::to_string(Int(e.at("pg_id")));
}

FrEntry EntryOf(const json& e) {
  FrEntry entry;
  entry.set_seq(Int(e.at("collective_seq_id")));
  entry.set_record_id(e.contains("record_id") ? Int(e["record_id"]) : entry.seq());
  entry.set_op(e.at("profiling_name").get<std::string>());
  entry.set_purpose("untagged");
  entry.set_bucket(-1);
  entry.set_process_group(GroupOf(e));
  SetFirstTensor(e, entry);
  const std::string state = e.at("state").get<std::string>();
  const json& done = e.value("time_discovered_completed_ns", json());
  const bool completed = state == "completed" || (done.is_number() && done.get<double>() > 0);
  entry.set_state(completed ? "completed" : state);
  if (e.contains("duration_ms") && e["duration_ms"].is_number()) {
    entry.set_duration_ms(e["duration_ms"].get<double>());
  }
  if (e.contains("timeout_ms") && e["timeout_ms"].is_number()) {
    entry.set_timeout_ms(e["timeout_ms"].get<double>());
  }
  return entry;
}

TorchCall CallOf(const json& e) {
  return {.op = e.at("profiling_name").get<std::string>(),
          .input_sizes = e.at("input_sizes").dump(),
          .input_dtypes = e.at("input_dtypes").dump(),
          .output_sizes = e.at("output_sizes").dump(),
          .output_dtypes = e.at("output_dtypes").dump()};
}

// The size of the largest process group in pg_config, whose "ranks" are text: "[0, 1, 2]".
int WorldSizeOf(const json& pg_config, int rank) {
  int world = rank + 1;
  for (const auto& [name, pg] : pg_config.items()) {
    if (!pg.is_object() || !pg.contains("ranks") || !pg["ranks"].is_string()) continue;
    const std::string ranks = pg["ranks"].get<std::string>();
    for (absl::string_view token :
         absl::StrSplit(ranks, absl::ByAnyChar("[], "), absl::SkipEmpty())) {
      int r = 0;
      if (absl::SimpleAtoi(token, &r) && r >= 0 && r < (1 << 20)) world = std::max(world, r + 1);
    }
  }
  return world;
}

absl::StatusOr<TorchDump> FromJson(const json& j, int rank) {
  TorchDump dump;
  dump.version = j.at("version").get<std::string>();
  if (dump.version.rfind("2.", 0) != 0) {
    return absl::InvalidArgumentError(
        StrCat("version ", dump.version, " is not one ddpkit reads (2.x)"));
  }
  dump.world_size = WorldSizeOf(j.at("pg_config"), rank);
  for (const json& e : j.at("entries")) {
    if (e.value("is_p2p", false)) continue;
    FrEntry entry = EntryOf(e);
    Dump& group = dump.groups[entry.process_group()];
    group.rank = rank;
    group.world_size = dump.world_size;
    group.torch_calls[entry.seq()] = CallOf(e);
    group.entries[entry.seq()] = std::move(entry);
  }
  return dump;
}

}  // namespace

std::optional<int> RankFromFileName(std::string_view name) {
  for (std::string_view ext : {".json", ".pkl", ".pickle"}) {
    if (name.size() > ext.size() && name.substr(name.size() - ext.size()) == ext) {
      name.remove_suffix(ext.size());
      break;
    }
  }
  size_t digits = 0;
  while (digits < name.size() && std::isdigit(name[name.size() - 1 - digits])) ++digits;
  int rank = 0;
  if (digits == 0 || digits > 7 ||
      !absl::SimpleAtoi(absl::string_view(name.data() + name.size() - digits, digits), &rank)) {
    return std::nullopt;
  }
  return rank;
}

bool LooksLikePickle(std::string_view text) {
  return text.size() >= 2 && static_cast<unsigned char>(text[0]) == 0x80 &&
         static_cast<unsigned char>(text[1]) <= 5;
}

std::string TorchPickleRefusal(std::string_view path) {
  return StrCat(path,
                ": PyTorch's pickle dump form, which ddpkit does not read; write the JSON form "
                "(torch._C._distributed_c10d._dump_fr_trace_json()) or convert this file: "
                "python3 -c \"import json,pickle,sys; json.dump(pickle.load(open(sys.argv[1],"
                "'rb')), open(sys.argv[1]+'.json','w'))\" ",
                path, ", which writes ", path, ".json: ddpkit reads that in the pickle's place");
}

absl::StatusOr<TorchDump> ParseTorchDump(std::string_view text, int rank, std::string_view path) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("entries") || !j.contains("version") ||
      !j.contains("pg_config")) {
    return absl::InvalidArgumentError(
        StrCat(path, ": not a flight-recorder dump (neither ddpkit's nor PyTorch's JSON form)"));
  }
  try {
    absl::StatusOr<TorchDump> dump = FromJson(j, rank);
    if (!dump.ok()) return absl::InvalidArgumentError(StrCat(path, ": ", dump.status().message()));
    return dump;
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(StrCat(path, ": malformed PyTorch dump: ", e.what()));
  } catch (const Malformed& e) {
    return absl::InvalidArgumentError(StrCat(path, ": malformed PyTorch dump: ", e.what));
  }
}

}  // namespace ddpkit::jobs
