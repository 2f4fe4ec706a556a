// Every misuse DDP diagnoses: the error is raised (on every rank involved, never a hang) and
// its text names the rank, the parameter and the fix.
#include <functional>
#include <string_view>

#include "gmock/gmock.h"
#include "reducer/reducer_errors.h"
#include "tests/reducer/ddp_test_util.h"
#include "tests/reducer/test_models.h"

namespace ddpkit::reducer::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::string Message(const absl::Status& status) { return std::string(status.message()); }

// Reentrant checkpointing + find_unused_parameters: the graph search cannot see through the
// checkpoint, so the layer inside counts as unused and is marked at the first hook — then its
// own hook fires in the nested backward. Reproduces PyTorch's "marked ready only once".
TEST(DdpMarkedTwiceTest, CheckpointWithFindUnusedIsDiagnosed) {
  absl::Status status = RunWorldStatus(2, [](comm::ProcessGroup& group) {
    auto ddp = MakeDdp(std::make_shared<TwiceCheckpointedNet>(5, /*applications=*/1), group,
                       {.find_unused_parameters = true});
    CrossEntropy(ddp->Forward(RandomRows(2, 4, group.rank())), Labels(2, 3, 0)).Backward();
  });
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(status), AllOf(HasSubstr("rank 0: parameter"), HasSubstr("('shared."),
                                     HasSubstr("marked ready twice"), HasSubstr("checkpointing"),
                                     HasSubstr("static_graph"), HasSubstr("no_sync")));
}

TEST(DdpMarkedTwiceTest, LayerCheckpointedTwiceIsDiagnosedWithoutStaticGraph) {
  absl::Status status = RunWorldStatus(2, [](comm::ProcessGroup& group) {
    auto ddp = MakeDdp(std::make_shared<TwiceCheckpointedNet>(5), group);
    CrossEntropy(ddp->Forward(RandomRows(2, 4, group.rank())), Labels(2, 3, 0)).Backward();
  });
  EXPECT_THAT(Message(status), AllOf(HasSubstr("('shared."), HasSubstr("marked ready twice")));
}

TEST(DdpMarkedTwiceTest, StaticGraphFixesTheCheckpointCase) {
  RunWorld(2, [](comm::ProcessGroup& group) {
    auto ddp = MakeDdp(std::make_shared<TwiceCheckpointedNet>(5, 1), group, {.static_graph = true});
    for (int i = 0; i < 3; ++i) {
      CrossEntropy(ddp->Forward(RandomRows(2, 4, group.rank())), Labels(2, 3, 0)).Backward();
    }
  });
}

// A parameter that never gets a gradient with find_unused_parameters off: backward ends with
// its bucket never launched, and the next forward says which parameters were missing.
TEST(DdpPriorReductionTest, NextForwardNamesTheParametersWithoutGradient) {
  absl::Status status = RunWorldStatus(2, [](comm::ProcessGroup& group) {
    auto ddp = MakeDdp(std::make_shared<BranchyNet>(1), group);
    for (int i = 0; i < 2; ++i) {
      CrossEntropy(ddp->Forward(RandomRows(2, 4, i)), Labels(2, 3, 0)).Backward();
    }
  });
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(Message(status),
              AllOf(HasSubstr("rank 0: the previous iteration's gradient reduction never finished"),
                    HasSubstr("find_unused_parameters"), HasSubstr("no gradient on rank 0"),
                    HasSubstr("4 b.weight"), HasSubstr("5 b.bias"), HasSubstr("6 never.weight"),
                    HasSubstr("7 never.bias")));
}

TEST(DdpPriorReductionTest, FindUnusedParametersFixesIt) {
  RunWorld(2, [](comm::ProcessGroup& group) {
    auto ddp = MakeDdp(std::make_shared<BranchyNet>(1), group, {.find_unused_parameters = true});
    for (int i = 0; i < 3; ++i) {
      CrossEntropy(ddp->Forward(RandomRows(2, 4, i)), Labels(2, 3, 0)).Backward();
    }
  });
}

