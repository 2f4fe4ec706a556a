// Ops that move elements around: transpose, concat, slice, reshape.
#include "autograd/cuda/ops.h"
#include "autograd/function.h"
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"

namespace ddpkit {

namespace {

// out [cols, rows] <- x [rows, cols] transposed, on x's device.
void TransposeInto(const Tensor& x, const Tensor& out) {
  if constexpr (kWithCuda) {
    if (x.is_cuda()) return cuda::Transpose(x, out);
  }
  DispatchFloating(x.dtype(), "transpose", [&]<typename T>() {
    const int64_t rows = x.size(0), cols = x.size(1);
    const T* in = x.data<T>();
    T* o = out.data<T>();
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) o[c * rows + r] = in[r * cols + c];
    }
  });
}

}  // namespace

// ---------------------------------------------------------------------------- transpose
Tensor Transpose(const Tensor& x) {
  op_util::CheckMatrix("transpose", "input", x);
  Tensor out = Tensor::Empty({x.size(1), x.size(0)}, x.dtype(), x.device());
  TransposeInto(x, out);
  RecordOp(out, "TransposeBackward", {&x},
           [](const Tensor& g) -> TensorList { return {Transpose(g)}; });
  return out;
}

// ---------------------------------------------------------------------------- concat
Tensor Concat(const TensorList& parts) {
  DDPKIT_CHECK(!parts.empty(), "[concat] needs at least one tensor");
  const Tensor& first = parts.front();
  op_util::CheckFloating("concat", first);
  DDPKIT_CHECK(first.dim() >= 1, "[concat] cannot concatenate scalars along dim 0");
  Shape shape = first.shape();
  shape[0] = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Tensor& part = parts[i];
    op_util::CheckFloating("concat", part);
    Shape trailing = part.shape();
    DDPKIT_CHECK(part.dtype() == first.dtype() && part.dim() == first.dim() &&
                     std::equal(trailing.begin() + 1, trailing.end(), first.shape().begin() + 1),
                 "[concat] part ", i, " is ", DTypeName(part.dtype()), ShapeString(part.shape()),
                 ", part 0 is ", DTypeName(first.dtype()), ShapeString(first.shape()),
                 ": all parts need one dtype and equal trailing dimensions");
    op_util::CheckSameDevice("concat", first, part);
    shape[0] += part.size(0);
  }
  Tensor out = Tensor::Empty(shape, first.dtype(), first.device());
  std::vector<int64_t> row_offsets;  // where each part starts in the output
  int64_t row = 0;
  for (const Tensor& part : parts) {
    row_offsets.push_back(row);
    out.Rows(row, row + part.size(0)).CopyFrom(part);
    row += part.size(0);
  }
  row_offsets.push_back(row);

  // Each part's gradient is its row range of the output's gradient.
  std::vector<const Tensor*> inputs;
  for (const Tensor& part : parts) inputs.push_back(&part);
  RecordOp(out, "ConcatBackward", inputs, [row_offsets](const Tensor& g) {
    TensorList grads;
    for (size_t i = 0; i + 1 < row_offsets.size(); ++i) {
      grads.push_back(g.Rows(row_offsets[i], row_offsets[i + 1]));
    }
    return grads;
  });
  return out;
}

// ---------------------------------------------------------------------------- slice
Tensor Slice(const Tensor& x, int64_t begin, int64_t end) {
  op_util::CheckFloating("slice", x);
  Tensor out = x.Rows(begin, end);  // a view; validates the range
  // The gradient is zero outside the slice.
  RecordOp(out, "SliceBackward", {&x}, [shape = x.shape(), begin, end](const Tensor& g) {
    Tensor dx = Tensor::Zeros(shape, g.dtype(), g.device());
    dx.Rows(begin, end).CopyFrom(g);
    return TensorList{dx};
  });
  return out;
}

// ---------------------------------------------------------------------------- reshape
Tensor Reshape(const Tensor& x, const Shape& shape) {
  op_util::CheckFloating("reshape", x);
  Tensor out = x.View(shape);  // validates the element count
  RecordOp(out, "ReshapeBackward", {&x},
           [shape = x.shape()](const Tensor& g) { return TensorList{g.View(shape)}; });
  return out;
}

}  // namespace ddpkit
