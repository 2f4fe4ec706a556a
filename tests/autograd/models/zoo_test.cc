// The model zoo: what a spec says of a model (sizes, input, classes) is what MakeModel builds.
#include "autograd/models/zoo.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace ddpkit::models {
namespace {

// Every spec's stated sizes equal the built model's; the memory check relies on them before
// anything is allocated.
TEST(ModelZooTest, StatedSizesAreTheBuiltModels) {
  for (const char* text :
       {"mlp:4,8,3", "mlp:4,8,8,8,3,bias=0,tied=1", "mlp:5,7,2,unused=1",
        "mlp:6,6,6,6,6,unused=1,tied=1", "mlp:3,5,bias=0,unused=1",
        "mlp:4,6,3,unused=1,branch=rank1+iters", "gpt:layers=2,heads=2,dim=8,ctx=6,vocab=11",
        "gpt:layers=3,heads=1,dim=4,ctx=5,vocab=7,bias=0"}) {
    SCOPED_TRACE(text);
    absl::StatusOr<ModelSpec> spec = ParseModel(text);
    ASSERT_TRUE(spec.ok()) << spec.status();
    std::shared_ptr<nn::Module> model = MakeModel(*spec, 0);
    EXPECT_EQ(spec->parameter_tensors, static_cast<int64_t>(model->Parameters().size()));
    int64_t elements = 0;
    for (const Tensor& p : model->Parameters()) elements += p.numel();
    EXPECT_EQ(spec->parameter_elements, static_cast<double>(elements));
    EXPECT_EQ(spec->text, text);
  }
}

TEST(ModelZooTest, MlpTakesFeatureRowsAndPredictsItsLastWidth) {
  absl::StatusOr<ModelSpec> spec = ParseModel("mlp:4,8,3");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->family, "mlp");
  EXPECT_EQ(spec->io.row, (Shape{4}));
  EXPECT_EQ(spec->io.input_dtype, DType::kFloat32);
  EXPECT_EQ(spec->io.classes, 3);
  EXPECT_FALSE(spec->io.per_position);
}

TEST(ModelZooTest, GptTakesTokenRowsAndPredictsEveryPosition) {
  absl::StatusOr<ModelSpec> spec = ParseModel("gpt:layers=1,heads=2,dim=8,ctx=6,vocab=11");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->family, "gpt");
  EXPECT_EQ(spec->io.row, (Shape{6}));
  EXPECT_EQ(spec->io.input_dtype, DType::kInt64);
  EXPECT_EQ(spec->io.classes, 11);
  EXPECT_TRUE(spec->io.per_position);
  Tensor tokens = Tensor::Zeros({2, 6}, DType::kInt64);
  EXPECT_EQ(MakeModel(*spec, 0)->Forward(tokens).shape(), (Shape{2, 6, 11}));
}

TEST(ModelZooTest, UnknownFamilyListsTheKnownOnes) {
  absl::StatusOr<ModelSpec> spec = ParseModel("vgg:16");
  ASSERT_FALSE(spec.ok());
  EXPECT_TRUE(absl::StrContains(spec.status().message(), "model spec 'vgg:16' is not understood"));
  EXPECT_TRUE(absl::StrContains(spec.status().message(), "mlp:IN,H1,...,OUT"));
}

}  // namespace
}  // namespace ddpkit::models
