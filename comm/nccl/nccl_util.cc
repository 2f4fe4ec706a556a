#include "comm/nccl/nccl_util.h"

#include <thread>

#include "autograd/base/error.h"

namespace ddpkit::comm::nccl {

ncclDataType_t ToNcclType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return ncclFloat32;
    case DType::kFloat64: return ncclFloat64;
    case DType::kFloat16: return ncclFloat16;
    case DType::kBFloat16: return ncclBfloat16;
    case DType::kInt32: return ncclInt32;
    case DType::kInt64: return ncclInt64;
  }
  throw Error(StrCat("[nccl] unexpected dtype ", DTypeName(dtype)));
}

ncclRedOp_t ToNcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kMax: return ncclMax;
  }
  throw Error(StrCat("[nccl] unexpected reduce op ", static_cast<int>(op)));
}

std::string NcclErrorText(std::string_view what, ncclResult_t result, ncclComm_t comm) {
  std::string text = StrCat(what, ": ", ncclGetErrorString(result));
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') text = StrCat(text, " (", last, ")");
  return text;
}

absl::Status AwaitNonblocking(ncclComm_t comm, ncclResult_t result, absl::Time deadline,
                              std::string_view what) {
  // A short spin first: most calls finish in microseconds; then 1 ms naps, not a busy core.
  int polls = 0;
  while (result == ncclInProgress) {
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          StrCat(what,
                 ": still in progress at the deadline (a peer that never joined, or a "
                 "hung GPU)"));
    }
    if (++polls > 100) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (ncclResult_t s = ncclCommGetAsyncError(comm, &result); s != ncclSuccess) result = s;
  }
  if (result == ncclSuccess) return absl::OkStatus();
  return absl::UnavailableError(NcclErrorText(what, result, comm));
}

}  // namespace ddpkit::comm::nccl
