// DDP on the real model families (autograd/models: nanoGPT's GPT, torchvision's ResNet) against
// one process, float64, for world sizes 1-4 on the threads world and 2 on gloo, across DDP's
// options: bucket caps (every tensor its own bucket, the defaults, one bucket),
// find_unused_parameters, static_graph, gradient_as_bucket_view, no_sync accumulation and the
// comm hooks.
//
// GPT: W ranks, each with its shard, equal one process on the concatenated batch (nanoGPT's
// mean loss): the gradients of every step and the weights after them. The tied wte/lm_head
// weight has one hook, fired once with both uses' gradients summed; the vocabulary rows no input
// token uses get theirs from lm_head alone, and are checked to be nonzero.
//
// ResNet: BatchNorm normalises each rank's batch by that rank's own statistics, so DDP on W ranks
// is NOT one process over the global batch (that is what SyncBatchNorm gives). It is exactly one
// process that runs the W shards as W separate forward/backward passes ("ghost batches") and
// averages their gradients. Buffers follow PyTorch: with broadcast_buffers a forward first
// copies rank 0's buffers to every rank when the forward before it was synced (so within a
// no_sync run only its first forward does), then each rank updates them with its own shard. So
// after a step rank 0 holds its own statistics and rank r rank 0's updated with rank r's shard;
// without the option each rank keeps its own. The reference replays exactly that, per rank.
#include <mutex>

#include "autograd/nn/optim.h"
#include "tests/reducer/ddp_model_util.h"
#include "tests/reducer/gloo_world.h"

namespace ddpkit::reducer::testing::ddp_model_equivalence_test {
namespace {

constexpr int kSteps = 2;
enum class Caps { kTiny, kDefault, kOne };  // 1-byte caps: a bucket per tensor; 1000 MB: one

struct Case {
  Family family = Family::kGpt;
  int world = 2;
  bool gloo = false;
  bool find_unused = false;
  bool static_graph = false;
  bool grad_as_view = false;
  std::string hook{};  // "", "allreduce", "fp16", "bf16"
  int grad_accum = 1;
  Caps caps = Caps::kTiny;
  bool broadcast_buffers = true;

