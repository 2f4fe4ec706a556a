// What the nccl backend's files share: dtype and reduction mapping, NCCL's errors as
// absl::Status, and waiting out a nonblocking communicator's background work with a deadline.
// CUDA builds only (includes <nccl.h>).
#pragma once

#include <nccl.h>

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "autograd/dtype.h"
#include "comm/types.h"

namespace ddpkit::comm::nccl {

// Every dtype a ProcessGroup carries has an NCCL type; float16 and bfloat16 stay themselves
// (NCCL reduces in the dtype: see process_group_nccl.h).
ncclDataType_t ToNcclType(DType dtype);
ncclRedOp_t ToNcclOp(ReduceOp op);  // AVG is ncclAvg: NCCL divides in the reduction itself

// "<what>: <NCCL's error string> (<NCCL's last error>)"; `comm` may be null (no last error).
std::string NcclErrorText(std::string_view what, ncclResult_t result, ncclComm_t comm);

// A communicator made with blocking = 0 answers a call with ncclInProgress while the call goes
// on in the background; the communicator may not be used again until its state leaves
// ncclInProgress. This polls that state until then (OK on ncclSuccess), or until `deadline`
// (DeadlineExceeded; the caller aborts the communicator). `result` is what the call returned:
// an error there is returned at once. `what` starts every message ("rank 1: ncclAllReduce").
absl::Status AwaitNonblocking(ncclComm_t comm, ncclResult_t result, absl::Time deadline,
                              std::string_view what);

}  // namespace ddpkit::comm::nccl
