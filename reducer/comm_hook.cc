#include "reducer/comm_hook.h"

#include "autograd/kernels.h"
#include "comm/widen.h"

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

// t /= the world size in t's own precision (half precision through float32, as PyTorch's CPU
// div_): PyTorch's hooks divide, which differs from a multiply by 1/W unless W is a power of 2.
void DivideByWorld(const Tensor& t, int world) {
  comm::DivideInPlaceOn(t.device(), t.raw_data(), t.numel(), t.dtype(), world);
}

// PyTorch's allreduce_hook: divide first (against overflow), then sum.
CommHook AllreduceHook(comm::ProcessGroup& group) {
  return [&group](GradBucket& bucket) {
    DivideByWorld(bucket.buffer(), group.size());
    return comm::Future::FromWork(group.Allreduce(bucket.buffer()), bucket.buffer());
  };
}

// PyTorch's fp16/bf16_compress_hook: cast, divide in the wire dtype, sum, cast back.
CommHook CompressHook(comm::ProcessGroup& group, DType wire_dtype) {
  auto state = std::make_shared<CompressionState>();
  return [&group, state, wire_dtype](GradBucket& bucket) {
    const Tensor& buffer = bucket.buffer();
    Tensor compressed = state->For(bucket, wire_dtype);
    compressed.CopyFrom(buffer);
    DivideByWorld(compressed, group.size());
    return comm::Future::FromWork(group.Allreduce(compressed), compressed)
        ->Then([buffer](const Tensor& reduced) {
          buffer.CopyFrom(reduced);  // decompress in place
          return buffer;
        });
  };
}

}  // namespace

// PyTorch 2.1's _reducer_allreduce_and_upcast_hook: cast to the reduce dtype, sum, and only then
// divide, in that dtype — unlike the compress hooks, which divide first, so a float16 sum can
// overflow here where theirs does not.
CommHook MixedPrecisionHook(comm::ProcessGroup& group, DType reduce_dtype) {
  auto state = std::make_shared<CompressionState>();
  return [&group, state, reduce_dtype](GradBucket& bucket) {
    const Tensor& buffer = bucket.buffer();
    Tensor wire = buffer;
    if (reduce_dtype != buffer.dtype()) {
      wire = state->For(bucket, reduce_dtype);
      wire.CopyFrom(buffer);
    }
    return comm::Future::FromWork(group.Allreduce(wire), wire)
        ->Then([buffer, &group](const Tensor& reduced) {
          DivideByWorld(reduced, group.size());
          if (!reduced.IsAliasOf(buffer)) buffer.CopyFrom(reduced);  // the upcast
          return buffer;
        });
  };
}

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