  std::string Name() const {
    std::string name = FamilyName(family);
    name += (gloo ? "_gloo" : "_threads") + std::to_string(world);
    if (find_unused) name += "_findunused";
    if (static_graph) name += "_static";
    if (grad_as_view) name += "_view";
    if (!hook.empty()) name += "_hook" + hook;
    if (grad_accum > 1) name += "_accum" + std::to_string(grad_accum);
    if (caps != Caps::kTiny) name += caps == Caps::kDefault ? "_defaultcaps" : "_onebucket";
    if (!broadcast_buffers) name += "_nobroadcast";
    return name;
  }
};

// What a rank (or the reference for it) holds: gradients after each step's backward(s), buffers
// after each step, weights after the last.
struct Trace {
  std::vector<Grads> grads, buffers;
  Grads weights;
};

DdpOptions OptionsOf(const Case& c) {
  DdpOptions options{.find_unused_parameters = c.find_unused,
                     .static_graph = c.static_graph,
                     .gradient_as_bucket_view = c.grad_as_view,
                     .broadcast_buffers = c.broadcast_buffers};
  if (c.caps != Caps::kDefault) {
    const double mb = c.caps == Caps::kTiny ? 1.0 / (1024 * 1024) : 1000.0;
    options.bucket_cap_mb = mb;  // the first bucket's too (PyTorch >= 2.4)
  }
  // From PyTorch 2.1 a static graph whose first backward runs under no_sync fails
  // (DdpStaticGraphVersionTest): accumulation under static graph is compared under 1.13's rule,
  // which counted the first iteration from the first synced forward.
  if (c.static_graph && c.grad_accum > 1) options.pytorch_version = {1, 13};
  return options;
}

// GPT: one process on the concatenated batch (the same for every rank).
std::vector<Trace> GlobalBatchReference(const Case& c, const Data& data) {
  auto model = MakeModel(c.family, /*seed=*/7);
  Sgd sgd(model->Parameters(), {.lr = kLr});
  Trace trace;
  for (int step = 0; step < kSteps; ++step) {
    sgd.ZeroGrad();
    for (int k = 0; k < c.grad_accum; ++k) {
      const int64_t g = static_cast<int64_t>(step) * c.grad_accum + k;
      Loss(c.family, model->Forward(data.GlobalX(g)), data.GlobalY(g)).Backward();
    }
    trace.grads.push_back(GradsOf(*model));
    trace.buffers.emplace_back();
    sgd.Step();
  }
  trace.weights = WeightsOf(*model);
  return std::vector<Trace>(c.world, trace);
}

// ResNet: one process, one model, the W shards as W passes each scaled by 1/W; each rank's
// buffers kept apart and swapped in for its pass, rank 0's copied to all where DDP broadcasts.
std::vector<Trace> GhostBatchReference(const Case& c, const Data& data) {
  auto model = MakeModel(c.family, /*seed=*/7);
  Sgd sgd(model->Parameters(), {.lr = kLr});
  std::vector<std::vector<Tensor>> state = InitialBuffers(c.family, c.world);
  std::vector<Trace> traces(c.world);
  bool previous_synced = true;  // DDP's first forward broadcasts
  for (int step = 0; step < kSteps; ++step) {
    sgd.ZeroGrad();
    for (int k = 0; k < c.grad_accum; ++k) {
      const int64_t g = static_cast<int64_t>(step) * c.grad_accum + k;
      if (c.broadcast_buffers && previous_synced) {
        for (int r = 1; r < c.world; ++r) state[r] = state[0];  // (never written in place)
      }
      for (int r = 0; r < c.world; ++r) {
        LoadBuffers(*model, state[r]);
        (Loss(c.family, model->Forward(data.X(g, r)), data.Y(g, r)) * (1.0 / c.world)).Backward();
        state[r] = SaveBuffers(*model);
      }
      previous_synced = k + 1 == c.grad_accum;
    }
    for (int r = 0; r < c.world; ++r) {
      traces[r].grads.push_back(GradsOf(*model));
      traces[r].buffers.push_back(BuffersIn(*model, state[r]));
    }
    sgd.Step();
  }
  for (Trace& t : traces) t.weights = WeightsOf(*model);
  return traces;
}

// One rank of the DDP run: its own seed (DDP must broadcast rank 0's weights), its own shards.
Trace RunRank(const Case& c, const Data& data, comm::ProcessGroup& group) {
  const int rank = group.rank();
  auto model = MakeModel(c.family, /*seed=*/7 + rank);
  auto ddp = MakeDdp(model, group, OptionsOf(c));
  PerturbBuffers(*model, rank);
  if (!c.hook.empty()) ddp->RegisterBuiltinCommHook(*ParseBuiltinCommHook(c.hook));
  Sgd sgd(model->Parameters(), {.lr = kLr});
  Trace trace;
  for (int step = 0; step < kSteps; ++step) {
    sgd.ZeroGrad();
    for (int k = 0; k < c.grad_accum; ++k) {
      const int64_t g = static_cast<int64_t>(step) * c.grad_accum + k;
      auto run = [&] { Loss(c.family, ddp->Forward(data.X(g, rank)), data.Y(g, rank)).Backward(); };
      if (k + 1 < c.grad_accum) {
        auto no_sync = ddp->NoSync();
        run();
      } else {
        run();
      }
    }
    trace.grads.push_back(GradsOf(*model));
    trace.buffers.push_back(BuffersOf(*model));
    sgd.Step();
  }
  trace.weights = WeightsOf(*model);
  return trace;
}

// The tied table's rows no input token uses: their gradient comes from lm_head's use alone.
::testing::AssertionResult LmHeadReachesTheTiedTable(const Grads& grads) {
  const std::vector<double>& wte = grads.at("transformer.wte.weight");
  const int64_t dim = static_cast<int64_t>(wte.size()) / kVocab;
  for (int64_t i = kInputVocab * dim; i < kVocab * dim; ++i) {
    if (wte[i] != 0) return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "wte's unused rows have no gradient: lm_head's use lost";
}

class DdpModelEquivalenceTest : public ::testing::TestWithParam<Case> {};

TEST_P(DdpModelEquivalenceTest, MatchesOneProcess) {
  const Case c = GetParam();
  if (c.gloo && kGlooUnderTsan) GTEST_SKIP() << "libgloo is not built for ThreadSanitizer";
  const Data data(c.family, c.world, kSteps * c.grad_accum);
  const std::vector<Trace> expected =
      c.family == Family::kGpt ? GlobalBatchReference(c, data) : GhostBatchReference(c, data);
  // Low-precision hooks round each bucket to 11 (fp16) or 8 (bf16) significant bits. The
  // ResNet's BatchNorm normalises two values per channel at layer4 (1x1): its backward is
  // ill-conditioned, so float64 summation-order differences (W passes against an allreduce)
  // grow to ~1e-10 relative; 1e-8 still fails any real error (a lost broadcast, a wrong divisor).
  const double exact = c.family == Family::kGpt ? 1e-10 : 1e-8;
  const double rtol = c.hook == "fp16" ? 2e-3 : c.hook == "bf16" ? 2e-2 : exact;
  const double atol = c.hook == "fp16" ? 1e-4 : c.hook == "bf16" ? 1e-3 : exact * 1e-2;

  std::mutex mu;
  std::vector<Trace> per_rank(c.world);
  auto body = [&](comm::ProcessGroup& group) {
    Trace trace = RunRank(c, data, group);
    std::lock_guard<std::mutex> lock(mu);
    per_rank[group.rank()] = std::move(trace);
  };
  c.gloo ? RunGlooWorld(c.world, body) : RunWorld(c.world, body);

  for (int rank = 0; rank < c.world; ++rank) {
    const Trace& got = per_rank[rank];
    ASSERT_EQ(got.grads.size(), static_cast<size_t>(kSteps)) << "rank " << rank;
    for (int step = 0; step < kSteps; ++step) {
      EXPECT_TRUE(GradsClose(got.grads[step], expected[rank].grads[step], rtol, atol))
          << "rank " << rank << ", step " << step + 1;
      EXPECT_EQ(got.grads[step], per_rank[0].grads[step]) << "rank " << rank << " vs rank 0";
      EXPECT_TRUE(GradsClose(got.buffers[step], expected[rank].buffers[step], rtol, atol))
          << "buffers of rank " << rank << " after step " << step + 1;
    }
    EXPECT_TRUE(GradsClose(got.weights, expected[rank].weights, rtol, atol)) << "rank " << rank;
  }
  if (c.family == Family::kGpt) {
    EXPECT_TRUE(LmHeadReachesTheTiedTable(per_rank[0].grads[0]));
  }
}

// Every option set at every world size on threads (accumulation over all of them at W = 3), the
// hooks and cap extremes at W = 2 and 4, and the gloo backend at W = 2.
std::vector<Case> FamilyCases(Family family) {
  std::vector<Case> cases;
  for (int world = 1; world <= 4; ++world) {
    for (int flags = 0; flags < 8; ++flags) {
      Case c{.family = family,
             .world = world,
             .find_unused = (flags & 1) != 0,
             .static_graph = (flags & 2) != 0,
             .grad_as_view = (flags & 4) != 0};
      cases.push_back(c);
      if (world == 3) {
        c.grad_accum = 3;
        cases.push_back(c);
      }
    }
  }
  // The low-precision hooks on the GPT only: the ResNet's per-rank gradients (BatchNorm over two
  // values per channel) are large and cancel across ranks, so rounding each rank's share to 8 or
  // 11 bits bounds no relative error of their mean.
  const bool gpt = family == Family::kGpt;
  for (int world : {2, 4}) {
    cases.push_back({.family = family, .world = world, .hook = "allreduce"});
    cases.push_back({.family = family,
                     .world = world,
                     .find_unused = true,
                     .grad_as_view = true,
                     .hook = "allreduce",
                     .grad_accum = 2});
    if (gpt) {
      for (const char* hook : {"fp16", "bf16"})
        cases.push_back({.family = family, .world = world, .hook = hook});
      cases.push_back({.family = family,
                       .world = world,
                       .find_unused = true,
                       .grad_as_view = true,
                       .hook = "fp16",
                       .grad_accum = 2});
    }
    cases.push_back({.family = family, .world = world, .caps = Caps::kDefault});
    cases.push_back({.family = family, .world = world, .grad_accum = 2, .caps = Caps::kOne});
  }
  for (Case c : std::vector<Case>{{},
                                  {.static_graph = true, .grad_as_view = true},
                                  {.find_unused = true, .grad_accum = 2},
                                  {.hook = gpt ? "fp16" : "allreduce"},
                                  {.caps = Caps::kOne}}) {
    c.family = family;
    c.gloo = true;
    cases.push_back(c);
  }
  return cases;
}

std::vector<Case> AllCases() {
  std::vector<Case> cases = FamilyCases(Family::kGpt);
  for (const Case& c : FamilyCases(Family::kResNet)) cases.push_back(c);
  for (int world : {2, 3}) {  // each rank's statistics its own
    cases.push_back({.family = Family::kResNet, .world = world, .broadcast_buffers = false});
    cases.push_back(
        {.family = Family::kResNet, .world = world, .grad_accum = 2, .broadcast_buffers = false});
  }
  cases.push_back({.family = Family::kResNet, .gloo = true, .broadcast_buffers = false});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllOptions, DdpModelEquivalenceTest, ::testing::ValuesIn(AllCases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.Name();
                         });

}  // namespace
}  // namespace ddpkit::reducer::testing::ddp_model_equivalence_test
