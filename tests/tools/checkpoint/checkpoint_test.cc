// `ddpkit train --checkpoint-dir`: a run stopped and resumed ends bitwise where an
// uninterrupted one does; damaged checkpoints are skipped with a warning; an incompatible
// resume is refused naming the setting; leftovers of an interrupted save are cleaned up.
#include "tools/checkpoint/checkpoint.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "autograd/base/file_util.h"
#include "autograd/nn/safetensors.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/state_dict_compare.h"
#include "tools/checkpoint/durable_file.h"
#include "tools/checkpoint/state_file.h"
#include "tools/jobs/train/trainer.h"

namespace ddpkit::jobs {
namespace {

namespace fs = std::filesystem;

// A fresh folder per test (CTest runs tests of one binary in parallel processes).
std::string FreshDir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("ddpkit_ckpt_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  return dir.string();
}

TrainConfig SmallRun(const std::string& optimizer, int steps) {
  TrainConfig config;
  config.model = "mlp:8,16,16,4";
  config.synthetic_rows = 256;
  config.world.world_size = 2;
  config.batch_size = 8;
  config.momentum = 0.9;
  config.optimizer = optimizer;
  config.steps = steps;
  return config;
}

absl::StatusOr<TrainReport> TrainWithCheckpoints(TrainConfig config, const std::string& dir,
                                                 int every = 2, int keep = 2) {
  config.checkpoint = {.dir = dir, .every = every, .keep = keep};
  return Train(config);
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The proof: S steps in one go, or k steps, a stop, and a resume up to S, end with the same
// bits — weights, momentum (it shapes every later step) and data position all restored.
// The ResNet carries BatchNorm buffers (running stats, num_batches_tracked) and the GPT a tied
// table: both must come back bitwise too.
constexpr char kMlp[] = "mlp:8,16,16,4";
constexpr char kResNet[] = "resnet:1,1,1,1,width=2,in=1,classes=4,stem=small";
constexpr char kGpt[] = "gpt:layers=1,heads=2,dim=8,ctx=8,vocab=11";

struct RestartCase {
  std::string optimizer;
  int grad_accum;
  std::string model = kMlp;
  friend void PrintTo(const RestartCase& c, std::ostream* os) {
    *os << c.optimizer << ", grad_accum " << c.grad_accum << ", " << c.model;
  }
};

class RestartTest : public testing::TestWithParam<RestartCase> {};

TEST_P(RestartTest, StoppedAndResumedEqualsUninterruptedBitwise) {
  const std::string dir =
      FreshDir("restart_" + GetParam().optimizer + GetParam().model.substr(0, 3));
  const std::string straight = dir + "_straight.safetensors",
                    resumed = dir + "_resumed.safetensors";
  constexpr int kSteps = 7, kStopAt = 3;

  TrainConfig full = SmallRun(GetParam().optimizer, kSteps);
  full.grad_accum = GetParam().grad_accum;
  full.model = GetParam().model;
  full.save_weights_path = straight;
  absl::StatusOr<TrainReport> uninterrupted = Train(full);
  ASSERT_TRUE(uninterrupted.ok()) << uninterrupted.status();

  TrainConfig first = full;
  first.steps = kStopAt;
  first.save_weights_path.clear();
  absl::StatusOr<TrainReport> stopped = TrainWithCheckpoints(first, dir);
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ(stopped->resumed_from_step(), 0);
  EXPECT_EQ(absl::StrJoin(stopped->checkpoints_written(), ","),
            dir + "/step-00000002," + dir + "/step-00000003");

  TrainConfig second = full;
  second.save_weights_path = resumed;
  absl::StatusOr<TrainReport> rest = TrainWithCheckpoints(second, dir);
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(rest->resumed_from_step(), kStopAt);
  EXPECT_EQ(rest->resumed_from(), dir + "/step-00000003");
  ASSERT_EQ(rest->losses_size(), kSteps - kStopAt);
  for (int i = 0; i < kSteps - kStopAt; ++i) {
    EXPECT_EQ(rest->losses(i), uninterrupted->losses(kStopAt + i)) << "step " << kStopAt + i;
  }
  testing_util::ExpectSameStateDicts(straight, resumed);
  // And what the last checkpoint holds is that same model.
  testing_util::ExpectSameStateDicts(straight, dir + "/step-00000007/model.safetensors");
  EXPECT_EQ(Entries(dir), (std::vector<std::string>{"step-00000006", "step-00000007"}));
  fs::remove_all(dir);
  fs::remove(straight);
  fs::remove(resumed);
}

INSTANTIATE_TEST_SUITE_P(Optimizers, RestartTest,
                         testing::Values(RestartCase{"sgd", 1}, RestartCase{"zero-sgd", 1},
                                         RestartCase{"sgd", 2}, RestartCase{"sgd", 2, kResNet},
                                         RestartCase{"zero-sgd", 1, kResNet},
                                         RestartCase{"sgd", 1, kGpt}),
                         [](const auto& info) {
                           std::string name = info.param.optimizer + "_accum" +
                                              std::to_string(info.param.grad_accum);
                           if (info.param.model != kMlp)
                             name += "_" + info.param.model.substr(0, 3);
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// A checkpoint of zero-sgd holds each rank's shard; of sgd, one optimizer file for all.
TEST(CheckpointLayoutTest, FilesManifestAndAPyTorchLoadableModel) {
  const std::string dir = FreshDir("layout");
  ASSERT_TRUE(TrainWithCheckpoints(SmallRun("zero-sgd", 2), dir).ok());
  const std::string step = dir + "/step-00000002";
  EXPECT_EQ(Entries(step),
            (std::vector<std::string>{"MANIFEST.json", "model.safetensors",
                                      "optimizer.rank-00000.safetensors",
                                      "optimizer.rank-00001.safetensors", "state.json"}));
  absl::StatusOr<checkpoint::CheckpointManifest> manifest = checkpoint::VerifyCheckpoint(step);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_EQ(manifest->step, 2);
  EXPECT_EQ(manifest->files.size(), 4u);

  // The weights file: safetensors as PyTorch's loader reads it — an 8-byte little-endian header
  // length, a JSON header padded to 8 bytes, "__metadata__": {"format": "pt"} and the state
  // dict's names.
  absl::StatusOr<std::string> bytes = ReadFileToString(step + "/model.safetensors");
  ASSERT_TRUE(bytes.ok());
  uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = header << 8 | static_cast<uint8_t>((*bytes)[i]);
  EXPECT_EQ(header % 8, 0u);
  const nlohmann::json json = nlohmann::json::parse(bytes->substr(8, header));
  EXPECT_EQ(json["__metadata__"]["format"], "pt");
  for (const char* name : {"0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"}) {
    EXPECT_EQ(json[name]["dtype"], "F32") << name;
  }
  // The optimizer shards hold momentum keyed by the parameter's index in the whole model.
  absl::StatusOr<SafetensorsFile> shard0 =
      ReadSafetensors(step + "/optimizer.rank-00000.safetensors");
  absl::StatusOr<SafetensorsFile> shard1 =
      ReadSafetensors(step + "/optimizer.rank-00001.safetensors");
  ASSERT_TRUE(shard0.ok() && shard1.ok());
  EXPECT_EQ(shard0->tensors.size() + shard1->tensors.size(), 6u);
  absl::StatusOr<std::string> state = ReadFileToString(step + "/state.json");
  const nlohmann::json s = nlohmann::json::parse(*state);
  EXPECT_EQ(s["step"], 2);
  EXPECT_EQ(s["next_micro_batch"], 2);
  EXPECT_EQ(s["settings"]["--lr"], "0.1");
  fs::remove_all(dir);
}

// A ResNet's checkpoint holds its BatchNorm buffers beside the parameters, in PyTorch's
// state_dict order (rank 0's: DDP broadcasts them before every forward), num_batches_tracked as
// int64; the manifest's CRC covers them, so one flipped byte in a running_var is detected and
// the resume falls back to the checkpoint before.
TEST(CheckpointLayoutTest, BatchNormBuffersAreSavedAndACorruptedOneIsDetected) {
  const std::string dir = FreshDir("buffers");
  TrainConfig config = SmallRun("sgd", 3);
  config.model = kResNet;
  ASSERT_TRUE(TrainWithCheckpoints(config, dir).ok());
  const std::string model = dir + "/step-00000003/model.safetensors";
  const auto header = testing_util::SafetensorsHeader(model);
  ASSERT_GE(header.size(), 6u);
  const std::vector<std::pair<std::string, std::string>> stem(header.begin(), header.begin() + 6);
  EXPECT_EQ(stem,
            (std::vector<std::pair<std::string, std::string>>{{"conv1.weight", "F32"},
                                                              {"bn1.weight", "F32"},
                                                              {"bn1.bias", "F32"},
                                                              {"bn1.running_mean", "F32"},
                                                              {"bn1.running_var", "F32"},
                                                              {"bn1.num_batches_tracked", "I64"}}));
  absl::StatusOr<SafetensorsFile> saved = ReadSafetensors(model);
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->Find("layer1.0.bn2.num_batches_tracked")->item(), 3);  // one per forward
  EXPECT_NE(saved->Find("layer1.0.bn1.running_var")->at(0), 1.0);         // moved off its init

  absl::StatusOr<std::string> bytes = ReadFileToString(model);
  ASSERT_TRUE(bytes.ok());
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = length << 8 | static_cast<uint8_t>((*bytes)[i]);
  const nlohmann::json json = nlohmann::json::parse(bytes->substr(8, length));
  const uint64_t at =
      8 + length + json["layer1.0.bn1.running_var"]["data_offsets"][0].get<uint64_t>();
  {
    std::fstream f(model, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at + 1));
    f.put(static_cast<char>((*bytes)[at + 1] ^ 0x10));
  }
  const absl::Status verified = checkpoint::VerifyCheckpoint(dir + "/step-00000003").status();
  EXPECT_EQ(verified.code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(
      absl::StrContains(verified.message(), "'model.safetensors' does not match its CRC-32"))
      << verified;
  config.steps = 4;
  absl::StatusOr<TrainReport> resumed = TrainWithCheckpoints(config, dir);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->resumed_from_step(), 2);
  fs::remove_all(dir);
}

// Three ways to damage the newest checkpoint; each falls back to the one before with one
// warning naming the folder and what is wrong, and the run still ends where it should.
TEST(CheckpointFallbackTest, DamagedLatestFallsBackToThePreviousOne) {
  const std::string straight = FreshDir("fallback_straight.safetensors");
  TrainConfig full = SmallRun("sgd", 6);
  full.save_weights_path = straight;
  ASSERT_TRUE(Train(full).ok());
  const std::vector<std::pair<std::string, std::function<void(const std::string&)>>> damages = {
      {"does not match its CRC-32",
       [](const std::string& step) {
         std::fstream f(step + "/model.safetensors",
                        std::ios::in | std::ios::out | std::ios::binary);
         f.seekp(200);
         f.put('\x5a');
       }},
      {"(truncated?)",
       [](const std::string& step) { fs::resize_file(step + "/optimizer.safetensors", 10); }},
      {"no readable MANIFEST.json",
       [](const std::string& step) { fs::remove(step + "/MANIFEST.json"); }},
  };
  for (const auto& [what, damage] : damages) {
    const std::string dir = FreshDir("fallback");
    ASSERT_TRUE(TrainWithCheckpoints(SmallRun("sgd", 4), dir).ok());
    damage(dir + "/step-00000004");
    TrainConfig rest = full;
    rest.save_weights_path = straight + ".resumed";
    absl::StatusOr<TrainReport> report = TrainWithCheckpoints(rest, dir);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_EQ(report->resumed_from_step(), 2) << what;
    ASSERT_EQ(report->checkpoint_warnings_size(), 1) << what;
    const std::string& warning = report->checkpoint_warnings(0);
    EXPECT_TRUE(absl::StrContains(warning, dir + "/step-00000004: ")) << warning;
    EXPECT_TRUE(absl::StrContains(warning, what)) << warning;
    EXPECT_TRUE(absl::StrContains(warning, "moved to " + dir + "/damaged-step-00000004"))
        << warning;
    EXPECT_TRUE(absl::StrContains(warning, "falling back to " + dir + "/step-00000002")) << warning;
    testing_util::ExpectSameStateDicts(straight, straight + ".resumed");
    fs::remove_all(dir);
  }
  fs::remove(straight);
  fs::remove(straight + ".resumed");
}

// Nothing usable but checkpoints there: refuse rather than silently start over.
TEST(CheckpointFallbackTest, OnlyDamagedCheckpointsAreRefusedNamingEach) {
  const std::string dir = FreshDir("all_damaged");
  ASSERT_TRUE(TrainWithCheckpoints(SmallRun("sgd", 4), dir).ok());
  fs::remove(dir + "/step-00000004/state.json");
  fs::resize_file(dir + "/step-00000002/model.safetensors", 3);
  absl::StatusOr<TrainReport> report = TrainWithCheckpoints(SmallRun("sgd", 6), dir);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string message(report.status().message());
  EXPECT_TRUE(absl::StrContains(message, "no usable checkpoint in " + dir)) << message;
  EXPECT_TRUE(absl::StrContains(message, "step-00000004: file 'state.json' is missing")) << message;
  EXPECT_TRUE(absl::StrContains(message, "step-00000002: file 'model.safetensors' has 3 bytes"))
      << message;
  EXPECT_EQ(Entries(dir), (std::vector<std::string>{"step-00000002", "step-00000004"}));
  fs::remove_all(dir);
}

// An interrupted save leaves a .tmp folder: never read, removed with a warning.
TEST(CheckpointFallbackTest, LeftoverTemporaryFolderIsIgnoredAndRemoved) {
  const std::string dir = FreshDir("leftover");
  ASSERT_TRUE(TrainWithCheckpoints(SmallRun("sgd", 2), dir).ok());
  const std::string tmp = dir + "/.tmp-step-00000004-12345";
  fs::copy(dir + "/step-00000002", tmp);  // even one that looks whole is not trusted
  std::ofstream(tmp + "/model.safetensors", std::ios::app) << "half";
  absl::StatusOr<TrainReport> report = TrainWithCheckpoints(SmallRun("sgd", 3), dir);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->resumed_from_step(), 2);
  ASSERT_EQ(report->checkpoint_warnings_size(), 1);
  EXPECT_TRUE(absl::StrContains(report->checkpoint_warnings(0), "removed " + tmp))
      << report->checkpoint_warnings(0);
  EXPECT_FALSE(fs::exists(tmp));
  fs::remove_all(dir);
}

// Replaces the file `name` of the checkpoint `folder`, manifest entry included, as if the writer
// had written these bytes.
void Rewrite(const std::string& folder, const std::string& name, const std::string& bytes) {
  absl::StatusOr<checkpoint::CheckpointManifest> manifest =
      checkpoint::ReadCheckpointManifest(folder);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  for (checkpoint::CheckpointFile& file : manifest->files) {
    if (file.name == name)
      file = {.name = name, .size = bytes.size(), .crc32 = checkpoint::Crc32(bytes)};
  }
  std::ofstream(folder + "/" + name, std::ios::binary | std::ios::trunc) << bytes;
  std::ofstream(folder + "/" + std::string(checkpoint::kManifestFileName), std::ios::trunc)
      << checkpoint::SerializeCheckpointManifest(*manifest);
}

// The first step after a resume already reduces with the bucket plan DDP rebuilt before the stop
// (docs/reliability.md "Checkpoints"): at >= 3 Gloo ranks the initial plan would sum in another
// order. Rank 0's logging data after that step shows it. A checkpoint after step 1 holds the
// plan the rebuild at step 2's forward was about to make.
TEST(CheckpointBucketPlanTest, ResumedDdpStartsFromTheRebuiltPlan) {
  absl::StatusOr<TrainReport> straight = Train(SmallRun("sgd", 3));
  ASSERT_TRUE(straight.ok()) << straight.status();
  const std::string rebuilt = straight->ddp().pytorch().rebuilt_per_bucket_param_indices();
  EXPECT_EQ(rebuilt, "5 4 3 2 1 0");
  for (int stop : {1, 2}) {
    const std::string dir = FreshDir("bucket_plan");
    ASSERT_TRUE(TrainWithCheckpoints(SmallRun("sgd", stop), dir, /*every=*/1).ok());
    const nlohmann::json state = nlohmann::json::parse(
        *ReadFileToString(dir + "/" + checkpoint::CheckpointFolderName(stop) + "/state.json"));
    EXPECT_EQ(state["ddp_buckets"]["per_bucket_param_indices"].dump(), "[[5,4,3,2,1,0]]");

    TrainConfig config = SmallRun("sgd", 3);
    config.checkpoint = {.dir = dir, .every = 1};
    std::vector<std::string> plans;  // after each resumed step
    TrainObserver observer;
    observer.on_step = [&](const StepProgress& progress) {
      plans.push_back(progress.ddp->pytorch().rebuilt_per_bucket_param_indices());
    };
    absl::StatusOr<TrainReport> resumed = Train(config, observer);
    ASSERT_TRUE(resumed.ok()) << resumed.status();
    EXPECT_EQ(resumed->checkpoint_warnings_size(), 0);
    EXPECT_EQ(plans, std::vector<std::string>(3 - stop, rebuilt)) << "stopped after " << stop;
    fs::remove_all(dir);
  }
}

// A plan that does not fit the model is a warning, and DDP rebuilds as it would without one; a
// checkpoint written before plans were kept resumes as before. A plan of the wrong shape makes
// state.json unreadable, as any other malformed field.
TEST(CheckpointBucketPlanTest, ABadPlanIsAWarningAndAnOldCheckpointResumes) {
  const std::string dir = FreshDir("bad_plan"), step = dir + "/step-00000002";
  ASSERT_TRUE(TrainWithCheckpoints(SmallRun("sgd", 2), dir).ok());
  nlohmann::ordered_json state =
      nlohmann::ordered_json::parse(*ReadFileToString(step + "/state.json"));
  state["ddp_buckets"]["per_bucket_param_indices"] = {{5, 4, 3, 2, 1, 1}};
  Rewrite(step, "state.json", state.dump(2));
  absl::StatusOr<TrainReport> resumed = TrainWithCheckpoints(SmallRun("sgd", 4), dir);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  ASSERT_EQ(resumed->checkpoint_warnings_size(), 1);
  EXPECT_EQ(resumed->checkpoint_warnings(0),
            step +
                ": its DDP bucket plan is not used (bucket 0 names parameter 1, which an "
                "earlier bucket holds); DDP rebuilds its buckets anew, so the resumed run may "
                "differ from an uninterrupted one in the last bits");
  EXPECT_EQ(resumed->ddp().pytorch().rebuilt_per_bucket_param_indices(), "5 4 3 2 1 0");

  fs::remove_all(dir + "/step-00000004");
  state.erase("ddp_buckets");
  Rewrite(step, "state.json", state.dump(2));
  resumed = TrainWithCheckpoints(SmallRun("sgd", 3), dir);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->resumed_from_step(), 2);
  EXPECT_EQ(resumed->checkpoint_warnings_size(), 0);

