// DDP on N ranks equals one process on the concatenated batch: for world sizes 1-4 and every
// combination of the reducer's options, the averaged gradients after each step (and so the
// weights) match a single-process model trained on all ranks' rows.
//
// The same file builds cuda_reducer_test (DDPKIT_EQUIVALENCE_ON_CUDA): every rank of the threads
// world then trains on cuda:0, each on its own stream, against the same host reference.
#include <mutex>

#include "autograd/cuda/runtime.h"
#include "autograd/nn/optim.h"
#include "autograd/random.h"
#include "gmock/gmock.h"
#include "tests/autograd/cuda_test_util.h"
#include "tests/reducer/ddp_test_util.h"

namespace ddpkit::reducer::testing::ddp_equivalence_test {
namespace {

#ifdef DDPKIT_EQUIVALENCE_ON_CUDA
const Device kDevice = Device::Cuda(0);
#define DDPKIT_EQUIVALENCE_SUITE OnCudaAllOptions
#else
const Device kDevice = Device::Cpu();
#define DDPKIT_EQUIVALENCE_SUITE AllOptions
#endif

const std::vector<int64_t> kWidths = {6, 16, 16, 4};
constexpr int kRowsPerRank = 3;
constexpr int kSteps = 3;
constexpr double kLr = 0.1;

struct Case {
  int world = 2;
  bool find_unused = false;
  bool static_graph = false;
  bool grad_as_view = false;
  std::string hook;  // "", "allreduce", "fp16", "bf16"
  int grad_accum = 1;
  bool small_buckets = true;  // several buckets, launched as they fill