TEST(DdpStaticGraphErrorTest, ParameterUnusedAtFirstThenUsedIsAChangedGraph) {
  absl::Status status = RunWorldStatus(2, [](comm::ProcessGroup& group) {
    auto model = std::make_shared<BranchyNet>(1);
    auto ddp = MakeDdp(model, group, {.static_graph = true});
    for (int i = 0; i < 2; ++i) {
      model->use_a = i == 0;  // "b" joins in iteration 2
      CrossEntropy(ddp->Forward(RandomRows(2, 4, i)), Labels(2, 3, 0)).Backward();
    }
  });
  EXPECT_THAT(Message(status),
              AllOf(HasSubstr("training graph changed under static_graph"), HasSubstr("('b."),
                    HasSubstr("unused in the first iteration")));
}

TEST(DdpStaticGraphErrorTest, FewerHookFiringsThanRecordedIsReportedAtTheNextForward) {
  absl::Status status = RunWorldStatus(2, [](comm::ProcessGroup& group) {
    auto model = std::make_shared<TwiceCheckpointedNet>(5, 2);
    auto ddp = MakeDdp(model, group, {.static_graph = true});
    for (int i = 0; i < 3; ++i) {
      model->applications = i == 0 ? 2 : 1;
      CrossEntropy(ddp->Forward(RandomRows(2, 4, i)), Labels(2, 3, 0)).Backward();
    }
  });
  EXPECT_THAT(Message(status), AllOf(HasSubstr("static_graph every iteration must use the same"),
                                     HasSubstr("0 shared.weight"), HasSubstr("1 shared.bias")));
}

TEST(DdpModelMismatchTest, DifferentShapesNameTheParameterAndRank) {
  absl::Status status = RunWorldStatus(3, [](comm::ProcessGroup& group) {
    const int64_t hidden = group.rank() == 2 ? 6 : 5;
    MakeDdp(nn::MakeMlp({3, hidden, 2}, 1), group);
  });
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(status),
              AllOf(HasSubstr("parameter 0 ('0.weight') is float32[5, 3] on rank 0"),
                    HasSubstr("differs on rank 2")));
}

TEST(DdpModelMismatchTest, DifferentParameterCountsNameTheRank) {
  absl::Status status = RunWorldStatus(2, [](comm::ProcessGroup& group) {
    MakeDdp(nn::MakeMlp(group.rank() == 1 ? std::vector<int64_t>{3, 4, 4, 2}
                                          : std::vector<int64_t>{3, 4, 2},
                        1),
            group);
  });
  EXPECT_THAT(Message(status), HasSubstr("rank 1 has 6 parameter tensors while rank 0 has 4"));
}

TEST(DdpOptionsTest, InvalidOptionsAreRejected) {
  RunWorld(1, [](comm::ProcessGroup& group) {
    auto mlp = nn::MakeMlp({3, 2}, 1);
    auto status_of = [&](std::shared_ptr<nn::Module> m, DdpOptions o) {
      return DistributedDataParallel::Create(std::move(m), group, o).status();
    };
    // The one validation (ValidateDdpOptions, tests/reducer/ddp_options_test.cc) serves Create.
    EXPECT_THAT(Message(status_of(mlp, {.bucket_cap_mb = 0})),
                HasSubstr("bucket_cap_mb (--bucket-cap-mb) must be a positive size"));
    EXPECT_THAT(Message(status_of(mlp, {.bucket_cap_mb = -1})),
                HasSubstr("bucket_cap_mb (--bucket-cap-mb) must be a positive size"));
    EXPECT_THAT(Message(status_of(mlp, {.first_bucket_mb = 0})),
                HasSubstr("first_bucket_mb (--first-bucket-mb) must be a positive size"));
    EXPECT_THAT(Message(status_of(std::make_shared<nn::ReLU>(), {})),
                HasSubstr("no parameter that requires a gradient"));
    EXPECT_THAT(Message(status_of(nullptr, {})), HasSubstr("no module"));

    auto ddp = MakeDdp(mlp, group);
    ddp->RegisterBuiltinCommHook(BuiltinCommHook::kAllreduce);
    try {
      ddp->RegisterBuiltinCommHook(BuiltinCommHook::kFp16Compress);
      ADD_FAILURE() << "a second comm hook was accepted";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("already registered ('allreduce')"));
    }
    EXPECT_THAT(Message(ParseBuiltinCommHook("fp8").status()),
                HasSubstr("choose allreduce, fp16 or bf16"));
  });
}

