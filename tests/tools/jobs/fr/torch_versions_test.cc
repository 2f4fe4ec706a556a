// `ddpkit fr analyze` on every PyTorch release's flight-recorder dumps: real dumps of the same
// small gloo jobs (a healthy one, a rank that stopped, a rank that sent another size, another
// dtype) made with PyTorch 2.3 (dump version 1.4), 2.4 (2.1), 2.5 (2.4), 2.8 (2.9) and 2.15
// (2.10), in
// the JSON and pickle forms each release writes (tools/scripts/golden/make_torch_fr_golden.py),
// and the verdicts of PyTorch's own analyser on the same dumps (torchfrtrace.json beside them).
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tools/jobs/fr/analyze.h"

namespace ddpkit::jobs {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string Case(const std::string& release, const std::string& name) {
  return absl::StrCat(DDPKIT_TESTDATA_DIR, "/torch_fr/torch-", release, "/", name);
}

// Every release and form that has `name`, as (folder, what it is) pairs.
std::vector<std::pair<std::string, std::string>> Folders(const std::string& name) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string release : {"2.3", "2.4", "2.5", "2.8", "2.15"}) {
    for (const std::string form : {"json", "pickle"}) {
      const std::string dir = Case(release, name) + "/" + form;
      if (fs::exists(dir)) out.emplace_back(dir, "PyTorch " + release + " " + form);
    }
  }
  return out;
}

FlightRecorderAnalysis Analyze(const std::string& dir) {
  absl::StatusOr<FlightRecorderAnalysis> a = AnalyzeFlightRecorders(dir);
  EXPECT_TRUE(a.ok()) << dir << ": " << a.status();
  return a.ok() ? *a : FlightRecorderAnalysis();
}

std::vector<int> Ranks(const google::protobuf::RepeatedField<int32_t>& r) {
  return std::vector<int>(r.begin(), r.end());
}

TEST(TorchFrVersionsTest, EveryReleaseAndFormIsThere) {
  // 2.3 and 2.4 write only the pickle form; 2.5 records no gloo work: only its (empty) healthy
  // job.
  EXPECT_EQ(Folders("healthy").size(), 8u);
  EXPECT_EQ(Folders("missing").size(), 6u);
  EXPECT_EQ(Folders("size").size(), 6u);
  EXPECT_EQ(Folders("dtype").size(), 6u);
}

TEST(TorchFrVersionsTest, SourceNamesTheDumpVersionAndItsReleases) {
  const std::map<std::string, std::string> expected = {
      {"2.3", "PyTorch dump version 1.4 (PyTorch 2.3)"},
      {"2.4", "PyTorch dump version 2.1 (PyTorch 2.4)"},
      {"2.5", "PyTorch dump version 2.4 (PyTorch 2.5-2.6)"},
      {"2.8", "PyTorch dump version 2.9 (PyTorch 2.8)"},
      {"2.15", "PyTorch dump version 2.10 (PyTorch 2.9-2.15)"}};
  for (const auto& [release, source] : expected) {
    EXPECT_EQ(Analyze(Case(release, "healthy/pickle")).source(), source) << release;
  }
}

TEST(TorchFrVersionsTest, HealthyJobsFullyMatch) {
  for (const auto& [dir, what] : Folders("healthy")) {
    const FlightRecorderAnalysis a = Analyze(dir);
    if (absl::StrContains(what, "2.5")) continue;  // below
    EXPECT_TRUE(a.findings().empty()) << what << ": " << a.diagnosis();
    EXPECT_EQ(a.collectives_size(), 10) << what;
    for (const FrCollective& c : a.collectives()) EXPECT_EQ(c.verdict(), "fully_matched") << what;
    EXPECT_EQ(a.diagnosis(),
              "every collective fully matched across the ranks (10 compared): no rank missed or "
              "changed a call")
        << what;
  }
}

// PyTorch 2.5 records only NCCL's collectives: a gloo job's dumps are real but empty.
TEST(TorchFrVersionsTest, PyTorch25GlooDumpsAreEmptyAndSaySo) {
  for (const std::string form : {"json", "pickle"}) {
    const FlightRecorderAnalysis a = Analyze(Case("2.5", "healthy/" + form));
    EXPECT_EQ(a.world_size(), 3) << form;
    EXPECT_TRUE(a.collectives().empty()) << form;
    EXPECT_TRUE(absl::StartsWith(a.diagnosis(),
                                 "the dumps hold no collective: PyTorch before 2.8 "
                                 "records only NCCL's collectives"))
        << a.diagnosis();
  }
}

