#include "comm/nccl/nccl_init.h"

#include <cuda_runtime.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "autograd/base/error.h"
#include "autograd/cuda/cuda_check.h"
#include "comm/nccl/nccl_util.h"

namespace ddpkit::comm::nccl {
namespace {

// One rank's side of the rendezvous: where its keys live and when it gives up.
struct Rendezvous {
  int rank;
  int size;
  Store& store;
  std::string prefix;  // "nccl/<n>/"
  absl::Duration timeout;
  absl::Time deadline;

  std::string GpuKey(int r) const { return StrCat(prefix, "gpu/", r); }
  std::string IdKey() const { return StrCat(prefix, "unique_id"); }
  // What is left of the deadline (never zero: a store wait of 0 would not even ask).
  absl::Duration Left() const { return std::max(deadline - absl::Now(), absl::Milliseconds(1)); }
};

// A GPU as the other ranks see it: "<uuid>|<pci bus id>|cuda:N". The UUID is what identifies
// it (bus ids repeat across hosts); the bus id and ordinal are for the message.
absl::StatusOr<std::string> DescribeGpu(Device device) {
  cudaDeviceProp prop;
  char bus_id[64] = {};
  cudaError_t s = cudaGetDeviceProperties(&prop, device.index);
  if (s == cudaSuccess) s = cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device.index);
  if (s != cudaSuccess) {
    cudaGetLastError();
    return absl::FailedPreconditionError(
        StrCat("cannot read ", device.ToString(), "'s identity: ", cudaGetErrorString(s)));
  }
  return StrCat(absl::BytesToHexString(absl::string_view(prop.uuid.bytes, sizeof(prop.uuid.bytes))),
                "|", bus_id, "|", device.ToString());
}

// The ranks whose GPU is not in the store yet (empty when the store cannot say).
std::vector<int> Missing(const Rendezvous& rv) {
  std::vector<int> missing;
  for (int r = 0; r < rv.size; ++r) {
    absl::StatusOr<bool> there = rv.store.Check({rv.GpuKey(r)}, absl::Seconds(1));
    if (!there.ok()) return {};
    if (!*there) missing.push_back(r);
  }
  return missing;
}

absl::Status NotArrived(const Rendezvous& rv, const absl::Status& status) {
  std::vector<int> missing = Missing(rv);
  if (missing.empty()) return status;
  return absl::DeadlineExceededError(StrCat("rank", missing.size() > 1 ? "s " : " ",
                                            absl::StrJoin(missing, ", "), " did not arrive within ",
                                            absl::FormatDuration(rv.timeout),
                                            " (dead, stuck, or not started)"));
}

absl::StatusOr<std::vector<std::string>> GatherGpus(const Rendezvous& rv, Device device) {
  DDPKIT_ASSIGN_OR_RETURN(std::string mine, DescribeGpu(device));
  DDPKIT_RETURN_IF_ERROR(rv.store.Set(rv.GpuKey(rv.rank), mine));
  std::vector<std::string> gpus;
  for (int r = 0; r < rv.size; ++r) {
    absl::StatusOr<std::string> gpu = rv.store.Get(rv.GpuKey(r), rv.Left());
    if (!gpu.ok()) return NotArrived(rv, gpu.status());
    gpus.push_back(*std::move(gpu));
  }
  return gpus;
}

// NCCL cannot put two ranks on one GPU; it fails (or hangs) far from the cause. Every rank
// sees the same list, so every rank fails alike, naming the first pair.
absl::Status CheckOneGpuPerRank(const std::vector<std::string>& gpus) {
  for (size_t a = 0; a < gpus.size(); ++a) {
    for (size_t b = a + 1; b < gpus.size(); ++b) {
      std::vector<std::string> ga = absl::StrSplit(gpus[a], '|');
      std::vector<std::string> gb = absl::StrSplit(gpus[b], '|');
      if (ga.size() != 3 || gb.size() != 3) {
        return absl::DataLossError(StrCat("malformed GPU record '", gpus[a], "' / '", gpus[b],
                                          "' in the store (another job on this store?)"));
      }
      if (ga[0] != gb[0]) continue;
      const std::string where =
          ga[2] == gb[2] ? ga[2] : StrCat("rank ", a, "'s ", ga[2], ", rank ", b, "'s ", gb[2]);
      return absl::FailedPreconditionError(
          StrCat("ranks ", a, " and ", b, " both use GPU ", ga[1], " (", where,
                 "): NCCL needs one GPU per rank; give each rank its own GPU (LOCAL_RANK / "
                 "CUDA_VISIBLE_DEVICES) or use --backend threads for several ranks on one GPU"));
    }
  }
  return absl::OkStatus();
}

// Rank 0 draws the id and publishes it; the others wait for it.
absl::StatusOr<ncclUniqueId> ShareUniqueId(const Rendezvous& rv) {
  ncclUniqueId id;
  if (rv.rank == 0) {
    if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
      return absl::UnavailableError(NcclErrorText("ncclGetUniqueId", r, nullptr));
    }
    DDPKIT_RETURN_IF_ERROR(rv.store.Set(rv.IdKey(), std::string(id.internal, sizeof(id))));
    return id;
  }
  absl::StatusOr<std::string> bytes = rv.store.Get(rv.IdKey(), rv.Left());
  if (!bytes.ok()) {
    return absl::Status(bytes.status().code(),
                        StrCat("rank 0 did not publish the NCCL id: ", bytes.status().message()));
  }
  if (bytes->size() != sizeof(id)) {
    return absl::DataLossError(
        StrCat("the NCCL id in the store has ", bytes->size(), " bytes, not ", sizeof(id)));
  }
  std::memcpy(id.internal, bytes->data(), sizeof(id));
  return id;
}

