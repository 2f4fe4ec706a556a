// The model zoo: what a spec says of a model (sizes, input, classes) is what MakeModel builds.
#include "autograd/nn/models/zoo.h"

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
        "gpt:layers=3,heads=1,dim=4,ctx=5,vocab=7,bias=0",
        "resnet:1,1,1,1,width=4,in=1,classes=10,stem=small", "resnet:1,2,1,1,width=2,classes=3"}) {
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

TEST(ModelZooTest, ResNetTakesImagesOfAnySize) {
  absl::StatusOr<ModelSpec> spec = ParseModel("resnet:1,1,1,1,width=4,in=1,classes=10,stem=small");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->family, "resnet");
  EXPECT_EQ(spec->io.row, (Shape{1, -1, -1}));
  EXPECT_EQ(spec->io.synthetic_row, (Shape{1, 8, 8}));
  EXPECT_EQ(spec->io.classes, 10);
  std::shared_ptr<nn::Module> model = MakeModel(*spec, 0);
  EXPECT_EQ(model->Forward(Tensor::Zeros({2, 1, 8, 8})).shape(), (Shape{2, 10}));
  EXPECT_EQ(model->Forward(Tensor::Zeros({2, 1, 12, 12})).shape(), (Shape{2, 10}));
  EXPECT_FALSE(model->NamedBuffers().empty());  // BatchNorm's running statistics
}

TEST(ModelZooTest, UnknownFamilyListsTheKnownOnes) {
  absl::StatusOr<ModelSpec> spec = ParseModel("vgg:16");
  ASSERT_FALSE(spec.ok());
  EXPECT_TRUE(absl::StrContains(spec.status().message(), "model spec 'vgg:16' is not understood"));
  EXPECT_TRUE(absl::StrContains(spec.status().message(), "mlp:IN,H1,...,OUT"));
}

}  // namespace
}  // namespace ddpkit::models
