#include "autograd/tensor.h"

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_join.h"
#include "autograd/cuda/kernels.h"
#include "autograd/cuda/runtime.h"
#include "autograd/half_convert.h"
#include "autograd/host_allocator.h"
#include "autograd/memory_stats.h"
#include "autograd/parallel.h"

namespace ddpkit {
namespace {

// Element conversions through double (exact for every value of every dtype but int64 beyond
// 2^53, which never holds a class label or index that large).
double LoadAsDouble(const std::byte* base, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kFloat32: return reinterpret_cast<const float*>(base)[i];
    case DType::kFloat64: return reinterpret_cast<const double*>(base)[i];
    case DType::kFloat16: return ToFloat(reinterpret_cast<const Float16*>(base)[i]);
    case DType::kBFloat16: return ToFloat(reinterpret_cast<const BFloat16*>(base)[i]);
    case DType::kInt32: return reinterpret_cast<const int32_t*>(base)[i];
    case DType::kInt64: return static_cast<double>(reinterpret_cast<const int64_t*>(base)[i]);
  }
  return 0;
}

void StoreDouble(std::byte* base, DType dtype, int64_t i, double v) {
  switch (dtype) {
    case DType::kFloat32: reinterpret_cast<float*>(base)[i] = static_cast<float>(v); return;
    case DType::kFloat64: reinterpret_cast<double*>(base)[i] = v; return;
    case DType::kFloat16:
      reinterpret_cast<Float16*>(base)[i] = ToFloat16(static_cast<float>(v));
      return;
    case DType::kBFloat16:
      reinterpret_cast<BFloat16*>(base)[i] = ToBFloat16(static_cast<float>(v));
      return;
    case DType::kInt32: reinterpret_cast<int32_t*>(base)[i] = static_cast<int32_t>(v); return;
    case DType::kInt64: reinterpret_cast<int64_t*>(base)[i] = static_cast<int64_t>(v); return;
  }
}

// float32 to or from float16 / bfloat16 in bulk (half_convert.h), in pieces across the compute
// threads; false for any other pair of dtypes.
bool ConvertHalfPrecision(const std::byte* in, DType from, std::byte* out, DType to, int64_t n) {
  using Convert = void (*)(const std::byte*, std::byte*, int64_t, int64_t);
  Convert convert = nullptr;
  if (from == DType::kFloat32 && to == DType::kFloat16) {
    convert = [](const std::byte* i, std::byte* o, int64_t b, int64_t e) {
      FloatToHalf(reinterpret_cast<const float*>(i) + b, reinterpret_cast<Float16*>(o) + b, e - b);
    };
  } else if (from == DType::kFloat16 && to == DType::kFloat32) {
    convert = [](const std::byte* i, std::byte* o, int64_t b, int64_t e) {
      HalfToFloat(reinterpret_cast<const Float16*>(i) + b, reinterpret_cast<float*>(o) + b, e - b);
    };
  } else if (from == DType::kFloat32 && to == DType::kBFloat16) {
    convert = [](const std::byte* i, std::byte* o, int64_t b, int64_t e) {
      FloatToBHalf(reinterpret_cast<const float*>(i) + b, reinterpret_cast<BFloat16*>(o) + b,
                   e - b);
    };
  } else if (from == DType::kBFloat16 && to == DType::kFloat32) {
    convert = [](const std::byte* i, std::byte* o, int64_t b, int64_t e) {
      BHalfToFloat(reinterpret_cast<const BFloat16*>(i) + b, reinterpret_cast<float*>(o) + b,
                   e - b);
    };
  }
  if (convert == nullptr) return false;
  ParallelFor(n, [&](int64_t begin, int64_t end) { convert(in, out, begin, end); });
  return true;
}

std::shared_ptr<TensorImpl> NewImpl(const Shape& shape, DType dtype, Device device,
                                    bool zeroed = true) {
  for (int64_t extent : shape) {
    DDPKIT_CHECK(extent >= 0, "[Tensor] negative extent in shape ", ShapeString(shape));
  }
  auto impl = std::make_shared<TensorImpl>();
  impl->storage =
      std::make_shared<Storage>(NumElements(shape) * ElementSize(dtype), device, zeroed);
  impl->shape = shape;
  impl->dtype = dtype;
  return impl;
}

const Tensor& UndefinedTensor() {
  static const Tensor* const kUndefined = new Tensor();
  return *kUndefined;
}

}  // namespace

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t extent : shape) n *= extent;
  return n;
}

std::string ShapeString(const Shape& shape) { return StrCat("[", absl::StrJoin(shape, ", "), "]"); }

Storage::Storage(size_t nbytes, Device device, bool zeroed) : nbytes_(nbytes), device_(device) {
  if (device.is_cuda()) {
    if (absl::Status usable = cuda::CheckUsable(device); !usable.ok()) ThrowStatus(usable);
    stream_ = cuda::CurrentStream(device);
    data_ = static_cast<std::byte*>(cuda::Allocate(nbytes, device, stream_));
    if (zeroed) cuda::MemsetZero(data_, nbytes, device);
    return;  // the memory counters are the host's (memory_stats.h)
  }
  data_ = static_cast<std::byte*>(HostAllocate(nbytes));
  if (zeroed) std::memset(data_, 0, nbytes);
  NoteStorageAllocated(static_cast<int64_t>(nbytes));
}

