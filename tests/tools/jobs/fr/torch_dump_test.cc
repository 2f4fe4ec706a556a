// `ddpkit fr analyze` on PyTorch's own flight-recorder dumps: the JSON form of two broken gloo
// jobs made with PyTorch 2.15 (tools/scripts/golden/make_torch_fr_golden.py; every release and
// form: torch_versions_test.cc), read in detail, and files that are not dumps.
#include "tools/torch_formats/torch_dump.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tools/jobs/fr/analyze.h"

namespace ddpkit::jobs {

using torch_formats::RankFromFileName;

namespace {

namespace fs = std::filesystem;

// The JSON dumps of a PyTorch 2.15 job (missing, dtype, ...); the pickle form with FORM.
std::string Fixture(const std::string& name, const std::string& form = "json") {
  return absl::StrCat(DDPKIT_TESTDATA_DIR, "/torch_fr/torch-2.15/", name, "/", form);
}

// A fresh folder holding copies of `files` from the fixture `from`, plus `extra` name -> text.
std::string FolderWith(const std::string& name, const std::string& from,
                       const std::vector<std::string>& files,
                       const std::vector<std::pair<std::string, std::string>>& extra = {}) {
  const std::string dir =
      testing::TempDir() + "/ddpkit_torch_fr_" + std::to_string(::getpid()) + "_" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const std::string& f : files) fs::copy_file(Fixture(from) + "/" + f, dir + "/" + f);
  for (const auto& [file, text] : extra) std::ofstream(dir + "/" + file) << text;
  return dir;
}

TEST(TorchFrTest, RankThatStoppedIsNamedWithTheCollectiveItNeverIssued) {
  absl::StatusOr<FlightRecorderAnalysis> a = AnalyzeFlightRecorders(Fixture("missing"));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->source(), "PyTorch dump version 2.10 (PyTorch 2.9-2.15)");
  EXPECT_EQ(a->world_size(), 3);
  ASSERT_EQ(a->findings_size(), 1);
  const FrFinding& f = a->findings(0);
  EXPECT_EQ(f.kind(), "missing");
  EXPECT_EQ(f.seq(), 7);
  EXPECT_EQ(std::vector<int>(f.ranks().begin(), f.ranks().end()), std::vector<int>({2}));
  EXPECT_EQ(std::vector<int>(f.waiting_ranks().begin(), f.waiting_ranks().end()),
            std::vector<int>({0, 1}));
  EXPECT_EQ(f.timeout_s(), 2.0);
  EXPECT_EQ(a->diagnosis(),
            "rank 2 never issued gloo:all_reduce Float[1234] seq 7 in process group 0; ranks 0, 1 "
            "were left waiting (timeout 2.0 s) (rank 2's last was gloo:all_reduce Float[1] seq 6 "
            "in process group 0)");
  ASSERT_EQ(a->ranks_size(), 3);
  EXPECT_EQ(a->ranks(0).last_seq(), 7);
  EXPECT_EQ(a->ranks(2).last_seq(), 6);
  EXPECT_EQ(a->ranks(2).last_entries_size(), 6);
}

TEST(TorchFrTest, RankThatIssuedAnotherDtypeIsNamedWithBothCalls) {
  absl::StatusOr<FlightRecorderAnalysis> a = AnalyzeFlightRecorders(Fixture("dtype"));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_GE(a->findings_size(), 1);
  const FrFinding& f = a->findings(0);
  EXPECT_EQ(f.kind(), "mismatch");
  EXPECT_EQ(f.seq(), 5);
  EXPECT_EQ(std::vector<int>(f.ranks().begin(), f.ranks().end()), std::vector<int>({0, 1}));
  EXPECT_EQ(a->diagnosis(),
            "ranks disagree at seq 5 (dtype mismatch): rank 0 issued gloo:all_reduce Float[1234] "
            "seq 5 in process group 0 but rank 1 issued gloo:all_reduce Int[1234] seq 5 in "
            "process group 0 (input dtypes [Float] vs [Int])");
  EXPECT_EQ(a->ranks(1).last_entries_size(), 8);  // the newest 8 of its 10
}

// Rank 2's dump lost: its peers are named as waiting in seq 7, their last call.
TEST(TorchFrTest, RankWithoutADumpIsWhereThePeersWaited) {
  const std::string dir = FolderWith("nodump", "missing", {"fr_rank_0.json", "fr_rank_1.json"});
  absl::StatusOr<FlightRecorderAnalysis> a = AnalyzeFlightRecorders(dir);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->world_size(), 3);  // from pg_config's ranks
  ASSERT_EQ(a->findings_size(), 1);
  EXPECT_EQ(a->findings(0).kind(), "no_dump");
  EXPECT_EQ(a->findings(0).seq(), 7);
  EXPECT_TRUE(absl::StrContains(a->diagnosis(), "rank 2 left no dump")) << a->diagnosis();
  EXPECT_TRUE(absl::StrContains(a->diagnosis(),
                                "ranks 0, 1 were left waiting (timeout 2.0 s) "
                                "in gloo:all_reduce Float[1234] seq 7"))
      << a->diagnosis();
  fs::remove_all(dir);
}

