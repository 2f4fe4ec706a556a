// The comparison PyTorch's own analyser (torchfrtrace, torch.distributed.flight_recorder, 2.11+)
// makes of a job's dumps, made again over ddpkit's reading of them: each collective's calls on
// the ranks of its process group, matched by group and collective_seq_id, and a verdict for it:
// fully matched, a type / size / dtype / state mismatch, ranks missing, or undecided. Checked
// against torchfrtrace's own verdicts on the same dumps
// (tests/testdata/torch_fr/*/torchfrtrace.json).
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "tools/jobs/fr/fr_report.pb.h"
#include "tools/torch_formats/fr_dump.h"

namespace ddpkit::jobs {

using torch_formats::Dump;
using torch_formats::TorchCall;

// How another rank's call differs from the reference rank's: kind is "" when they match,
// "undecided" for an all-to-all (its ranks' sizes differ by design: only their totals can be
// compared), else type_mismatch, size_mismatch, dtype_mismatch or state_mismatch, checked in
// that order, as PyTorch's analyser does.
struct CallMatch {
  std::string kind;
  std::string detail;
};
CallMatch MatchCall(const TorchCall& reference, const TorchCall& other, int group_size);

// The ranks a process group's collectives expect: pg_config's members of it. Gloo registers
// its groups in pg_config under the name "" (and in 2.8 with no ranks), so for a group
// pg_config does not name: the ranks that recorded calls in it, and for the default group "0"
// every rank of the world.
std::set<int> ExpectedRanks(const std::string& group, const std::map<int, Dump>& dumps,
                            const std::map<std::string, std::set<int>>& group_ranks,
                            int world_size);

struct GroupDumps {
  std::string name;
  const std::map<int, Dump>* dumps = nullptr;  // the ranks that recorded calls in it
  std::set<int> expected;                      // ExpectedRanks
  std::set<int> dumped;                        // every rank that left a dump, of any group
  std::string version;                         // the dumps' version ("2.10")
};

// One verdict per sequence number some rank of the group recorded, in order; those older than
// some rank's oldest entry in the group are left out (its ring buffer no longer holds them).
std::vector<FrCollective> CompareCollectives(const GroupDumps& group);

// "size mismatch" for "size_mismatch".
std::string VerdictWords(const std::string& verdict);

}  // namespace ddpkit::jobs