absl::StatusOr<ncclComm_t> CreateComm(const Rendezvous& rv, const ncclUniqueId& id, Device device) {
  cuda::DeviceScope scope(device);  // NCCL binds the communicator to the current GPU
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // so a peer that never joins cannot hang this thread
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRankConfig(&comm, rv.size, id, rv.rank, &config);
  absl::Status ready = AwaitNonblocking(comm, r, rv.deadline, "ncclCommInitRankConfig");
  if (!ready.ok()) {
    if (comm != nullptr) ncclCommAbort(comm);
    return ready;
  }
  return comm;
}

absl::StatusOr<Communicator> Init(int rank, int size, Store& store, Device device,
                                  absl::Duration timeout) {
  DDPKIT_RETURN_IF_ERROR(cuda::CheckUsable(device));
  const absl::Time deadline = absl::Now() + timeout;
  DDPKIT_ASSIGN_OR_RETURN(int64_t generation, store.Add(StrCat("nccl/groups/", rank), 1));
  const Rendezvous rv{.rank = rank,
                      .size = size,
                      .store = store,
                      .prefix = StrCat("nccl/", generation, "/"),
                      .timeout = timeout,
                      .deadline = deadline};
  DDPKIT_ASSIGN_OR_RETURN(std::vector<std::string> gpus, GatherGpus(rv, device));
  DDPKIT_RETURN_IF_ERROR(CheckOneGpuPerRank(gpus));
  DDPKIT_ASSIGN_OR_RETURN(ncclUniqueId id, ShareUniqueId(rv));
  DDPKIT_ASSIGN_OR_RETURN(ncclComm_t comm, CreateComm(rv, id, device));
  return Communicator{.comm = comm, .store_prefix = rv.prefix};
}

}  // namespace

absl::StatusOr<Communicator> InitCommunicator(int rank, int size, Store& store, Device device,
                                              absl::Duration timeout) {
  absl::StatusOr<Communicator> comm;
  try {
    comm = Init(rank, size, store, device, timeout);
  } catch (const Error& e) {  // a CUDA call that failed (cuda_check.h throws)
    comm = absl::UnavailableError(e.what());
  }
  if (comm.ok()) return comm;
  return absl::Status(comm.status().code(),
                      StrCat("nccl: rank ", rank, " of ", size, " (", device.ToString(),
                             ") could not set up its communicator: ", comm.status().message()));
}

}  // namespace ddpkit::comm::nccl