TEST(TorchFrVersionsTest, StoppedRankIsMissingFromSeq7) {
  for (const auto& [dir, what] : Folders("missing")) {
    const FlightRecorderAnalysis a = Analyze(dir);
    ASSERT_EQ(a.findings_size(), 1) << what << ": " << a.diagnosis();
    const FrFinding& f = a.findings(0);
    EXPECT_EQ(f.kind(), "missing") << what;
    EXPECT_EQ(f.verdict(), "missing") << what;
    EXPECT_EQ(f.seq(), 7) << what;
    EXPECT_EQ(Ranks(f.ranks()), std::vector<int>({2})) << what;
    EXPECT_EQ(Ranks(f.waiting_ranks()), std::vector<int>({0, 1})) << what;
    EXPECT_TRUE(absl::StartsWith(a.diagnosis(), "rank 2 never issued ")) << a.diagnosis();
    EXPECT_TRUE(absl::StrContains(a.diagnosis(), ":all_reduce Float[1234] seq 7") ||
                absl::StrContains(a.diagnosis(), ":all_reduce ?[1234] seq 7"))  // 1.4: no dtypes
        << a.diagnosis();
    EXPECT_EQ(a.collectives_size(), 7) << what;
    EXPECT_EQ(a.ranks(2).last_seq(), 6) << what;
    // Only the pickle form keeps the stack the waiting ranks issued it from.
    const bool pickle = absl::EndsWith(dir, "pickle");
    EXPECT_EQ(f.stack().empty(), !pickle) << what;
    if (pickle) EXPECT_TRUE(absl::StartsWith(f.stack(0), "all_reduce at ")) << f.stack(0);
  }
}

TEST(TorchFrVersionsTest, RankThatSentAnotherShapeIsASizeMismatch) {
  for (const auto& [dir, what] : Folders("size")) {
    const FlightRecorderAnalysis a = Analyze(dir);
    ASSERT_GE(a.findings_size(), 1) << what;
    const FrFinding& f = a.findings(0);
    EXPECT_EQ(f.kind(), "mismatch") << what;
    EXPECT_EQ(f.verdict(), "size_mismatch") << what;
    EXPECT_EQ(f.seq(), 5) << what;
    EXPECT_EQ(Ranks(f.ranks()), std::vector<int>({0, 1})) << what;
    EXPECT_TRUE(absl::StrContains(a.diagnosis(),
                                  "ranks disagree at seq 5 (size mismatch): rank 0 "
                                  "issued "))
        << a.diagnosis();
    EXPECT_TRUE(absl::StrContains(a.diagnosis(), "[2, 617] seq 5")) << a.diagnosis();
    EXPECT_TRUE(absl::EndsWith(a.diagnosis(), "(input sizes [[1234]] vs [[2, 617]])"))
        << a.diagnosis();
  }
}

TEST(TorchFrVersionsTest, RankThatSentAnotherDtypeIsADtypeMismatchWhereDtypesAreRecorded) {
  for (const auto& [dir, what] : Folders("dtype")) {
    const FlightRecorderAnalysis a = Analyze(dir);
    if (absl::StrContains(what, "2.3")) {
      // Dump version 1.4 records no dtypes: the same bytes look the same.
      EXPECT_TRUE(a.findings().empty()) << what << ": " << a.diagnosis();
      continue;
    }
    ASSERT_GE(a.findings_size(), 1) << what;
    EXPECT_EQ(a.findings(0).verdict(), "dtype_mismatch") << what;
    EXPECT_EQ(a.findings(0).seq(), 5) << what;
    EXPECT_TRUE(absl::EndsWith(a.diagnosis(), "(input dtypes [Float] vs [Int])")) << a.diagnosis();
  }
}

// The two forms of one dump say the same, but for the stacks only the pickle keeps.
TEST(TorchFrVersionsTest, JsonAndPickleFormsAgree) {
  for (const std::string release : {"2.5", "2.8", "2.15"}) {
    for (const std::string name : {"healthy", "missing", "size", "dtype"}) {
      if (!fs::exists(Case(release, name))) continue;
      FlightRecorderAnalysis json_form = Analyze(Case(release, name + "/json"));
      FlightRecorderAnalysis pickle_form = Analyze(Case(release, name + "/pickle"));
      for (auto* a : {&json_form, &pickle_form}) {
        a->clear_dir();
        for (FrFinding& f : *a->mutable_findings()) f.clear_stack();
      }
      std::string differences;
      google::protobuf::util::MessageDifferencer diff;
      diff.ReportDifferencesToString(&differences);
      EXPECT_TRUE(diff.Compare(json_form, pickle_form))
          << release << " " << name << ": " << differences;
    }
  }
}

// torchfrtrace's name for a mismatch -> ddpkit's.
std::string KindOf(const std::string& torch_state) {
  static const std::map<std::string, std::string> kKinds = {
      {"COLLECTIVE_TYPE_MISMATCH", "type_mismatch"},
      {"SIZE_OR_SYNTAX_MISMATCH", "size_mismatch"},
      {"COLLECTIVE_DTYPE_MISMATCH", "dtype_mismatch"},
      {"COLLECTIVE_STATE_MISMATCH", "state_mismatch"}};
  auto it = kKinds.find(torch_state);
  return it == kKinds.end() ? "?" + torch_state : it->second;
}