Storage::~Storage() {
  if (device_.is_cuda()) {
    cuda::Free(data_, device_, stream_);
    return;
  }
  NoteStorageFreed(static_cast<int64_t>(nbytes_));
  HostFree(data_, nbytes_);
}

AutogradMeta& TensorImpl::meta() {
  if (!autograd) autograd = std::make_unique<AutogradMeta>();
  return *autograd;
}

Tensor Tensor::Empty(const Shape& shape, DType dtype, Device device) {
  return Tensor(NewImpl(shape, dtype, device));
}
Tensor Tensor::Uninitialized(const Shape& shape, DType dtype, Device device) {
  return Tensor(NewImpl(shape, dtype, device, /*zeroed=*/false));
}

Tensor Tensor::Zeros(const Shape& shape, DType dtype, Device device) {
  return Empty(shape, dtype, device);
}

Tensor Tensor::Full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = Empty(shape, dtype, device);
  t.Fill(value);
  return t;
}

Tensor Tensor::Scalar(double value, DType dtype) { return Full({}, value, dtype); }

template <typename T>
Tensor Tensor::FromVector(absl::Span<const T> values, const Shape& shape) {
  Tensor t = Empty(shape, kDTypeOf<T>);
  DDPKIT_CHECK(static_cast<int64_t>(values.size()) == t.numel(), "[Tensor::FromVector] ",
               values.size(), " values do not fill shape ", ShapeString(shape));
  if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(T));
  return t;
}
template Tensor Tensor::FromVector<float>(absl::Span<const float>, const Shape&);
template Tensor Tensor::FromVector<double>(absl::Span<const double>, const Shape&);
template Tensor Tensor::FromVector<int32_t>(absl::Span<const int32_t>, const Shape&);
template Tensor Tensor::FromVector<int64_t>(absl::Span<const int64_t>, const Shape&);
template Tensor Tensor::FromVector<Float16>(absl::Span<const Float16>, const Shape&);
template Tensor Tensor::FromVector<BFloat16>(absl::Span<const BFloat16>, const Shape&);

int64_t Tensor::size(int64_t d) const {
  const int64_t n = dim();
  DDPKIT_CHECK(d >= -n && d < n, "[Tensor::size] dimension ", d, " out of range for shape ",
               ShapeString(shape()));
  return shape()[d < 0 ? d + n : d];
}

double Tensor::at(int64_t i) const {
  DDPKIT_CHECK(i >= 0 && i < numel(), "[Tensor::at] index ", i, " out of range for ", numel(),
               " elements");
  if (is_cuda()) return Flatten().Rows(i, i + 1).To(Device::Cpu()).at(0);
  return LoadAsDouble(static_cast<const std::byte*>(raw_data()), dtype(), i);
}

double Tensor::item() const {
  DDPKIT_CHECK(numel() == 1, "[Tensor::item] needs one element, tensor has shape ",
               ShapeString(shape()));
  return at(0);
}

std::vector<double> Tensor::ToDoubles() const {
  if (is_cuda()) return To(Device::Cpu()).ToDoubles();
  std::vector<double> out(numel());
  const auto* base = static_cast<const std::byte*>(raw_data());
  for (int64_t i = 0; i < numel(); ++i) out[i] = LoadAsDouble(base, dtype(), i);
  return out;
}

std::string Tensor::DebugString() const {
  if (!defined()) return "undefined";
  std::string s = StrCat(DTypeName(dtype()), ShapeString(shape()));
  if (numel() <= 16) absl::StrAppend(&s, " {", absl::StrJoin(ToDoubles(), ", "), "}");
  return s;
}

Tensor Tensor::Rows(int64_t begin, int64_t end) const {
  DDPKIT_CHECK(dim() >= 1, "[Tensor::Rows] needs at least one dimension, got a scalar");
  DDPKIT_CHECK(0 <= begin && begin <= end && end <= shape()[0], "[Tensor::Rows] rows [", begin,
               ", ", end, ") out of range for shape ", ShapeString(shape()));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->dtype = impl_->dtype;
  impl->shape = shape();
  impl->shape[0] = end - begin;
  impl->offset = impl_->offset + begin * (shape()[0] == 0 ? 0 : numel() / shape()[0]);
  return Tensor(std::move(impl));
}

Tensor Tensor::View(const Shape& new_shape) const {
  DDPKIT_CHECK(NumElements(new_shape) == numel(), "[Tensor::View] cannot view ",
               ShapeString(shape()), " as ", ShapeString(new_shape));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->dtype = impl_->dtype;
  impl->shape = new_shape;
  impl->offset = impl_->offset;
  return Tensor(std::move(impl));
}