// A rank that leaves without running backward: the others' bucket allreduce fails at once,
// naming the collective and the missing rank, instead of hanging.
TEST(DdpFailureTest, ARankThatLeavesIsNamedNotWaitedFor) {
  absl::Status status = RunWorldStatus(2, [](comm::ProcessGroup& group) {
    auto ddp = MakeDdp(nn::MakeMlp({3, 2}, 1), group);
    if (group.rank() == 1) return;
    CrossEntropy(ddp->Forward(RandomRows(2, 3, 0).To(DType::kFloat32)), Labels(2, 2, 0)).Backward();
  });
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(Message(status), AllOf(HasSubstr("reducing gradient bucket 0"),
                                     HasSubstr("ALLREDUCE"), HasSubstr("rank 1")));
}

// Each diagnosis ends its first line with the phrase PyTorch 1.13 prints for the same failure,
// so a user who searches for PyTorch's message finds ddpkit's explanation.
struct PhraseCase {
  std::string name;
  std::function<void(comm::ProcessGroup&)> body;
  std::vector<std::string_view> phrases;
  int world = 2;
};

std::string Quoted(const std::vector<std::string_view>& phrases) {
  std::string out = " (PyTorch: ";
  for (size_t i = 0; i < phrases.size(); ++i) {
    out += (i > 0 ? "; \"" : "\"") + std::string(phrases[i]) + "\"";
  }
  return out + ")";
}

void TrainSteps(DistributedDataParallel& ddp, int steps, int64_t features) {
  for (int i = 0; i < steps; ++i) {
    CrossEntropy(ddp.Forward(RandomRows(2, features, i)), Labels(2, 3, 0)).Backward();
  }
}

TEST(DdpPyTorchPhraseTest, EveryDiagnosisCarriesPyTorchsPhraseOnItsFirstLine) {
  namespace p = pytorch_phrase;
  const std::vector<PhraseCase> cases = {
      {"marked twice",
       [](comm::ProcessGroup& g) {
         TrainSteps(*MakeDdp(std::make_shared<TwiceCheckpointedNet>(5), g), 1, 4);
       },
       {p::kMarkedTwice}},
      {"prior reduction",
       [](comm::ProcessGroup& g) {
         TrainSteps(*MakeDdp(std::make_shared<BranchyNet>(1), g), 2, 4);
       },
       {p::kPriorReduction}},
      {"prior reduction under static_graph",
       [](comm::ProcessGroup& g) {
         auto model = std::make_shared<TwiceCheckpointedNet>(5, 2);
         auto ddp = MakeDdp(model, g, {.static_graph = true});
         TrainSteps(*ddp, 1, 4);
         model->applications = 1;
         TrainSteps(*ddp, 2, 4);
       },
       {p::kPriorReduction, p::kGraphChanged}},
      {"static graph changed",
       [](comm::ProcessGroup& g) {
         auto model = std::make_shared<BranchyNet>(1);
         auto ddp = MakeDdp(model, g, {.static_graph = true});
         TrainSteps(*ddp, 1, 4);
         model->use_a = false;
         TrainSteps(*ddp, 1, 4);
       },
       {p::kGraphChanged}},
      {"different shapes",
       [](comm::ProcessGroup& g) {
         MakeDdp(nn::MakeMlp({3, g.rank() == 1 ? 6 : 5, 2}, 1), g);
       },
       {p::kDifferentModels}},
      {"different counts",
       [](comm::ProcessGroup& g) {
         MakeDdp(nn::MakeMlp(g.rank() == 1 ? std::vector<int64_t>{3, 4, 4, 2}
                                           : std::vector<int64_t>{3, 4, 2},
                             1),
                 g);
       },
       {p::kDifferentModels}},
      {"no trainable parameter",
       [](comm::ProcessGroup& g) { MakeDdp(std::make_shared<nn::ReLU>(), g); },
       {p::kNoTrainableParameter},
       1},
      {"second comm hook",
       [](comm::ProcessGroup& g) {
         auto ddp = MakeDdp(nn::MakeMlp({3, 2}, 1), g);
         ddp->RegisterBuiltinCommHook(BuiltinCommHook::kAllreduce);
         ddp->RegisterBuiltinCommHook(BuiltinCommHook::kFp16Compress);
       },
       {p::kSecondCommHook},
       1},
  };
  for (const PhraseCase& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string message = Message(RunWorldStatus(c.world, c.body));
    const std::string first_line = message.substr(0, message.find('\n'));
    EXPECT_THAT(first_line, ::testing::EndsWith(Quoted(c.phrases))) << message;
  }
}

}  // namespace
}  // namespace ddpkit::reducer::testing
