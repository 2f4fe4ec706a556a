// The nccl backend (label gpu; CUDA builds only): every collective and dtype on a world of one
// GPU, host tensors, two ranks on one GPU, and a rank that never comes. Tests that
// need a GPU skip with one line on a machine without one; a machine lends one GPU, so a world
// of several ranks is only ever set up, never run.
#include <thread>

#include "absl/strings/match.h"
#include "autograd/cuda/runtime.h"
#include "comm/nccl/process_group_nccl.h"
#include "comm/store/tcp_store.h"
#include "comm/world/world.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/autograd/cuda_test_util.h"
#include "tests/comm/collective_checks.h"

namespace ddpkit::comm {
namespace {

using ::testing::HasSubstr;

const Device kGpu = Device::Cuda(0);

class NcclTest : public testing::Test {
 protected:
  void SetUp() override {
    auto server = TcpStoreServer::Start("127.0.0.1", 0);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  // One client connection per rank, as separate processes would have.
  std::shared_ptr<Store> Client() {
    auto store = TcpStore::Connect("127.0.0.1", server_->port(), absl::Seconds(5));
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::shared_ptr<Store>(*std::move(store)) : nullptr;
  }

  std::unique_ptr<ProcessGroup> WorldOfOne() {
    auto group = CreateNcclProcessGroup(0, 1, Client(), kGpu, {.timeout = absl::Seconds(30)});
    EXPECT_TRUE(group.ok()) << group.status();
    return group.ok() ? *std::move(group) : nullptr;
  }

  std::unique_ptr<TcpStoreServer> server_;
};

Tensor OnGpu(std::vector<float> values, DType dtype = DType::kFloat32) {
  const int64_t n = static_cast<int64_t>(values.size());
  return Tensor::FromVector<float>(values, {n}).To(dtype).To(kGpu);
}

std::vector<double> Values(const Tensor& t) { return t.ToDoubles(); }

// --- Setup -----------------------------------------------------------------------------------

TEST_F(NcclTest, ACpuDeviceIsRefusedBeforeAnythingStarts) {
  auto group = CreateNcclProcessGroup(0, 1, Client(), Device::Cpu(), {});
  ASSERT_FALSE(group.ok());
  EXPECT_EQ(group.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(group.status().message()), HasSubstr("use --backend gloo"));
}

TEST_F(NcclTest, AGpuThatIsNotThereIsNamed) {
  const Device missing = Device::Cuda(cuda::DeviceCount());  // one past the last
  const absl::Time start = absl::Now();
  auto group = CreateNcclProcessGroup(0, 1, Client(), missing, {.timeout = absl::Seconds(5)});
  ASSERT_FALSE(group.ok());
  EXPECT_EQ(group.status().code(), absl::StatusCode::kFailedPrecondition) << group.status();
  EXPECT_THAT(std::string(group.status().message()),
              HasSubstr(StrCat("rank 0 of 1 (", missing.ToString(), ")")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST_F(NcclTest, TheWorldFlagsTakeNccl) {
  WorldSpec spec;
  spec.backend = Backend::kNccl;
  EXPECT_TRUE(ValidateWorldSpec(spec).ok());
  absl::Status bad = ParseBackend("ucc").status();
  EXPECT_THAT(std::string(bad.message()), HasSubstr("threads, gloo, mpi or nccl"));
}

// Two ranks on one GPU: both learn why, from ddpkit, before NCCL is asked (which would fail
// with "Duplicate GPU detected", or hang).
TEST_F(NcclTest, TwoRanksOnOneGpuFailClearlyOnBoth) {
  DDPKIT_REQUIRE_GPU();
  absl::Status status[2];
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r, store = Client()] {
      status[r] =
          CreateNcclProcessGroup(r, 2, store, kGpu, {.timeout = absl::Seconds(20)}).status();
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(status[r].code(), absl::StatusCode::kFailedPrecondition) << status[r];
    EXPECT_THAT(std::string(status[r].message()), HasSubstr("ranks 0 and 1 both use GPU "));
    EXPECT_THAT(std::string(status[r].message()), HasSubstr("(cuda:0): NCCL needs one GPU per"));
    EXPECT_THAT(std::string(status[r].message()), HasSubstr("--backend threads"));
  }
}

TEST_F(NcclTest, ARankThatNeverComesFailsWithinTheTimeout) {
  DDPKIT_REQUIRE_GPU();
  const absl::Duration timeout = absl::Seconds(2);
  const absl::Time start = absl::Now();
  auto group = CreateNcclProcessGroup(0, 2, Client(), kGpu, {.timeout = timeout});
  const absl::Duration took = absl::Now() - start;
  ASSERT_FALSE(group.ok());
  EXPECT_EQ(group.status().code(), absl::StatusCode::kDeadlineExceeded) << group.status();
  EXPECT_THAT(std::string(group.status().message()), HasSubstr("rank 1 did not arrive within 2s"));
  EXPECT_LT(took, timeout + absl::Seconds(3));
}

// The keys of each group live apart: a second group on the same store makes a new
// communicator instead of reading the first one's id.
TEST_F(NcclTest, GroupsOneAfterAnotherOnOneStore) {
  DDPKIT_REQUIRE_GPU();
  for (int i = 0; i < 2; ++i) {
    std::unique_ptr<ProcessGroup> group = WorldOfOne();
    ASSERT_NE(group, nullptr);
    EXPECT_EQ(group->backend_name(), "nccl");
    Tensor t = OnGpu({1, 2});
    ASSERT_TRUE(group->Allreduce(t)->Wait().ok());
  }
}

// The one contract of comm/process_group.h, as threads, gloo and mpi face it.
TEST_F(NcclTest, TheBackendContractHolds) {
  DDPKIT_REQUIRE_GPU();
  std::unique_ptr<ProcessGroup> group = WorldOfOne();
  ASSERT_NE(group, nullptr);
  const absl::Status status = testing_util::CheckBackendContract(*group, kGpu);
  EXPECT_TRUE(status.ok()) << status;
}

// --- Collectives on a world of one ---------------------------------------------------------

TEST_F(NcclTest, AllreduceWithEveryOp) {
  DDPKIT_REQUIRE_GPU();
  std::unique_ptr<ProcessGroup> group = WorldOfOne();
  ASSERT_NE(group, nullptr);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax}) {
    Tensor t = OnGpu({1.5, -2, 3});
    absl::Status s = group->Allreduce(t, op)->Wait();
    ASSERT_TRUE(s.ok()) << ReduceOpName(op) << ": " << s;
    EXPECT_EQ(Values(t), (std::vector<double>{1.5, -2, 3})) << ReduceOpName(op);
  }
}

TEST_F(NcclTest, EveryDtypeAllreduces) {
  DDPKIT_REQUIRE_GPU();
  std::unique_ptr<ProcessGroup> group = WorldOfOne();
  ASSERT_NE(group, nullptr);
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                      DType::kInt32, DType::kInt64}) {
    Tensor t = OnGpu({1, 2, 3, 4}, dtype);
    absl::Status s = group->Allreduce(t, ReduceOp::kMax)->Wait();
    ASSERT_TRUE(s.ok()) << DTypeName(dtype) << ": " << s;
    EXPECT_EQ(t.dtype(), dtype);
    EXPECT_EQ(Values(t), (std::vector<double>{1, 2, 3, 4})) << DTypeName(dtype);
  }
}

TEST_F(NcclTest, BroadcastAndAllgather) {
  DDPKIT_REQUIRE_GPU();
  std::unique_ptr<ProcessGroup> group = WorldOfOne();
  ASSERT_NE(group, nullptr);
  Tensor t = OnGpu({4, 5});
  ASSERT_TRUE(group->Broadcast(t, 0)->Wait().ok());
  EXPECT_EQ(Values(t), (std::vector<double>{4, 5}));
  Tensor out = Tensor::Zeros({2}, DType::kFloat32, kGpu);
  ASSERT_TRUE(group->Allgather(OnGpu({6, 7}), out)->Wait().ok());
  EXPECT_EQ(Values(out), (std::vector<double>{6, 7}));
}

TEST_F(NcclTest, UnevenCollectivesWithCounts) {
  DDPKIT_REQUIRE_GPU();
  std::unique_ptr<ProcessGroup> group = WorldOfOne();
  ASSERT_NE(group, nullptr);
  Tensor gathered = Tensor::Zeros({3}, DType::kFloat32, kGpu);
  ASSERT_TRUE(group->AllgatherV(OnGpu({1, 2, 3}), gathered, {3})->Wait().ok());
  EXPECT_EQ(Values(gathered), (std::vector<double>{1, 2, 3}));

  Tensor scattered = Tensor::Zeros({3}, DType::kFloat32, kGpu);
  ASSERT_TRUE(group->ReduceScatter(OnGpu({4, 5, 6}), scattered, {3}, ReduceOp::kAvg)->Wait().ok());
  EXPECT_EQ(Values(scattered), (std::vector<double>{4, 5, 6}));

  Tensor exchanged = Tensor::Zeros({2}, DType::kFloat32, kGpu);
  ASSERT_TRUE(group->AllToAllV(OnGpu({8, 9}), exchanged, {2}, {2})->Wait().ok());
  EXPECT_EQ(Values(exchanged), (std::vector<double>{8, 9}));
}

TEST_F(NcclTest, EmptyTensorsAndBarrier) {
  DDPKIT_REQUIRE_GPU();
  std::unique_ptr<ProcessGroup> group = WorldOfOne();
  ASSERT_NE(group, nullptr);
  EXPECT_TRUE(group->Allreduce(Tensor::Zeros({0}, DType::kFloat32, kGpu))->Wait().ok());
  EXPECT_TRUE(group
                  ->AllgatherV(Tensor::Zeros({0}, DType::kFloat32, kGpu),
                               Tensor::Zeros({0}, DType::kFloat32, kGpu), {0})
                  ->Wait()
                  .ok());
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(group->Barrier()->Wait().ok());
  EXPECT_TRUE(group->health().ok());
}

// Collectives queue behind each other and behind the caller's own kernels: a chain of them,
// issued without waiting, ends with every step applied in order.
TEST_F(NcclTest, QueuedCollectivesRunInOrder) {
  DDPKIT_REQUIRE_GPU();
  std::unique_ptr<ProcessGroup> group = WorldOfOne();
  ASSERT_NE(group, nullptr);
  Tensor t = OnGpu(std::vector<float>(1 << 16, 1.0f));
  std::vector<std::shared_ptr<Work>> works;
  for (int i = 0; i < 20; ++i) works.push_back(group->Allreduce(t));
  for (auto& w : works) ASSERT_TRUE(w->Wait().ok());
  EXPECT_EQ(t.at(0), 1.0);
  EXPECT_EQ(t.at((1 << 16) - 1), 1.0);
}

// Host tensors (DDP's counts and flags) travel through the group's GPU and back.
TEST_F(NcclTest, HostTensorsTravelThroughTheGpu) {
  DDPKIT_REQUIRE_GPU();
  std::unique_ptr<ProcessGroup> group = WorldOfOne();
  ASSERT_NE(group, nullptr);
  Tensor counts = Tensor::FromVector<int64_t>({3, 4}, {2});
  ASSERT_TRUE(group->Allreduce(counts, ReduceOp::kMax)->Wait().ok());
  EXPECT_FALSE(counts.is_cuda());
  EXPECT_EQ(Values(counts), (std::vector<double>{3, 4}));
  Tensor gathered = Tensor::Zeros({2});
  ASSERT_TRUE(group->Allgather(Tensor::FromVector<float>({5, 6}, {2}), gathered)->Wait().ok());
  EXPECT_EQ(Values(gathered), (std::vector<double>{5, 6}));
}

TEST_F(NcclTest, InputAndOutputOnTwoDevicesAreRefused) {
  DDPKIT_REQUIRE_GPU();
  std::unique_ptr<ProcessGroup> group = WorldOfOne();
  ASSERT_NE(group, nullptr);
  try {
    group->Allgather(OnGpu({1, 2}), Tensor::Zeros({2}));
    FAIL() << "a GPU input with a host output was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("put both on one device")) << e.what();
  }
  EXPECT_TRUE(group->health().ok());  // refused at the call; the group stays usable
}

}  // namespace
}  // namespace ddpkit::comm
