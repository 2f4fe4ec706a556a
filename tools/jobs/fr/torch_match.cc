#include "tools/jobs/fr/torch_match.h"

#include <algorithm>
#include <optional>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "autograd/base/error.h"

namespace ddpkit::jobs {

using torch_formats::Dump;
using torch_formats::TorchCall;
namespace {

using Sizes = std::vector<std::vector<int64_t>>;

bool IsOneOf(const std::string& type, std::initializer_list<std::string_view> types) {
  return std::find(types.begin(), types.end(), type) != types.end();
}

std::string SizesText(const Sizes& sizes) {
  return StrCat("[",
                absl::StrJoin(sizes, ", ",
                              [](std::string* out, const std::vector<int64_t>& dims) {
                                StrAppend(out, "[", absl::StrJoin(dims, ", "), "]");
                              }),
                "]");
}

std::string DtypesText(const std::vector<std::string>& dtypes) {
  return StrCat("[", absl::StrJoin(dtypes, ", "), "]");
}

int64_t Numel(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// Whether a gathered buffer holds group_size copies of a shard: one flat buffer, or one buffer
// per rank (the two ways PyTorch records a gather's output).
bool GatheredMatches(const Sizes& gathered, const Sizes& shard, int group_size) {
  if (gathered.empty() || shard.empty()) return true;  // nothing recorded to compare
  if (Numel(gathered[0]) == Numel(shard[0]) * group_size) return true;
  int64_t all = 0, one = 0;
  for (const auto& s : gathered) all += Numel(s);
  for (const auto& s : shard) one += Numel(s);
  return gathered.size() == shard.size() * group_size && all == one * group_size;
}

// A first tensor with at least one dimension (the analyser skips dtypes of scalars and of
// calls with no tensor on that side).
bool Shaped(const Sizes& sizes) { return !sizes.empty() && !sizes[0].empty(); }

bool SameSet(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  return std::set<std::string>(a.begin(), a.end()) == std::set<std::string>(b.begin(), b.end());
}

std::optional<std::string> DtypeDifference(const TorchCall& r, const TorchCall& o) {
  if (!r.has_dtypes || !o.has_dtypes) return std::nullopt;  // dump version 1.x
  const std::string& t = r.type;
  if (!IsOneOf(t, {"scatter", "gather", "broadcast"}) &&
      !SameSet(r.input_dtypes, r.output_dtypes) && Shaped(r.input_sizes) &&
      Shaped(r.output_sizes)) {
    return StrCat("input dtypes ", DtypesText(r.input_dtypes), " vs output dtypes ",
                  DtypesText(r.output_dtypes), " on the reference rank");
  }
  if (!IsOneOf(t, {"scatter", "broadcast"}) && !SameSet(r.input_dtypes, o.input_dtypes) &&
      Shaped(r.input_sizes) && Shaped(o.input_sizes)) {
    return StrCat("input dtypes ", DtypesText(r.input_dtypes), " vs ", DtypesText(o.input_dtypes));
  }
  if (t != "gather" && !SameSet(r.output_dtypes, o.output_dtypes) && Shaped(r.output_sizes) &&
      Shaped(o.output_sizes)) {
    return StrCat("output dtypes ", DtypesText(r.output_dtypes), " vs ",
                  DtypesText(o.output_dtypes));
  }
  return std::nullopt;
}

std::optional<std::string> SizeDifference(const TorchCall& r, const TorchCall& o, int group) {
  const std::string& t = r.type;
  const bool uneven = IsOneOf(t, {"all_to_all", "all_to_all_single"});
  if (!uneven && t != "scatter" && r.input_sizes != o.input_sizes) {
    return StrCat("input sizes ", SizesText(r.input_sizes), " vs ", SizesText(o.input_sizes));
  }
  if (!uneven && t != "gather" && r.output_sizes != o.output_sizes) {
    return StrCat("output sizes ", SizesText(r.output_sizes), " vs ", SizesText(o.output_sizes));
  }
  if (IsOneOf(t, {"all_reduce", "allreduce_coalesced"}) && r.input_sizes != o.output_sizes) {
    return StrCat("input sizes ", SizesText(r.input_sizes), " vs output sizes ",
                  SizesText(o.output_sizes));
  }
  if (IsOneOf(t, {"all_gather", "_all_gather_base", "all_gather_into_tensor_coalesced"}) &&
      !GatheredMatches(o.output_sizes, r.input_sizes, group)) {
    return StrCat("output sizes ", SizesText(o.output_sizes), " are not ", group,
                  " times input sizes ", SizesText(r.input_sizes));
  }
  if (IsOneOf(t, {"reduce_scatter", "_reduce_scatter_base", "reduce_scatter_tensor_coalesced"}) &&
      !GatheredMatches(o.input_sizes, r.output_sizes, group)) {
    return StrCat("input sizes ", SizesText(o.input_sizes), " are not ", group,
                  " times output sizes ", SizesText(r.output_sizes));
  }
  return std::nullopt;
}

// Every call of `other` as `seq` against the reference's (more than one: a coalesced group).
CallMatch MatchCalls(const std::vector<TorchCall>& reference, const std::vector<TorchCall>& other,
                     int group_size) {
  if (reference.size() != other.size()) {
    return {"size_mismatch",
            StrCat("a coalesced group of ", reference.size(), " calls vs ", other.size())};
  }
  CallMatch result;
  for (size_t i = 0; i < reference.size(); ++i) {
    CallMatch m = MatchCall(reference[i], other[i], group_size);
    if (m.kind.empty()) continue;
    if (m.kind != "undecided") return m;
    result = m;
  }
  return result;
}

// An all-to-all's ranks agree when, summed over them, they send what they receive.
std::optional<std::string> AllToAllTotals(
    const std::map<int, const std::vector<TorchCall>*>& calls) {
  int64_t in = 0, out = 0;
  for (const auto& [rank, c] : calls) {
    if (!c->front().input_sizes.empty()) in += Numel(c->front().input_sizes[0]);
    if (!c->front().output_sizes.empty()) out += Numel(c->front().output_sizes[0]);
  }
  if (in == out) return std::nullopt;
  return StrCat("the ranks send ", in, " elements in all and receive ", out);
}

// Versions up to 2.3 record no all-to-all sizes worth summing (as PyTorch's analyser).
bool SumsAllToAll(const std::string& version) {
  const std::vector<std::string> parts = absl::StrSplit(version, '.');
  int major = 0, minor = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &major) ||
      !absl::SimpleAtoi(parts[1], &minor)) {
    return true;
  }
  return !(major <= 2 && minor <= 3);
}

FrCollective Compare(const GroupDumps& g, int64_t seq,
                     const std::map<int, const std::vector<TorchCall>*>& calls) {
  FrCollective c;
  c.set_process_group(g.name);
  c.set_seq(seq);
  const int reference = calls.begin()->first;
  const std::vector<TorchCall>& ref = *calls.begin()->second;
  c.set_reference_rank(reference);
  c.set_op(ref.front().op);
  for (int r : g.expected) {
    if (g.dumped.count(r) && !calls.count(r)) c.add_missing_ranks(r);
  }
  bool undecided = false;
  for (const auto& [rank, other] : calls) {
    if (rank == reference) continue;
    const CallMatch m = MatchCalls(ref, *other, static_cast<int>(g.expected.size()));
    if (m.kind == "undecided") undecided = true;
    if (m.kind.empty() || m.kind == "undecided") continue;
    FrMismatch* mismatch = c.add_mismatches();
    mismatch->set_rank(rank);
    mismatch->set_kind(m.kind);
    mismatch->set_detail(m.detail);
  }
  const bool all_dumped =
      std::includes(g.dumped.begin(), g.dumped.end(), g.expected.begin(), g.expected.end());
  if (undecided && c.mismatches().empty() && c.missing_ranks().empty() && all_dumped &&
      SumsAllToAll(g.version)) {
    if (std::optional<std::string> totals = AllToAllTotals(calls)) {
      FrMismatch* mismatch = c.add_mismatches();
      mismatch->set_rank(reference);
      mismatch->set_kind("size_mismatch");
      mismatch->set_detail(*totals);
    }
  }
  if (!c.missing_ranks().empty()) {
    c.set_verdict("missing");
  } else if (!c.mismatches().empty()) {
    c.set_verdict(c.mismatches(0).kind());
  } else {
    c.set_verdict(all_dumped ? "fully_matched" : "undecided");
  }
  return c;
}

}  // namespace

