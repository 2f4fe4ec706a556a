#include "tools/torch_formats/torch_dump.h"

#include <algorithm>
#include <cctype>
#include <cstdint>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "autograd/base/error.h"
#include "nlohmann/json.hpp"
#include "tools/torch_formats/pickle_reader.h"

namespace ddpkit::torch_formats {
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

std::string Text(const json& v, std::string_view what) {
  if (!v.is_string()) throw Malformed{StrCat(what, " is not text: ", v.dump())};
  return v.get<std::string>();
}

const json& Field(const json& e, const char* name) {
  if (!e.contains(name)) throw Malformed{StrCat("an entry without '", name, "'")};
  return e[name];
}

// Each tensor's sizes; refuses negative or overflowing ones.
std::vector<std::vector<int64_t>> Sizes(const json& v) {
  if (!v.is_array()) throw Malformed{"sizes not a list"};
  std::vector<std::vector<int64_t>> out;
  for (const json& tensor : v) {
    if (!tensor.is_array()) throw Malformed{"a tensor's sizes not a list"};
    int64_t numel = 1;
    std::vector<int64_t>& dims = out.emplace_back();
    for (const json& d : tensor) {
      const int64_t dim = Int(d);
      if (dim < 0 || __builtin_mul_overflow(numel, dim, &numel)) {
        throw Malformed{"a tensor size is invalid"};
      }
      dims.push_back(dim);
    }
  }
  return out;
}

std::vector<std::string> Dtypes(const json& v) {
  if (!v.is_array()) throw Malformed{"dtypes not a list"};
  std::vector<std::string> out;
  for (const json& d : v) out.push_back(Text(d, "a dtype"));
  return out;
}

int64_t Numel(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;  // checked against overflow by Sizes
  return n;
}

// "all_reduce" from "nccl:all_reduce", "send" from "nccl:send 0->1" (as PyTorch's analyser).
std::string TypeOf(const std::string& op) {
  const size_t colon = op.rfind(':');
  const std::string name = colon == std::string::npos ? op : op.substr(colon + 1);
  return name.substr(0, name.find(' '));
}

// The stack, innermost first, as "name at file:line" (only the pickle form keeps it).
std::vector<std::string> FramesOf(const json& e) {
  std::vector<std::string> out;
  if (!e.contains("frames") || !e["frames"].is_array()) return out;
  for (const json& f : e["frames"]) {
    if (!f.is_object() || !f.contains("name") || !f.contains("filename")) continue;
    const json line = f.value("line", json());
    out.push_back(StrCat(f["name"].is_string() ? f["name"].get<std::string>() : "?", " at ",
                         f["filename"].is_string() ? f["filename"].get<std::string>() : "?", ":",
                         line.is_number_integer() ? std::to_string(line.get<int64_t>()) : "?"));
    if (out.size() == 64) break;
  }
  return out;
}

TorchCall CallOf(const json& e) {
  TorchCall call;
  call.op = Text(Field(e, "profiling_name"), "profiling_name");
  call.type = TypeOf(call.op);
  call.input_sizes = Sizes(Field(e, "input_sizes"));
  call.output_sizes = Sizes(Field(e, "output_sizes"));
  call.has_dtypes = e.contains("input_dtypes") || e.contains("output_dtypes");
  if (call.has_dtypes) {
    call.input_dtypes = Dtypes(Field(e, "input_dtypes"));
    call.output_dtypes = Dtypes(Field(e, "output_dtypes"));
  }
  call.state = Text(Field(e, "state"), "state");
  call.frames = FramesOf(e);
  return call;
}

// The process group's name: process_group's first item (2.x), else pg_id (1.x).
std::string GroupOf(const json& e) {
  if (e.contains("process_group") && e["process_group"].is_array() && !e["process_group"].empty()) {
    return Text(e["process_group"].at(0), "process_group");
  }
  return std::to_string(Int(Field(e, "pg_id")));
}

double Number(const json& e, const char* name) {
  return e.contains(name) && e[name].is_number() ? e[name].get<double>() : 0;
}

FrEntry EntryOf(const json& e, const TorchCall& call) {
  FrEntry entry;
  entry.set_seq(Int(e.contains("collective_seq_id") ? e["collective_seq_id"] : Field(e, "seq_id")));
  entry.set_record_id(e.contains("record_id") ? Int(e["record_id"]) : entry.seq());
  entry.set_op(call.op);
  entry.set_purpose("untagged");
  entry.set_bucket(-1);
  entry.set_process_group(GroupOf(e));
  const bool inputs = !call.input_sizes.empty();
  const auto& sizes = inputs ? call.input_sizes : call.output_sizes;
  const auto& dtypes = inputs ? call.input_dtypes : call.output_dtypes;
  if (!sizes.empty()) {
    entry.set_count(Numel(sizes[0]));
    entry.set_shape(absl::StrJoin(sizes[0], ", "));
    entry.set_dtype(dtypes.empty() ? "?" : dtypes[0]);
  }
  // Older dumps leave state "scheduled" or "started" once the watchdog saw it complete.
  const bool completed = call.state == "completed" || Number(e, "time_discovered_completed_ns") > 0;
  entry.set_state(completed ? "completed" : call.state);
  entry.set_duration_ms(Number(e, "duration_ms"));
  entry.set_timeout_ms(Number(e, "timeout_ms"));
  return entry;
}

// Point-to-point: flagged in 2.x, named send/recv in 1.x.
bool IsP2p(const json& e, const TorchCall& call) {
  if (e.contains("is_p2p") && e["is_p2p"].is_boolean()) return e["is_p2p"].get<bool>();
  return call.type == "send" || call.type == "recv";
}

// A group's ranks: a list (1.x), or text "[0, 1, 2]" (2.x).
std::set<int> RanksOf(const json& v) {
  std::set<int> ranks;
  auto add = [&](int64_t r) {
    if (r >= 0 && r < (1 << 20)) ranks.insert(static_cast<int>(r));
  };
  if (v.is_array()) {
    for (const json& r : v) {
      if (r.is_number_integer()) add(r.get<int64_t>());
    }
  } else if (v.is_string()) {
    for (absl::string_view token :
         absl::StrSplit(v.get<std::string>(), absl::ByAnyChar("[], "), absl::SkipEmpty())) {
      int r = 0;
      if (absl::SimpleAtoi(token, &r)) add(r);
    }
  }
  return ranks;
}

// pg_config: {pg_id: [ranks]} (1.x) or {name: {"name", "desc", "ranks": "[0, 1]"}} (2.x).
void ReadGroups(const json& pg_config, TorchDump& dump, int rank) {
  dump.world_size = rank + 1;
  if (!pg_config.is_object()) throw Malformed{"pg_config is not a dictionary"};
  for (const auto& [key, pg] : pg_config.items()) {
    const json& ranks = pg.is_object() ? pg.value("ranks", json()) : pg;
    std::string name = key;
    if (pg.is_object() && pg.contains("name") && pg["name"].is_string()) {
      name = pg["name"].get<std::string>();
    }
    const std::set<int> members = RanksOf(ranks);
    if (members.empty()) continue;
    dump.group_ranks[name] = members;
    dump.world_size = std::max(dump.world_size, *members.rbegin() + 1);
  }
}

// "2.10" -> ok when its major version is one ddpkit reads.
void CheckVersion(const std::string& version) {
  const std::vector<std::string> parts = absl::StrSplit(version, '.');
  int major = 0, minor = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &major) ||
      !absl::SimpleAtoi(parts[1], &minor)) {
    throw Malformed{StrCat("version '", version, "' is not MAJOR.MINOR")};
  }
  if (major < 1 || major > 2) {
    throw Malformed{StrCat("dump version ", version,
                           " is not one ddpkit reads (1.x and 2.x: PyTorch 2.3 to 2.15)")};
  }
}

