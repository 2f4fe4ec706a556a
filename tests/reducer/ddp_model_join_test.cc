// DDP under Join on the real model families (tests/reducer/ddp_model_util.h), float64.
//
// Join with uneven inputs (rank r runs inputs[r] iterations, PyTorch's default
// divide_by_initial_world_size): at iteration t the active ranks' gradients are summed and divided
// by W, the joined ranks adding zeros — one process running the active shards' passes, each
// scaled by 1/W. Buffers as PyTorch 1.13 under Join: a synced forward broadcasts them from the
// highest rank still active (`_find_common_rank`; rank 0 may have joined with stale statistics),
// joined ranks receiving too; at the end every rank takes the model, buffers included, of the
// highest last joiner (`_sync_final_model`).
#include <algorithm>
#include <mutex>

#include "autograd/nn/optim.h"
#include "join/join.h"
#include "tests/reducer/ddp_model_util.h"

namespace ddpkit::reducer::testing::ddp_model_join_test {
namespace {

struct JoinCase {
  Family family = Family::kGpt;
  std::vector<int> inputs{};
  bool broadcast_buffers = true;
  PyTorchVersion pytorch_version = kDefaultPyTorch;

  std::string Name() const {
    std::string name = FamilyName(family);
    for (int n : inputs) name += "_" + std::to_string(n);
    if (!broadcast_buffers) name += "_nobroadcast";
    return pytorch_version == kDefaultPyTorch ? name : name + "_pytorch1_13";
  }
  // Join's final sync sends the buffers too, unless from PyTorch 2.1 broadcast_buffers is off.
  bool final_sync_sends_buffers() const {
    return broadcast_buffers || !Follows(pytorch_version, DdpRule::kBuffersFlagCoversInitAndJoin);
  }
};

// Per iteration the gradients, per rank and iteration (while active) the buffers, at the end the
// weights and each rank's buffers.
struct JoinTrace {
  std::vector<Grads> grads{};
  std::vector<std::vector<Grads>> buffers{};
  Grads weights{};
  std::vector<Grads> final_buffers{};
};

JoinTrace JoinReference(const JoinCase& c, const Data& data) {
  const int world = static_cast<int>(c.inputs.size());
  const int iterations = *std::max_element(c.inputs.begin(), c.inputs.end());
  auto model = MakeModel(c.family, /*seed=*/7);
  Sgd sgd(model->Parameters(), {.lr = kLr});
  std::vector<std::vector<Tensor>> state = InitialBuffers(c.family, world);
  JoinTrace out{.buffers = std::vector<std::vector<Grads>>(world)};
  for (int t = 0; t < iterations; ++t) {
    int source = 0;  // the highest active rank
    for (int r = 0; r < world; ++r) source = c.inputs[r] > t ? r : source;
    if (c.broadcast_buffers) std::fill(state.begin(), state.end(), state[source]);
    sgd.ZeroGrad();
    for (int r = 0; r < world; ++r) {
      if (c.inputs[r] <= t) continue;
      LoadBuffers(*model, state[r]);
      (Loss(c.family, model->Forward(data.X(t, r)), data.Y(t, r)) * (1.0 / world)).Backward();
      state[r] = SaveBuffers(*model);
      out.buffers[r].push_back(BuffersOf(*model));
    }
    out.grads.push_back(GradsOf(*model));
    sgd.Step();
  }
  int last = 0;
  for (int r = 0; r < world; ++r) last = c.inputs[r] == iterations ? r : last;
  out.weights = WeightsOf(*model);
  for (int r = 0; r < world; ++r) {
    out.final_buffers.push_back(BuffersIn(*model, state[c.final_sync_sends_buffers() ? last : r]));
  }
  return out;
}

// Rank `rank`'s side of the Join run (its trace in grads, buffers[0], weights, final_buffers[0]).
JoinTrace RunJoinRank(const JoinCase& c, const Data& data, comm::ProcessGroup& group) {
  const int rank = group.rank();
  auto model = MakeModel(c.family, /*seed=*/7 + rank);
  // 1-byte caps: every tensor its own bucket.
  DdpOptions options{.pytorch_version = c.pytorch_version,
                     .bucket_cap_mb = 1.0 / (1024 * 1024),  // the first bucket's too (>= 2.4)
                     .broadcast_buffers = c.broadcast_buffers};
  auto ddp = MakeDdp(model, group, options);
  PerturbBuffers(*model, rank);
  Sgd sgd(model->Parameters(), {.lr = kLr});
  JoinTrace trace{.buffers = {{}}};
  join::Join::Run({ddp.get()}, {}, [&] {
    for (int t = 0; t < c.inputs[rank]; ++t) {
      sgd.ZeroGrad();
      Loss(c.family, ddp->Forward(data.X(t, rank)), data.Y(t, rank)).Backward();
      trace.grads.push_back(GradsOf(*model));
      trace.buffers[0].push_back(BuffersOf(*model));
      sgd.Step();
    }
  });
  trace.weights = WeightsOf(*model);
  trace.final_buffers = {BuffersOf(*model)};
  return trace;
}

class DdpModelJoinTest : public ::testing::TestWithParam<JoinCase> {};

TEST_P(DdpModelJoinTest, MatchesOneProcessOverTheActiveRanks) {
  const JoinCase c = GetParam();
  const int world = static_cast<int>(c.inputs.size());
  const Data data(c.family, world, *std::max_element(c.inputs.begin(), c.inputs.end()));
  const JoinTrace expected = JoinReference(c, data);
  // (The ResNet's tolerance: see ddp_model_equivalence_test.cc.)
  const double rtol = c.family == Family::kGpt ? 1e-10 : 1e-8, atol = rtol * 1e-2;
  std::mutex mu;
  std::vector<JoinTrace> per_rank(world);
  RunWorld(world, [&](comm::ProcessGroup& group) {
    JoinTrace trace = RunJoinRank(c, data, group);
    std::lock_guard<std::mutex> lock(mu);
    per_rank[group.rank()] = std::move(trace);
  });
  for (int r = 0; r < world; ++r) {
    const JoinTrace& got = per_rank[r];
    ASSERT_EQ(got.grads.size(), static_cast<size_t>(c.inputs[r])) << "rank " << r;
    for (int t = 0; t < c.inputs[r]; ++t) {
      EXPECT_TRUE(GradsClose(got.grads[t], expected.grads[t], rtol, atol))
          << "rank " << r << ", iteration " << t;
      EXPECT_TRUE(GradsClose(got.buffers[0][t], expected.buffers[r][t], rtol, atol))
          << "buffers of rank " << r << " after iteration " << t;
    }
    EXPECT_TRUE(GradsClose(got.weights, expected.weights, rtol, atol)) << "rank " << r;
    EXPECT_TRUE(GradsClose(got.final_buffers[0], expected.final_buffers[r], rtol, atol))
        << "final buffers of rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(
    UnevenInputs, DdpModelJoinTest,
    ::testing::Values(JoinCase{Family::kGpt, {1, 3}}, JoinCase{Family::kGpt, {3, 1, 2}},
                      JoinCase{Family::kResNet, {1, 3}}, JoinCase{Family::kResNet, {3, 1, 2}},
                      JoinCase{Family::kResNet, {2, 3, 3, 1}},
                      JoinCase{Family::kResNet, {3, 1, 2}, false},
                      JoinCase{Family::kResNet, {3, 1, 2}, false, {1, 13}}),
    [](const ::testing::TestParamInfo<JoinCase>& info) { return info.param.Name(); });

}  // namespace
}  // namespace ddpkit::reducer::testing::ddp_model_join_test
