// A rank of an MPI job, run by `mpirun` from mpi_launch_test.cc.
//
//   mpi_worker check        every collective x dtype x size against local references, on one
//                           group and on a round-robin composite of two
//   mpi_worker sample_sort  the sample sort's property checks (collective_checks.h)
//   mpi_worker stop         rank 2 stops itself (SIGSTOP) after the first allreduce; the others
//                           time out in the second, name it, and exit with code 4
//   mpi_worker mismatch     rank 0 allreduces 4 elements, the others 5 (run at DETAIL)
//   mpi_worker algorithm    prints which allreduce algorithm 1 KiB and 4 MiB calls get
//
// Exit status 0 when the mode's expectation held; the reason is printed otherwise.
#include <mpi.h>

#include <iostream>
#include <string>

#include "comm/mpi/allreduce_algorithm.h"
#include "comm/world/rendezvous.h"
#include "tests/comm/collective_checks.h"

using namespace ddpkit;
using namespace ddpkit::comm;

namespace {

absl::Status CheckEverything(ProcessGroup& group) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                      DType::kInt32, DType::kInt64}) {
    for (int64_t count : {0, 1, 7, 4099}) {
      DDPKIT_RETURN_IF_ERROR(testing_util::CheckAllCollectives(group, dtype, count));
    }
  }
  return testing_util::CheckAllCollectives(group, DType::kFloat32, 1000003);
}

int Report(const absl::Status& status, const std::string& what, int rank) {
  if (!status.ok()) {
    std::cerr << "FAILED: " << status.message() << "\n";
    return 1;
  }
  std::cout << what << " on rank " << rank << "\n";
  return 0;
}

// The libnbc variable as MPI's tool interface reads it now (-1: not readable).
int LibnbcAlgorithmNow() {
  int provided = 0, index = 0, count = 0, value = -1;
  MPI_T_cvar_handle handle;
  if (MPI_T_init_thread(MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) return -1;
  if (MPI_T_cvar_get_index("coll_libnbc_iallreduce_algorithm", &index) == MPI_SUCCESS &&
      MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) == MPI_SUCCESS) {
    MPI_T_cvar_read(handle, &value);
    MPI_T_cvar_handle_free(&handle);
  }
  MPI_T_finalize();
  return value;
}

// An allreduce of `count` floats, then the variable as it was left.
absl::StatusOr<int> AlgorithmAfter(ProcessGroup& group, int64_t count) {
  DDPKIT_RETURN_IF_ERROR(group.Allreduce(Tensor::Full({count}, 1.0))->Wait());
  return LibnbcAlgorithmNow();
}

const char* AlgorithmName(mpi::AllreduceAlgorithm a) {
  switch (a) {
    case mpi::AllreduceAlgorithm::kLibraryDefault: return "libnbc's own";
    case mpi::AllreduceAlgorithm::kRing: return "ring";
    case mpi::AllreduceAlgorithm::kUsers: return "the user's";
    case mpi::AllreduceAlgorithm::kUnchanged: return "unchanged";
  }
  return "?";
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "check";
  ProcessGroupOptions options;
  options.timeout = absl::Seconds(mode == "check" || mode == "sample_sort" ? 60 : 5);
  const int groups = mode == "check_round_robin" ? 2 : 1;
  absl::StatusOr<std::unique_ptr<DistributedWorld>> world =
      DistributedWorld::InitMpi(options, groups);
  if (!world.ok()) {
    std::cerr << world.status().message() << "\n";
    return 1;
  }
  ProcessGroup& group = (*world)->group();
  if (mode == "check" || mode == "check_round_robin") {
    return Report(CheckEverything(group), "all collectives match", group.rank());
  }
  if (mode == "sample_sort") {
    absl::Status status;
    for (const testing_util::SampleSortCase& c : testing_util::SampleSortCases(group.size())) {
      if (status.ok()) status = testing_util::CheckSampleSort(group, c).status();
    }
    if (status.ok()) status = testing_util::CheckExchangeRows(group);
    return Report(status, "sample sort properties hold", group.rank());
  }
  if (mode == "contract") {
    return Report(testing_util::CheckBackendContract(group, Device::Cpu()),
                  "the backend contract holds", group.rank());
  }
  if (mode == "algorithm") {
    std::cout << "allreduce algorithm: " << mpi::DescribeAllreduceAlgorithms()
              << "; 1 KiB: " << AlgorithmName(mpi::AllreduceAlgorithmFor(1024))
              << ", 4 MiB: " << AlgorithmName(mpi::AllreduceAlgorithmFor(4 << 20)) << "\n";
    for (int64_t count : {int64_t{1} << 20, int64_t{256}, int64_t{128} << 10}) {
      absl::StatusOr<int> value = AlgorithmAfter(group, count);
      if (!value.ok()) return Report(value.status(), "", group.rank());
      std::cout << "after " << count * 4 << " bytes: " << *value << "\n";
    }
    return Report(CheckEverything(group), "all collectives match", group.rank());
  }
  if (mode == "stop") return testing_util::StoppedRankMode(group);
  if (mode == "mismatch") return testing_util::MismatchMode(group);
  std::cerr << "unknown mode " << mode << "\n";
  return 2;
}
