// Tensor storage, views and copies.
#include "autograd/tensor.h"

#include <cmath>

#include "autograd/gemm.h"
#include "autograd/kernels.h"
#include "autograd/ops.h"
#include "gtest/gtest.h"

namespace ddpkit {
namespace {

TEST(TensorTest, RowsAndViewsShareStorage) {
  Tensor t = Tensor::FromVector<float>({0, 1, 2, 3, 4, 5}, {3, 2});
  Tensor middle = t.Rows(1, 2);
  EXPECT_EQ(middle.shape(), (Shape{1, 2}));
  EXPECT_EQ(middle.storage_offset(), 2);
  EXPECT_EQ(middle.ToDoubles(), (std::vector<double>{2, 3}));
  middle.Fill(9);
  EXPECT_EQ(t.ToDoubles(), (std::vector<double>{0, 1, 9, 9, 4, 5}));
  Tensor flat = t.Flatten();
  EXPECT_EQ(flat.shape(), (Shape{6}));
  EXPECT_TRUE(flat.SharesStorageWith(t));
  EXPECT_TRUE(flat.IsAliasOf(t));
  EXPECT_FALSE(middle.IsAliasOf(t));
  EXPECT_THROW(t.Rows(2, 4), Error);
  EXPECT_THROW(t.View({4}), Error);
}

TEST(TensorTest, CloneAndConversionAreDeepCopies) {
  Tensor t = Tensor::FromVector<double>({1.5, -2.25}, {2});
  Tensor c = t.Clone();
  t.Fill(0);
  EXPECT_EQ(c.ToDoubles(), (std::vector<double>{1.5, -2.25}));
  Tensor f = c.To(DType::kFloat32);
  EXPECT_EQ(f.dtype(), DType::kFloat32);
  EXPECT_EQ(f.ToDoubles(), (std::vector<double>{1.5, -2.25}));
  Tensor half = c.To(DType::kFloat16);
  EXPECT_EQ(half.ToDoubles(), (std::vector<double>{1.5, -2.25}));
  Tensor dst = Tensor::Zeros({2}, DType::kBFloat16);
  dst.CopyFrom(c);
  EXPECT_EQ(dst.ToDoubles(), (std::vector<double>{1.5, -2.25}));
}

TEST(TensorTest, EmptyAndScalarShapes) {
  Tensor empty = Tensor::Zeros({0, 4});
  EXPECT_EQ(empty.numel(), 0);
  EXPECT_EQ(empty.Rows(0, 0).numel(), 0);
  Tensor s = Tensor::Scalar(3.0);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.item(), 3.0);
  EXPECT_THROW(Tensor::Zeros({2}).item(), Error);
}

TEST(TensorTest, TypedAccessChecksTheDtype) {
  Tensor t = Tensor::Zeros({2}, DType::kInt64);
  EXPECT_NO_THROW(t.data<int64_t>());
  EXPECT_THROW(t.data<float>(), Error);
}

TEST(TensorTest, OnlyFloatingLeavesCanRequireGrad) {
  Tensor labels = Tensor::Zeros({2}, DType::kInt64);
  EXPECT_THROW(labels.set_requires_grad(true), Error);
  Tensor x = Tensor::Zeros({2});
  x.set_requires_grad(true);
  EXPECT_TRUE(x.is_leaf());
  EXPECT_THROW(x.set_grad(Tensor::Zeros({3})), Error);
}

// Matmul and Linear write their GEMM outputs into uninitialised memory (no zero fill), so Gemm
// with beta 0 must ignore what C held, as BLAS does, also over an empty inner dimension.
TEST(TensorTest, GemmWithBetaZeroIgnoresWhatTheOutputHeld) {
  for (int64_t k : {0, 2}) {
    Tensor a = Tensor::Full({3, k}, 1.0, DType::kFloat64);
    Tensor b = Tensor::Full({k, 4}, 1.0, DType::kFloat64);
    Tensor c = Tensor::Full({3, 4}, std::nan(""), DType::kFloat64);
    Gemm(false, false, 3, 4, k, 1.0, a, b, 0.0, c);
    for (double v : c.ToDoubles()) EXPECT_EQ(v, static_cast<double>(k)) << "k = " << k;
  }
  Tensor y = Linear(Tensor::Zeros({3, 0}, DType::kFloat64), Tensor::Zeros({4, 0}, DType::kFloat64),
                    Tensor::Full({4}, 2.0, DType::kFloat64));
  for (double v : y.ToDoubles()) EXPECT_EQ(v, 2.0);
}

}  // namespace
}  // namespace ddpkit