bool Tensor::SharesStorageWith(const Tensor& other) const {
  return defined() && other.defined() && impl_->storage == other.impl_->storage;
}

bool Tensor::IsAliasOf(const Tensor& other) const {
  return SharesStorageWith(other) && impl_->offset == other.impl_->offset &&
         numel() == other.numel() && dtype() == other.dtype();
}

Tensor Tensor::Detach() const {
  Tensor view = View(shape());
  return view;
}

Tensor Tensor::Clone() const { return To(device()); }

Tensor Tensor::To(Device target) const {
  Tensor copy = Empty(shape(), dtype(), target);
  if (nbytes() == 0) return copy;
  if (is_cuda() || target.is_cuda()) {
    cuda::Copy(copy.raw_data(), target, raw_data(), device(), nbytes());
  } else {
    std::memcpy(copy.raw_data(), raw_data(), nbytes());
  }
  return copy;
}

Tensor Tensor::To(DType target) const {
  if (target == dtype()) return Clone();
  Tensor out = Empty(shape(), target, device());
  out.CopyFrom(*this);
  return out;
}

void Tensor::CopyFrom(const Tensor& src) const {
  DDPKIT_CHECK(src.numel() == numel(), "[Tensor::CopyFrom] source has ", src.numel(), " elements ",
               ShapeString(src.shape()), ", destination ", numel(), " ", ShapeString(shape()));
  if (src.dtype() == dtype() && (is_cuda() || src.is_cuda())) {
    cuda::Copy(raw_data(), device(), src.raw_data(), src.device(), nbytes());
    return;
  }
  if (src.dtype() == dtype()) {
    auto* out = static_cast<std::byte*>(raw_data());
    const auto* in = static_cast<const std::byte*>(src.raw_data());
    if (out + nbytes() <= in || in + nbytes() <= out) {  // apart: pieces may go at once
      ParallelFor(static_cast<int64_t>(nbytes()), [&](int64_t begin, int64_t end) {
        std::memcpy(out + begin, in + begin, end - begin);
      });
    } else if (nbytes() > 0) {
      std::memmove(out, in, nbytes());
    }
    return;
  }
  if (src.device() != device()) {  // convert where the destination is
    CopyFrom(src.To(device()));
    return;
  }
  if constexpr (kWithCuda) {
    if (is_cuda()) return cuda::ConvertCopy(*this, src);
  }
  const auto* in = static_cast<const std::byte*>(src.raw_data());
  auto* out = static_cast<std::byte*>(raw_data());
  if (ConvertHalfPrecision(in, src.dtype(), out, dtype(), numel())) return;
  for (int64_t i = 0; i < numel(); ++i)
    StoreDouble(out, dtype(), i, LoadAsDouble(in, src.dtype(), i));
}

void Tensor::Fill(double value) const {
  if constexpr (kWithCuda) {
    if (is_cuda()) return cuda::Fill(*this, value);
  }
  auto* out = static_cast<std::byte*>(raw_data());
  if (value == 0.0) {
    if (nbytes() > 0) std::memset(out, 0, nbytes());
    return;
  }
  for (int64_t i = 0; i < numel(); ++i) StoreDouble(out, dtype(), i, value);
}

bool Tensor::requires_grad() const {
  return defined() && impl_->autograd && impl_->autograd->requires_grad;
}

Tensor& Tensor::set_requires_grad(bool requires_grad) {
  DDPKIT_CHECK(is_leaf(),
               "[set_requires_grad] only a leaf tensor's requires_grad can be set; "
               "this tensor was produced by ",
               "an op (use Detach() first)");
  DDPKIT_CHECK(!requires_grad || IsFloatingPoint(dtype()),
               "[set_requires_grad] only floating-point tensors can require grad, got ",
               DTypeName(dtype()));
  impl_->meta().requires_grad = requires_grad;
  return *this;
}

bool Tensor::is_leaf() const { return !impl_->autograd || !impl_->autograd->grad_fn; }

const Tensor& Tensor::grad() const {
  return impl_->autograd ? impl_->autograd->grad : UndefinedTensor();
}

void Tensor::set_grad(Tensor grad) const {
  if (grad.defined()) {
    DDPKIT_CHECK(grad.dtype() == dtype() && grad.numel() == numel(), "[set_grad] gradient ",
                 DTypeName(grad.dtype()), ShapeString(grad.shape()), " does not match tensor ",
                 DTypeName(dtype()), ShapeString(shape()));
  }
  impl_->meta().grad = std::move(grad);
}

const std::shared_ptr<Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<Node>* const kNone = new std::shared_ptr<Node>();
  return impl_->autograd ? impl_->autograd->grad_fn : *kNone;
}

uint32_t Tensor::output_nr() const { return impl_->autograd ? impl_->autograd->output_nr : 0; }

void Tensor::SetHistory(std::shared_ptr<Node> grad_fn, uint32_t output_nr) const {
  AutogradMeta& meta = impl_->meta();
  meta.requires_grad = true;
  meta.grad_fn = std::move(grad_fn);
  meta.output_nr = output_nr;
}

}  // namespace ddpkit