// One folder may mix the forms: a rank is a rank, whichever form it left.
TEST(TorchFrTest, FormsMixWithinAFolder) {
  const std::string dir = FolderWith("mixed", "missing", {"fr_rank_0.json", "fr_rank_1.json"});
  fs::copy_file(Fixture("missing", "pickle") + "/fr_rank_2", dir + "/fr_rank_2");
  absl::StatusOr<FlightRecorderAnalysis> a = AnalyzeFlightRecorders(dir);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->findings_size(), 1) << a->diagnosis();
  EXPECT_EQ(a->findings(0).kind(), "missing");
  EXPECT_EQ(a->findings(0).seq(), 7);
  fs::remove_all(dir);
}

// The pickle form and its JSON twin of one rank are two dumps of that rank.
TEST(TorchFrTest, BothFormsOfOneRankAreTwoDumps) {
  const std::string dir = FolderWith("twins", "missing", {"fr_rank_0.json"});
  fs::copy_file(Fixture("missing", "pickle") + "/fr_rank_0", dir + "/fr_rank_0");
  absl::StatusOr<FlightRecorderAnalysis> a = AnalyzeFlightRecorders(dir);
  ASSERT_FALSE(a.ok());
  EXPECT_TRUE(absl::StrContains(a.status().message(), "a second dump of rank 0")) << a.status();
  fs::remove_all(dir);
}

TEST(TorchFrTest, FilesThatAreNotDumpsAreRefusedInOneLine) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"fr_rank_1.json", "{\"traceEvents\": []}"},  // a profiler trace
      {"fr_rank_1.json", "not json"},
      {"fr_rank_1.json", R"({"version": "3.0", "pg_config": {}, "entries": []})"},
      {"fr_rank_1.json", R"({"version": 2.1, "pg_config": {}, "entries": []})"},
      {"fr_rank_1", std::string("\x80\x02}q\x00.", 6)},  // a pickle, not a dump
      {"fr_rank_1", std::string("\x80\x02"
                                "cos\nsystem\nq\x00.",
                                16)},  // a class: refused
      {"fr_rank_1.json", R"({"version": "2.10", "pg_config": {}, "entries": [{"pg_id": 0}]})"},
      {"fr_rank_1.json",
       R"({"version": "2.10", "pg_config": {}, "entries": [{"collective_seq_id": 1,
           "profiling_name": "gloo:all_reduce", "state": "scheduled", "input_sizes": [[-4]],
           "input_dtypes": ["Float"], "output_sizes": [], "output_dtypes": []}]})"},
  };
  for (const auto& file : bad) {
    const std::string dir = FolderWith("bad", "missing", {"fr_rank_0.json"}, {file});
    absl::StatusOr<FlightRecorderAnalysis> a = AnalyzeFlightRecorders(dir);
    ASSERT_FALSE(a.ok()) << file.second;
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message(a.status().message());
    EXPECT_TRUE(absl::StrContains(message, file.first + ": ")) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    fs::remove_all(dir);
  }
}

TEST(TorchFrTest, OneJobAtATime) {
  const std::string dir =
      FolderWith("mixed", "missing", {"fr_rank_0.json"}, {{"ddpkit_fr.rank0.json", "{}"}});
  EXPECT_FALSE(AnalyzeFlightRecorders(dir).ok());
  fs::remove_all(dir);
  const std::string twice =
      FolderWith("twice", "missing", {"fr_rank_0.json"}, {{"other_rank_0", "{}"}});
  fs::copy_file(Fixture("missing") + "/fr_rank_0.json", twice + "/other_rank_0",
                fs::copy_options::overwrite_existing);
  absl::StatusOr<FlightRecorderAnalysis> a = AnalyzeFlightRecorders(twice);
  ASSERT_FALSE(a.ok());
  EXPECT_TRUE(absl::StrContains(a.status().message(), "a second dump of rank 0"));
  fs::remove_all(twice);
}

TEST(TorchFrTest, RankComesFromTheFileNamesEnd) {
  EXPECT_EQ(RankFromFileName("nccl_trace_rank_3"), 3);
  EXPECT_EQ(RankFromFileName("fr_rank_12.json"), 12);
  EXPECT_EQ(RankFromFileName("dump.pkl"), std::nullopt);
  EXPECT_EQ(RankFromFileName("README.md"), std::nullopt);
  EXPECT_EQ(RankFromFileName("x_99999999999"), std::nullopt);
}

}  // namespace
}  // namespace ddpkit::jobs