  state["ddp_buckets"] = {{"per_bucket_param_indices", {{5, -4}}}, {"limits", {1}}};
  EXPECT_EQ(checkpoint::ParseCheckpointState(state.dump()).status().message(),
            "state.json: a bucket of \"per_bucket_param_indices\" holds something other than a "
            "non-negative integer");
  state["ddp_buckets"] = {{"per_bucket_param_indices", {{5}}}};
  EXPECT_EQ(checkpoint::ParseCheckpointState(state.dump()).status().message(),
            "state.json: \"ddp_buckets\" has no \"limits\"");
  state["world_size"] = int64_t{1} << 31;  // would read back as a negative int
  EXPECT_EQ(checkpoint::ParseCheckpointState(state.dump()).status().message(),
            "state.json: \"world_size\" has the wrong type");
  fs::remove_all(dir);
}

// Trains `config`; rank 0's rebuilt plan (PyTorch's string) after each step, and the report.
std::pair<std::vector<std::string>, TrainReport> PlansPerStep(const TrainConfig& config) {
  std::vector<std::string> plans;
  TrainObserver observer;
  observer.on_step = [&](const StepProgress& progress) {
    plans.push_back(progress.ddp->pytorch().rebuilt_per_bucket_param_indices());
  };
  absl::StatusOr<TrainReport> report = Train(config, observer);
  EXPECT_TRUE(report.ok()) << report.status();
  return {plans, report.ok() ? *report : TrainReport()};
}

// --static-graph stopped after step 1, before static graph's second iteration recorded the
// arrival order: the checkpoint keeps the first iteration's record (and no plan yet), so the
// resumed run's first step is the uninterrupted run's second and it rebuilds at the same step.
// Without the record it counted hooks again and rebuilt a step later (its third step reduced
// with the initial plan: at >= 3 Gloo ranks, other last bits). A checkpoint without the record
// resumes as before; a record that does not fit is a warning and changes nothing else.
TEST(CheckpointBucketPlanTest, StaticGraphResumedAfterStepOneRebuildsWhenTheStraightRunDid) {
  TrainConfig config = SmallRun("sgd", 3);
  config.ddp.static_graph = true;
  EXPECT_EQ(PlansPerStep(config).first, (std::vector<std::string>{"", "", "5 4 3 2 1 0"}));

  const std::string dir = FreshDir("static_graph"), step = dir + "/step-00000001";
  TrainConfig first = config;
  first.steps = 1;
  ASSERT_TRUE(TrainWithCheckpoints(first, dir, /*every=*/1).ok());
  nlohmann::ordered_json state =
      nlohmann::ordered_json::parse(*ReadFileToString(step + "/state.json"));
  EXPECT_FALSE(state.contains("ddp_buckets"));
  EXPECT_EQ(state["ddp_static_graph"].dump(),
            "{\"num_grad_hooks_triggered\":[1,1,1,1,1,1],\"globally_unused_param_indices\":[]}");

  config.checkpoint = {.dir = dir, .every = 3, .keep = 5};
  auto resumed_plans = [&](const nlohmann::ordered_json& record) {
    if (record.is_null()) {
      state.erase("ddp_static_graph");
    } else {
      state["ddp_static_graph"] = record;
    }
    Rewrite(step, "state.json", state.dump(2));
    fs::remove_all(dir + "/step-00000003");  // resume from step 1 each time
    return PlansPerStep(config);
  };
  const nlohmann::ordered_json recorded = state["ddp_static_graph"];
  auto [plans, report] = resumed_plans(recorded);
  EXPECT_EQ(report.resumed_from_step(), 1);
  EXPECT_EQ(report.checkpoint_warnings_size(), 0);
  EXPECT_EQ(plans, (std::vector<std::string>{"", "5 4 3 2 1 0"}));

  EXPECT_EQ(resumed_plans(nullptr).first, (std::vector<std::string>{"", ""}));  // as before

  nlohmann::ordered_json bad = recorded;
  bad["num_grad_hooks_triggered"] = {1, 1};
  std::tie(plans, report) = resumed_plans(bad);
  EXPECT_EQ(plans, (std::vector<std::string>{"", ""}));
  ASSERT_EQ(report.checkpoint_warnings_size(), 1);
  EXPECT_EQ(report.checkpoint_warnings(0),
            step +
                ": its DDP static graph record is not used (the record has 2 hook counts for 6 "
                "parameters); DDP counts the hooks again in its first step, so the resumed run "
                "may differ from an uninterrupted one in the last bits");

  bad["num_grad_hooks_triggered"] = {1, -1};
  state["ddp_static_graph"] = bad;
  EXPECT_EQ(checkpoint::ParseCheckpointState(state.dump()).status().message(),
            "state.json: \"ddp_static_graph\" \"num_grad_hooks_triggered\" holds something "
            "other than a non-negative integer");
  state["ddp_static_graph"] = {{"num_grad_hooks_triggered", {1}}};
  EXPECT_EQ(checkpoint::ParseCheckpointState(state.dump()).status().message(),
            "state.json: \"ddp_static_graph\" has no \"globally_unused_param_indices\"");
  fs::remove_all(dir);
}

TEST(CheckpointConfigTest, IncompatibleResumeIsRefusedNamingTheSetting) {
  const std::string dir = FreshDir("incompatible");
  ASSERT_TRUE(TrainWithCheckpoints(SmallRun("sgd", 2), dir).ok());
  const std::pair<std::function<void(TrainConfig&)>, std::string> changes[] = {
      {[](TrainConfig& c) { c.lr = 0.05; }, "written with --lr 0.1 but this run has --lr 0.05"},
      {[](TrainConfig& c) { c.world.world_size = 3; },
       "written with --world-size 2 but this run has --world-size 3"},
      {[](TrainConfig& c) { c.optimizer = "zero-sgd"; },
       "written with --optimizer sgd but this run has --optimizer zero-sgd"},
      {[](TrainConfig& c) { c.model = "mlp:8,16,4"; }, "--model mlp:8,16,16,4 but"},
      {[](TrainConfig& c) { c.seed = 3; }, "--seed 0 but this run has --seed 3"},
      {[](TrainConfig& c) { c.grad_accum = 2; }, "--grad-accum 1 but"},
      {[](TrainConfig& c) { c.batch_size = 4; }, "--batch-size 8 but"},
  };
  for (const auto& [change, expected] : changes) {
    TrainConfig config = SmallRun("sgd", 4);
    change(config);
    absl::StatusOr<TrainReport> report = TrainWithCheckpoints(config, dir);
    ASSERT_FALSE(report.ok()) << expected;
    EXPECT_EQ(report.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_TRUE(absl::StrContains(report.status().message(), expected)) << report.status();
    EXPECT_TRUE(absl::StrContains(report.status().message(), dir + "/step-00000002"))
        << report.status();
  }
  // More steps is not a different run.
  EXPECT_TRUE(TrainWithCheckpoints(SmallRun("sgd", 4), dir).ok());
  fs::remove_all(dir);
}

TEST(CheckpointConfigTest, KeepsTheNewestAndResumingPastTheEndTrainsNothing) {
  const std::string dir = FreshDir("keep");
  ASSERT_TRUE(TrainWithCheckpoints(SmallRun("sgd", 6), dir, /*every=*/1, /*keep=*/3).ok());
  EXPECT_EQ(Entries(dir),
            (std::vector<std::string>{"step-00000004", "step-00000005", "step-00000006"}));
  absl::StatusOr<TrainReport> again = TrainWithCheckpoints(SmallRun("sgd", 5), dir, 1, 3);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->resumed_from_step(), 6);
  EXPECT_EQ(again->losses_size(), 0);
  EXPECT_EQ(again->checkpoints_written_size(), 0);
  fs::remove_all(dir);
}

TEST(CheckpointConfigTest, BadOptionsNameTheFlag) {
  TrainConfig config = SmallRun("sgd", 2);
  config.checkpoint = {.dir = FreshDir("bad"), .every = 0};
  EXPECT_EQ(Train(config).status().message(), "--checkpoint-every must be >= 1, got 0");
  config.checkpoint = {.dir = FreshDir("bad"), .every = 1, .keep = 0};
  EXPECT_EQ(Train(config).status().message(), "--checkpoint-keep must be >= 1, got 0");
  config.checkpoint = {.dir = "/proc/ddpkit_no_such/dir", .every = 1};
  absl::Status status = Train(config).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(status.message(),
                               "--checkpoint-dir '/proc/ddpkit_no_such/dir' is not a writable"))
      << status;
  fs::remove_all(FreshDir("bad"));
}

}  // namespace
}  // namespace ddpkit::jobs
