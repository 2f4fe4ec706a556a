// Built by tests/install/install_test.sh with only `pkg-config --cflags --libs ddpkit`: a
// two-rank threads world sums its ranks' values, as a Makefile user's first program would.
#include <iostream>

#include "comm/world/world.h"

int main() {
  const absl::Status status = ddpkit::comm::RunOnWorld(
      {.backend = ddpkit::comm::Backend::kThreads, .world_size = 2},
      [](ddpkit::comm::ProcessGroup& group) -> absl::Status {
        ddpkit::Tensor value = ddpkit::Tensor::Full({1}, group.rank() + 1.0);
        if (absl::Status s = group.Allreduce(value)->Wait(); !s.ok()) return s;
        if (value.ToDoubles()[0] != 3.0) return absl::InternalError("1 + 2 did not make 3");
        return absl::OkStatus();
      });
  std::cout << "pkg-config build: " << status << "\n";
  return status.ok() ? 0 : 1;
}