json Verdicts(const std::string& case_dir) {
  std::ifstream in(case_dir + "/torchfrtrace.json");
  return json::parse(in, nullptr, /*allow_exceptions=*/false);
}

// ddpkit's verdicts against those of PyTorch's own analyser (torchfrtrace of 2.15) on the same
// pickle dumps, collective by collective: missing ranks, and which rank mismatched how.
void ExpectSameVerdicts(const json& torch, const FlightRecorderAnalysis& a,
                        const std::string& what) {
  const json& collectives = torch.at("collectives");
  ASSERT_EQ(static_cast<int>(collectives.size()), a.collectives_size()) << what;
  for (size_t i = 0; i < collectives.size(); ++i) {
    const json& t = collectives[i];
    const FrCollective& c = a.collectives(static_cast<int>(i));
    const std::string where = what + " seq " + std::to_string(c.seq());
    EXPECT_EQ(t.at("seq").get<int64_t>(), c.seq()) << where;
    EXPECT_EQ(t.at("group").get<std::string>(), c.process_group()) << where;
    EXPECT_EQ(t.at("missing_ranks").get<std::vector<int>>(), Ranks(c.missing_ranks())) << where;
    std::map<int, std::string> theirs, ours;
    for (const auto& [rank, state] : t.at("mismatches").items()) {
      theirs[std::stoi(rank)] = KindOf(state.get<std::string>());
    }
    for (const FrMismatch& m : c.mismatches()) ours[m.rank()] = m.kind();
    EXPECT_EQ(theirs, ours) << where;
  }
}

TEST(TorchFrVersionsTest, VerdictsAreTorchfrtracesOnTheSameDumps) {
  int compared = 0;
  for (const std::string release : {"2.3", "2.4", "2.5", "2.8", "2.15"}) {
    for (const std::string name : {"healthy", "missing", "size", "dtype"}) {
      if (!fs::exists(Case(release, name))) continue;
      const std::string what = release + " " + name;
      const json torch = Verdicts(Case(release, name));
      ASSERT_TRUE(torch.is_object()) << what;
      const FlightRecorderAnalysis a = Analyze(Case(release, name + "/pickle"));
      if (torch.contains("collectives")) {
        ExpectSameVerdicts(torch, a, what);
        ++compared;
      } else if (torch.contains("repaired_pg_config")) {
        // Gloo's dumps name their groups "" in pg_config, and torchfrtrace stops with a
        // KeyError on them; ddpkit reads them as they are. Its verdicts on copies whose
        // pg_config names the groups are the ones to agree with.
        EXPECT_TRUE(absl::StartsWith(torch.at("error").get<std::string>(), "KeyError")) << what;
        const json& repaired = torch.at("repaired_pg_config");
        if (repaired.contains("collectives")) {
          ExpectSameVerdicts(repaired, a, what + " (repaired pg_config)");
          ++compared;
        }
      } else {
        // Dump version 1.4 (PyTorch 2.3) is older than anything torchfrtrace reads; ddpkit
        // reads it.
        EXPECT_EQ(release, "2.3") << what << ": " << torch.dump();
        EXPECT_TRUE(torch.contains("error")) << what;
        EXPECT_FALSE(a.collectives().empty()) << what;
      }
    }
  }
  EXPECT_EQ(compared, 13);  // 2.4's, 2.8's and 2.15's four jobs, and 2.5's empty one
}

// Ranks that ran different releases: named first (PyTorch's analyser refuses such a set),
// then the collectives compared on what both versions record.
TEST(TorchFrVersionsTest, RanksOfDifferentReleasesAreNamed) {
  const std::string dir = testing::TempDir() + "/ddpkit_fr_versions_" + std::to_string(::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const std::string r : {"0", "1"}) {
    fs::copy_file(Case("2.15", "healthy/pickle/fr_rank_" + r), dir + "/fr_rank_" + r);
  }
  fs::copy_file(Case("2.8", "healthy/pickle/fr_rank_2"), dir + "/fr_rank_2");
  const FlightRecorderAnalysis a = Analyze(dir);
  ASSERT_GE(a.findings_size(), 1);
  EXPECT_EQ(a.findings(0).kind(), "versions");
  EXPECT_EQ(Ranks(a.findings(0).ranks()), std::vector<int>({0, 1, 2}));
  EXPECT_TRUE(absl::StartsWith(a.diagnosis(),
                               "the ranks' dumps have different dump versions: "
                               "2.10 (ranks 0, 1), 2.9 (rank 2)"))
      << a.diagnosis();
  EXPECT_EQ(a.source(), "PyTorch dump versions 2.10, 2.9");
  EXPECT_EQ(a.dump_versions().at(2), "2.9");
  EXPECT_EQ(a.collectives_size(), 10);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ddpkit::jobs