TorchDump FromJson(const json& j, int rank) {
  TorchDump dump;
  dump.version = Text(j.at("version"), "version");
  CheckVersion(dump.version);
  ReadGroups(j.value("pg_config", json::object()), dump, rank);
  const json entries = j.value("entries", json::array());  // 2.5's JSON leaves it out when empty
  if (!entries.is_array()) throw Malformed{"entries is not a list"};
  for (const json& e : entries) {
    if (!e.is_object()) throw Malformed{"an entry is not a dictionary"};
    TorchCall call = CallOf(e);
    if (IsP2p(e, call)) continue;
    FrEntry entry = EntryOf(e, call);
    Dump& group = dump.groups[entry.process_group()];
    group.rank = rank;
    group.world_size = dump.world_size;
    group.torch_calls[entry.seq()].push_back(std::move(call));
    group.entries.emplace(entry.seq(), std::move(entry));  // a coalesced group: its first
  }
  return dump;
}

absl::StatusOr<json> Parse(std::string_view text, std::string_view path) {
  if (LooksLikePickle(text)) {
    absl::StatusOr<json> j = ReadTorchPickle(text);
    if (!j.ok()) return absl::InvalidArgumentError(StrCat(path, ": ", j.status().message()));
    return j;
  }
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return absl::InvalidArgumentError(StrCat(
        path, ": not a flight-recorder dump (neither ddpkit's nor PyTorch's JSON or pickle form)"));
  }
  return j;
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

absl::StatusOr<TorchDump> ParseTorchDump(std::string_view text, int rank, std::string_view path) {
  DDPKIT_ASSIGN_OR_RETURN(const json j, Parse(text, path));
  if (!j.is_object() || !j.contains("version") ||
      !(j.contains("entries") || j.contains("pg_config"))) {
    return absl::InvalidArgumentError(StrCat(
        path, ": not a flight-recorder dump (neither ddpkit's nor PyTorch's JSON or pickle form)"));
  }
  try {
    return FromJson(j, rank);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(StrCat(path, ": malformed PyTorch dump: ", e.what()));
  } catch (const Malformed& e) {
    return absl::InvalidArgumentError(StrCat(path, ": malformed PyTorch dump: ", e.what));
  }
}

std::string_view TorchReleasesOf(std::string_view version) {
  static const std::map<std::string_view, std::string_view> kReleases = {
      {"1.4", "2.3"}, {"2.1", "2.4"}, {"2.4", "2.5-2.6"}, {"2.9", "2.8"}, {"2.10", "2.9-2.15"}};
  auto it = kReleases.find(version);
  return it == kReleases.end() ? std::string_view() : it->second;
}

}  // namespace ddpkit::torch_formats
