// Tensor: a handle to row-major data in shared storage, plus autograd metadata.
//
// A tensor lives on one device (the host, or a GPU: autograd/device.h); its data pointer is
// only dereferenced there, by host loops or by CUDA kernels (autograd/cuda/).
//
// Every tensor is contiguous; a view (Rows, View) is the same storage at an element offset
// with a new shape. That is all DDP needs: a bucket is one flat buffer and each parameter's
// gradient is a view into it.
//
// Copying a Tensor copies the handle (both refer to the same data and metadata), as in
// PyTorch. Tensors are not internally synchronised: one thread owns a tensor at a time.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "autograd/base/error.h"
#include "autograd/device.h"
#include "autograd/dtype.h"

namespace ddpkit {

using Shape = std::vector<int64_t>;
int64_t NumElements(const Shape& shape);
std::string ShapeString(const Shape& shape);  // "[2, 3]"

class Node;
class AccumulateGrad;
}  // namespace ddpkit
struct CUstream_st;
namespace ddpkit {
class Tensor;
using TensorList = std::vector<Tensor>;

// One owned, zero-initialised buffer: 64-byte aligned host memory, or GPU memory allocated on
// the calling thread's current stream (and freed on that stream).
class Storage {
 public:
  // `zeroed` false leaves the bytes as they come (for an output a kernel writes in full).
  explicit Storage(size_t nbytes, Device device = Device::Cpu(), bool zeroed = true);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  std::byte* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  std::byte* data_;
  size_t nbytes_;
  Device device_;
  CUstream_st* stream_ = nullptr;  // the allocating stream (GPU storage only)
};

struct AutogradMeta;

// The shared state behind Tensor handles.
struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements
  Shape shape;
  DType dtype = DType::kFloat32;
  std::unique_ptr<AutogradMeta> autograd;  // null until requires_grad or grad is set

  AutogradMeta& meta();
};

class Tensor {
 public:
  Tensor() = default;  // undefined
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // --- Factories (no autograd history; requires_grad false) -----------------------------
  static Tensor Empty(const Shape& shape, DType dtype = DType::kFloat32,
                      Device device = Device::Cpu());  // zero-filled
  static Tensor Zeros(const Shape& shape, DType dtype = DType::kFloat32,
                      Device device = Device::Cpu());
  static Tensor Full(const Shape& shape, double value, DType dtype = DType::kFloat32,
                     Device device = Device::Cpu());
  // Like Empty without the zero fill: for an op's output that its kernel then writes in full
  // (a GEMM with beta 0). Reading it before that is a bug.
  static Tensor Uninitialized(const Shape& shape, DType dtype, Device device);
  static Tensor Scalar(double value, DType dtype = DType::kFloat32);  // shape []
  template <typename T>
  static Tensor FromVector(absl::Span<const T> values, const Shape& shape);
  template <typename T>
  static Tensor FromVector(std::initializer_list<T> values, const Shape& shape) {
    return FromVector<T>(absl::Span<const T>(values.begin(), values.size()), shape);
  }

  // --- Shape and data ---------------------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl_->shape; }
  int64_t dim() const { return static_cast<int64_t>(impl_->shape.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the back
  int64_t numel() const { return NumElements(impl_->shape); }
  DType dtype() const { return impl_->dtype; }
  size_t nbytes() const { return numel() * ElementSize(dtype()); }
  Device device() const { return impl_->storage->device(); }
  bool is_cuda() const { return device().is_cuda(); }
  int64_t storage_offset() const { return impl_->offset; }
  void* raw_data() const {
    return impl_->storage->data() + impl_->offset * ElementSize(impl_->dtype);
  }
  // The elements, for host code: a GPU tensor is refused (copy it with To(Device::Cpu())).
  template <typename T>
  T* data() const {
    DDPKIT_CHECK(!is_cuda(), "[Tensor::data] the tensor is on ", device().ToString(),
                 "; host code cannot read it (copy it with To(Device::Cpu()))");
    return device_data<T>();
  }
  // The elements on the tensor's own device (what a CUDA kernel is handed).
  template <typename T>
  T* device_data() const {
    DDPKIT_CHECK(kDTypeOf<T> == dtype(), "[Tensor::data] tensor holds ", DTypeName(dtype()),
                 ", accessed as ", DTypeName(kDTypeOf<T>));
    return static_cast<T*>(raw_data());
  }
  // Element i of the flattened tensor, converted to double (any dtype; a GPU tensor is copied
  // to the host first).
  double at(int64_t i) const;
  // The only element of a one-element tensor, as double.
  double item() const;
  // All elements converted to double, for tests and reports.
  std::vector<double> ToDoubles() const;
  std::string DebugString() const;  // "float32[2, 3]" + values when small

  // --- Views (share storage) and copies ---------------------------------------------------
  Tensor Rows(int64_t begin, int64_t end) const;  // rows [begin, end) along dim 0
  Tensor View(const Shape& shape) const;          // same elements, another shape
  Tensor Flatten() const { return View({numel()}); }
  bool SharesStorageWith(const Tensor& other) const;
  // True when both handles see exactly the same elements (same storage, offset, numel).
  bool IsAliasOf(const Tensor& other) const;
  Tensor Detach() const;           // shares storage, no autograd history, requires_grad false
  Tensor Clone() const;            // deep copy without history
  Tensor To(DType dtype) const;    // converted deep copy (Clone when already `dtype`)
  Tensor To(Device device) const;  // a copy on `device` (Clone when already there)
  // In place: this <- src (same numel; dtypes and devices may differ: values are converted,
  // bytes are copied between devices).
  void CopyFrom(const Tensor& src) const;
  void Fill(double value) const;
  void Zero() const { Fill(0.0); }

  // --- Autograd ---------------------------------------------------------------------------
  bool requires_grad() const;
  // Only for leaves (tensors without grad_fn); returns *this for chaining.
  Tensor& set_requires_grad(bool requires_grad);
  bool is_leaf() const;
  const Tensor& grad() const;        // undefined when no gradient was accumulated
  void set_grad(Tensor grad) const;  // undefined resets to "no gradient" (zero_grad to none)
  const std::shared_ptr<Node>& grad_fn() const;
  uint32_t output_nr() const;
  // The persistent node that accumulates this leaf's gradient; the same object for the
  // tensor's whole life, so hooks registered on it stay in place across iterations.
  std::shared_ptr<AccumulateGrad> grad_accumulator() const;
  // Makes this tensor output `output_nr` of `grad_fn` (used by ops when recording).
  void SetHistory(std::shared_ptr<Node> grad_fn, uint32_t output_nr) const;
  // Backward from this tensor; a scalar is seeded with 1 when `grad` is undefined. (Defined
  // in engine.cc, the layer above; grad_accumulator() in accumulate_grad.cc.)
  void Backward(const Tensor& grad = Tensor()) const;

  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;
  std::shared_ptr<Node> grad_fn;
  uint32_t output_nr = 0;
  std::shared_ptr<AccumulateGrad> grad_accumulator;  // leaves only; created on first use
};

// Calls f.template operator()<T>() with T = float or double for the tensor's dtype, and
// throws "[op] expects float32 or float64" for any other dtype.
template <typename F>
decltype(auto) DispatchFloating(DType dtype, std::string_view op, F&& f) {
  switch (dtype) {
    case DType::kFloat32: return f.template operator()<float>();
    case DType::kFloat64: return f.template operator()<double>();
    default: throw Error(StrCat("[", op, "] expects float32 or float64, got ", DTypeName(dtype)));
  }
}

}  // namespace ddpkit