CallMatch MatchCall(const TorchCall& reference, const TorchCall& other, int group_size) {
  if (reference.type != other.type) {
    return {"type_mismatch", StrCat("op ", reference.op, " vs ", other.op)};
  }
  if (std::optional<std::string> d = SizeDifference(reference, other, group_size)) {
    return {"size_mismatch", *d};
  }
  if (std::optional<std::string> d = DtypeDifference(reference, other)) {
    return {"dtype_mismatch", *d};
  }
  if (reference.state != other.state) {
    return {"state_mismatch", StrCat("state ", reference.state, " vs ", other.state)};
  }
  if (IsOneOf(reference.type, {"all_to_all", "all_to_all_single"})) return {"undecided", ""};
  return {};
}

std::set<int> ExpectedRanks(const std::string& group, const std::map<int, Dump>& dumps,
                            const std::map<std::string, std::set<int>>& group_ranks,
                            int world_size) {
  if (auto it = group_ranks.find(group); it != group_ranks.end()) return it->second;
  std::set<int> ranks;
  for (const auto& [rank, dump] : dumps) ranks.insert(rank);
  if (group == "0") {
    for (int r = 0; r < world_size; ++r) ranks.insert(r);
  }
  return ranks;
}

std::vector<FrCollective> CompareCollectives(const GroupDumps& g) {
  // The oldest sequence number every rank's buffer still holds.
  int64_t window = 0;
  std::map<int64_t, std::map<int, const std::vector<TorchCall>*>> by_seq;
  for (const auto& [rank, dump] : *g.dumps) {
    if (dump.torch_calls.empty()) continue;
    window = std::max(window, dump.torch_calls.begin()->first);
    for (const auto& [seq, calls] : dump.torch_calls) {
      if (!calls.empty()) by_seq[seq][rank] = &calls;
    }
  }
  std::vector<FrCollective> out;
  for (const auto& [seq, calls] : by_seq) {
    if (seq >= window) out.push_back(Compare(g, seq, calls));
  }
  return out;
}

std::string VerdictWords(const std::string& verdict) {
  return absl::StrReplaceAll(verdict, {{"_", " "}});
}

}  // namespace ddpkit::jobs
