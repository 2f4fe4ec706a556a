// A rank of a multi-process Gloo job, run by `ddpkit launch` from gloo_launch_test.cc.
//
//   gloo_worker check            every collective x dtype x size against local references
//   gloo_worker sample_sort      the sample sort's property checks (collective_checks.h), every
//                                case, then ExchangeRows and a width mismatch
//   gloo_worker die              rank 1 exits (code 5) after the first allreduce; the others try
//                                a second one and must fail with a clear error, not hang
//   gloo_worker mismatch         rank 0 allreduces 4 elements, the others 5 (run at DETAIL)
//   gloo_worker stop             rank 2 stops itself (SIGSTOP) after the first allreduce; the
//                                others time out in the second, dump their flight recorders and
//                                exit with code 4
//
// Exit status 0 when the mode's expectation held; the reason is printed otherwise.
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>

#include "comm/world/rendezvous.h"
#include "tests/comm/collective_checks.h"

using namespace ddpkit;
using namespace ddpkit::comm;

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "check";
  absl::StatusOr<EnvRendezvous> env = ReadEnvRendezvous();
  if (!env.ok()) {
    std::cerr << env.status().message() << "\n";
    return 2;
  }
  ProcessGroupOptions options;
  options.timeout = absl::Seconds(mode == "check" || mode == "sample_sort" ? 60 : 5);
  absl::StatusOr<std::unique_ptr<DistributedWorld>> world =
      DistributedWorld::InitGloo(*env, options);
  if (!world.ok()) {
    std::cerr << world.status().message() << "\n";
    return 1;
  }
  ProcessGroup& group = (*world)->group();

  if (mode == "check") {
    for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                        DType::kInt32, DType::kInt64}) {
      for (int64_t count : {0, 1, 7, 4099}) {
        absl::Status status = testing_util::CheckAllCollectives(group, dtype, count);
        if (!status.ok()) {
          std::cerr << "FAILED: " << status.message() << "\n";
          return 1;
        }
      }
    }
    std::cout << "all collectives match on rank " << group.rank() << "\n";
    return 0;
  }
  if (mode == "sample_sort") {
    absl::Status status;
    for (const testing_util::SampleSortCase& c : testing_util::SampleSortCases(group.size())) {
      if (status.ok()) status = testing_util::CheckSampleSort(group, c).status();
    }
    if (status.ok()) status = testing_util::CheckExchangeRows(group);
    if (status.ok() && group.size() > 1) {
      status = testing_util::CheckSampleSortRejectsMismatchedWidths(group);
    }
    if (!status.ok()) {
      std::cerr << "FAILED: " << status.message() << "\n";
      return 1;
    }
    std::cout << "sample sort properties hold on rank " << group.rank() << "\n";
    return 0;
  }
  if (mode == "die") {
    if (!group.Allreduce(Tensor::Full({8}, 1.0))->Wait().ok()) return 1;
    if (group.rank() == 1) std::_Exit(5);  // dies without saying goodbye (not 3: --check's)
    absl::Status status = group.Allreduce(Tensor::Full({8}, 1.0))->Wait();
    std::cout << "second allreduce: " << status << "\n";
    return status.ok() ? 1 : 0;  // failing (not hanging) is the expected outcome
  }
  if (mode == "wait_behind") {  // rank 1 alive but never there; rank 2 comes 2 s after rank 0
    if (!group.Allreduce(Tensor::Full({8}, 1.0))->Wait().ok()) return 1;
    if (group.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::seconds(8));
      return 0;
    }
    if (group.rank() == 2) std::this_thread::sleep_for(std::chrono::seconds(2));
    absl::Status status = group.Allreduce(Tensor::Full({8}, 1.0))->Wait();
    std::cout << "second allreduce: " << status << "\n";
    return status.ok() ? 1 : 0;
  }
  if (mode == "contract") {
    const absl::Status status = testing_util::CheckBackendContract(group, Device::Cpu());
    if (!status.ok()) {
      std::cerr << "FAILED: " << status.message() << "\n";
      return 1;
    }
    std::cout << "the backend contract holds on rank " << group.rank() << "\n";
    return 0;
  }
  if (mode == "stop") return testing_util::StoppedRankMode(group);
  if (mode == "mismatch") return testing_util::MismatchMode(group);
  std::cerr << "unknown mode " << mode << "\n";
  return 2;
}
