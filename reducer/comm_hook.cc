#include "reducer/comm_hook.h"

#include "autograd/kernels.h"

namespace ddpkit::reducer {
namespace {

// Compressed copies of each bucket, reused from one iteration to the next so the hook does not
// allocate per step. A bucket's copy is only touched again after the reducer waited for it.
struct CompressionState {
  std::vector<Tensor> compressed;  // by bucket index

  Tensor& For(const GradBucket& bucket, DType dtype) {
    if (compressed.size() < bucket.bucket_count()) compressed.resize(bucket.bucket_count());
    Tensor& t = compressed[bucket.index()];
    if (!t.defined() || t.numel() != bucket.buffer().numel() || t.dtype() != dtype) {
      t = Tensor::Empty({bucket.buffer().numel()}, dtype, bucket.buffer().device());
    }
    return t;
  }
};

CommHook AllreduceHook(comm::ProcessGroup& group) {
  return [&group](GradBucket& bucket) {
    ScaleInPlace(bucket.buffer(), 1.0 / group.size());
    return comm::Future::FromWork(group.Allreduce(bucket.buffer()), bucket.buffer());
  };
}

CommHook CompressHook(comm::ProcessGroup& group, DType wire_dtype) {
  auto state = std::make_shared<CompressionState>();
  return [&group, state, wire_dtype](GradBucket& bucket) {
    const Tensor& buffer = bucket.buffer();
    ScaleInPlace(buffer, 1.0 / group.size());
    Tensor compressed = state->For(bucket, wire_dtype);
    compressed.CopyFrom(buffer);
    return comm::Future::FromWork(group.Allreduce(compressed), compressed)
        ->Then([buffer](const Tensor& reduced) {
          buffer.CopyFrom(reduced);  // decompress in place
          return buffer;
        });
  };
}

}  // namespace

absl::StatusOr<BuiltinCommHook> ParseBuiltinCommHook(std::string_view name) {
  if (name == "allreduce") return BuiltinCommHook::kAllreduce;
  if (name == "fp16") return BuiltinCommHook::kFp16Compress;
  if (name == "bf16") return BuiltinCommHook::kBf16Compress;
  return absl::InvalidArgumentError(
      StrCat("unknown comm hook '", name, "'; choose allreduce, fp16 or bf16"));
}

std::string_view BuiltinCommHookName(BuiltinCommHook hook) {
  switch (hook) {
    case BuiltinCommHook::kAllreduce: return "allreduce";
    case BuiltinCommHook::kFp16Compress: return "fp16";
    case BuiltinCommHook::kBf16Compress: return "bf16";
  }
  return "?";
}

CommHook MakeBuiltinCommHook(BuiltinCommHook hook, comm::ProcessGroup& group) {
  switch (hook) {
    case BuiltinCommHook::kAllreduce: return AllreduceHook(group);
    case BuiltinCommHook::kFp16Compress: return CompressHook(group, DType::kFloat16);
    case BuiltinCommHook::kBf16Compress: return CompressHook(group, DType::kBFloat16);
  }
  return AllreduceHook(group);
}

}  // namespace ddpkit::reducer