  std::string Name() const {
    std::string name = "world" + std::to_string(world);
    if (find_unused) name += "_findunused";
    if (static_graph) name += "_static";
    if (grad_as_view) name += "_view";
    if (!hook.empty()) name += "_hook" + hook;
    if (grad_accum > 1) name += "_accum" + std::to_string(grad_accum);
    if (!small_buckets) name += "_defaultcaps";
    return name;
  }
};

// Rows for (step, micro-batch, rank): distinct on every rank (equal data would hide bugs).
struct Data {
  Tensor x, y;
  Data(int world, int micro_batches) {
    const int64_t rows = static_cast<int64_t>(kSteps) * micro_batches * world * kRowsPerRank;
    x = Tensor::Empty({rows, kWidths.front()}, DType::kFloat64);
    y = Tensor::Empty({rows}, DType::kInt64);
    Generator gen(1234);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<double>()[i] = gen.Normal();
    for (int64_t i = 0; i < rows; ++i)
      y.data<int64_t>()[i] = static_cast<int64_t>(gen.Uniform() * kWidths.back()) % kWidths.back();
  }
  // Global micro-batch g covers world * kRowsPerRank rows; rank r has its slice.
  Tensor X(int64_t g, int world, int rank) const { return Rows(x, g, world, rank); }
  Tensor Y(int64_t g, int world, int rank) const { return Rows(y, g, world, rank); }
  Tensor GlobalX(int64_t g, int world) const {
    return x.Rows(g * world * kRowsPerRank, (g + 1) * world * kRowsPerRank);
  }
  Tensor GlobalY(int64_t g, int world) const {
    return y.Rows(g * world * kRowsPerRank, (g + 1) * world * kRowsPerRank);
  }
  static Tensor Rows(const Tensor& t, int64_t g, int world, int rank) {
    const int64_t begin = (g * world + rank) * kRowsPerRank;
    return t.Rows(begin, begin + kRowsPerRank);
  }
};

// Gradients after each step's backward(s), from one process on the global batches.
std::vector<Grads> ReferenceRun(const Case& c, const Data& data) {
  auto model = nn::MakeMlp(kWidths, /*seed=*/7, DType::kFloat64);
  Sgd sgd(model->Parameters(), {.lr = kLr});
  std::vector<Grads> per_step;
  for (int step = 0; step < kSteps; ++step) {
    sgd.ZeroGrad();
    for (int k = 0; k < c.grad_accum; ++k) {
      const int64_t g = static_cast<int64_t>(step) * c.grad_accum + k;
      CrossEntropy(model->Forward(data.GlobalX(g, c.world)), data.GlobalY(g, c.world)).Backward();
    }
    per_step.push_back(GradsOf(*model));
    sgd.Step();
  }
  return per_step;
}

class DdpEquivalenceTest : public ::testing::TestWithParam<Case> {};

TEST_P(DdpEquivalenceTest, MatchesSingleProcessOnTheGlobalBatch) {
  if (kDevice.is_cuda()) DDPKIT_REQUIRE_GPU();
  const Case c = GetParam();
  const Data data(c.world, c.grad_accum);
  const std::vector<Grads> expected = ReferenceRun(c, data);
  // Low-precision hooks round each bucket to 11 (fp16) or 8 (bf16) significant bits.
  const double rtol = c.hook == "fp16" ? 2e-3 : c.hook == "bf16" ? 2e-2 : 1e-10;
  const double atol = c.hook == "fp16" ? 1e-4 : c.hook == "bf16" ? 1e-3 : 1e-12;

  std::mutex mu;
  std::vector<std::vector<Grads>> per_rank(c.world);
  RunWorld(c.world, [&](comm::ProcessGroup& group) {
    // A different seed per rank: DDP must broadcast rank 0's initial weights.
    auto model = nn::MakeMlp(kWidths, /*seed=*/7 + group.rank(), DType::kFloat64);
    model->To(kDevice);
    DdpOptions options{.find_unused_parameters = c.find_unused,
                       .static_graph = c.static_graph,
                       .gradient_as_bucket_view = c.grad_as_view};
    if (c.small_buckets) {
      options.pytorch_version = {1, 13};  // a given cap beside a first bucket of its own
      options.bucket_cap_mb = 1000.0 / (1024 * 1024);  // ~1000 B: several buckets
      options.first_bucket_mb = 300.0 / (1024 * 1024);
    }
    auto ddp = MakeDdp(model, group, options);
    if (!c.hook.empty()) ddp->RegisterBuiltinCommHook(*ParseBuiltinCommHook(c.hook));
    Sgd sgd(model->Parameters(), {.lr = kLr});
    std::vector<Grads> mine;
    for (int step = 0; step < kSteps; ++step) {
      sgd.ZeroGrad();
      for (int k = 0; k < c.grad_accum; ++k) {
        const int64_t g = static_cast<int64_t>(step) * c.grad_accum + k;
        auto run = [&] {
          CrossEntropy(ddp->Forward(data.X(g, c.world, group.rank()).To(kDevice)),
                       data.Y(g, c.world, group.rank()).To(kDevice))
              .Backward();
        };
        if (k + 1 < c.grad_accum) {
          auto no_sync = ddp->NoSync();
          run();
        } else {
          run();
        }
      }
      mine.push_back(GradsOf(*model));
      sgd.Step();
    }
    std::lock_guard<std::mutex> lock(mu);
    per_rank[group.rank()] = std::move(mine);
  });

  for (int rank = 0; rank < c.world; ++rank) {
    ASSERT_EQ(per_rank[rank].size(), static_cast<size_t>(kSteps));
    for (int step = 0; step < kSteps; ++step) {
      EXPECT_TRUE(GradsClose(per_rank[rank][step], expected[step], rtol, atol))
          << "rank " << rank << ", step " << step + 1;
      // Every rank holds bitwise the same averaged gradients.
      EXPECT_EQ(per_rank[rank][step], per_rank[0][step]) << "rank " << rank << " vs rank 0";
    }
  }
}

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (int world = 1; world <= 4; ++world) {
    for (int flags = 0; flags < 16; ++flags) {
      Case c{.world = world,
             .find_unused = (flags & 1) != 0,
             .static_graph = (flags & 2) != 0,
             .grad_as_view = (flags & 4) != 0,
             .hook = (flags & 8) ? "allreduce" : ""};
      cases.push_back(c);
      if (world == 3) {  // accumulation over every option set, at one world size
        c.grad_accum = 3;
        cases.push_back(c);
      }
    }
  }
  for (const char* hook : {"fp16", "bf16"}) {
    for (int world : {2, 4}) {
      cases.push_back({.world = world, .hook = hook});
      cases.push_back({.world = world,
                       .find_unused = true,
                       .grad_as_view = true,
                       .hook = hook,
                       .grad_accum = 2});
    }
  }
  cases.push_back({.world = 4, .hook = "", .small_buckets = false});
  cases.push_back(
      {.world = 2, .find_unused = true, .hook = "", .grad_accum = 2, .small_buckets = false});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(DDPKIT_EQUIVALENCE_SUITE, DdpEquivalenceTest,
                         ::testing::ValuesIn(AllCases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.Name();
                         });

}  // namespace
}  // namespace ddpkit::reducer::testing::ddp_equivalence_test
