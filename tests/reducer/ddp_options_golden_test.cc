// DDP's 2.x options and changed rules against PyTorch's own runs (tests/testdata/ddp_options/,
// written by tools/scripts/golden/make_ddp_options_golden.py on Gloo worlds of 2 or 3 processes):
// the arithmetic that puts a gradient into its bucket, skip_all_reduce_unused_params' collectives
// and logging, static graph's first iteration, and where the buffers go. Each case runs here on
// the threads world with the same model shape and options, under the golden's PyTorch.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/nn/vision.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "join/join.h"
#include "nlohmann/json.hpp"
#include "tests/reducer/ddp_test_util.h"
#include "tests/reducer/test_models.h"

namespace ddpkit::reducer::testing {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

const Json& Golden(const std::string& version) {
  static std::map<std::string, Json>* goldens = new std::map<std::string, Json>();
  auto [it, inserted] = goldens->try_emplace(version);
  if (inserted) {
    std::ifstream in(std::string(DDPKIT_TESTDATA_DIR) + "/ddp_options/" + version + ".json");
    it->second = Json::parse(in);
  }
  return it->second;
}

const Json& Case(const std::string& version, const std::string& name) {
  const Json& cases = Golden(version)["cases"];
  EXPECT_TRUE(cases.contains(name)) << name;
  return cases[name];
}

// The collectives this rank issued since the last call, as the golden writes them: PyTorch's
// op name and the element count. ddpkit's own skip check (an allgather PyTorch does not issue,
// docs/reducer.md) is left out.
class Collectives {
 public:
  explicit Collectives(const comm::ProcessGroup& group) : group_(group) { Take(); }
  Json Take() {
    Json out = Json::array();
    for (const comm::FlightRecorder::Entry& e : group_.flight_recorder().Entries()) {
      if (e.sequence_number <= last_) continue;
      last_ = e.sequence_number;
      if (e.tag.purpose == "skip_check") continue;
      out.push_back({Name(e.op), e.count});
    }
    return out;
  }

 private:
  static std::string Name(comm::OpType op) {
    switch (op) {
      case comm::OpType::kAllreduce: return "all_reduce";
      case comm::OpType::kBroadcast: return "broadcast";
      case comm::OpType::kAllgather: return "all_gather";
      default: return std::string(comm::OpTypeName(op));
    }
  }
  const comm::ProcessGroup& group_;
  uint64_t last_ = 0;
};

// ---------------------------------------------------------------------------- division

// The golden's exact constants: float32 of ((k * 7919 + salt * 104729) % 1000 + 1) / 997.
Tensor Constants(const Shape& shape, int64_t salt) {
  Tensor c = Tensor::Empty(shape, DType::kFloat32);
  for (int64_t k = 0; k < c.numel(); ++k) {
    c.data<float>()[k] = static_cast<float>(((k * 7919 + salt * 104729) % 1000 + 1) / 997.0);
  }
  return c;
}

// Four parameters whose gradient is exactly c * scale: loss = scale * sum over i of sum(p_i c_i).
class Exact : public nn::Module {
 public:
  Exact() {
    const std::vector<Shape> shapes = {{64, 64}, {64}, {64, 64}, {64}};
    for (size_t i = 0; i < shapes.size(); ++i) {
      ps_.push_back(RegisterParameter(StrCat("ps.", i), Tensor::Zeros(shapes[i])));
      cs_.push_back(Constants(shapes[i], static_cast<int64_t>(i)));
    }
  }
  Tensor Forward(const Tensor& scale) override {
    Tensor loss = Sum(Mul(ps_[0], cs_[0]));
    for (size_t i = 1; i < ps_.size(); ++i) loss = Add(loss, Sum(Mul(ps_[i], cs_[i])));
    return Mul(loss, scale);
  }
  const std::vector<Tensor>& cs() const { return cs_; }

 private:
  std::string Describe() const override { return "Exact"; }
  std::vector<Tensor> ps_, cs_;
};

uint32_t Checksum(const Tensor& t) {
  uint32_t sum = 0;
  for (int64_t k = 0; k < t.numel(); ++k) {
    uint32_t word;
    std::memcpy(&word, t.data<float>() + k, sizeof word);
    sum += word;
  }
  return sum;
}

// "mul" when t is c * fl(1/W), "div" when c / W, "both" or "neither".
std::string PathOf(const Tensor& t, const Tensor& c, int world) {
  bool mul = true, div = true;
  const float inverse = static_cast<float>(1.0 / world);
  for (int64_t k = 0; k < t.numel(); ++k) {
    mul = mul && t.data<float>()[k] == c.data<float>()[k] * inverse;
    div = div && t.data<float>()[k] == c.data<float>()[k] / static_cast<float>(world);
  }
  return mul && div ? "both" : mul ? "mul" : div ? "div" : "neither";
}

// A case of the golden's "division", "hooks" or "mixed_precision" families: the loss scaled per
// rank as the golden's script scaled it (by default 1 on rank 0 and 0 elsewhere, an exact sum).
struct DivisionCase {
  std::string name;  // "division/default", "hooks/fp16", ...
  DdpOptions options{};
  std::optional<BuiltinCommHook> hook{};
  std::vector<double> scales{};
  bool bits = true;  // false: compare the path and the infinities, not the checksum
};

void ExpectDivisionLikePyTorch(const std::string& version, const DivisionCase& c) {
  SCOPED_TRACE(version + " " + c.name);
  const Json& golden = Case(version, c.name);
  const int world = golden["world_size"];
  const DdpOptions& options = c.options;
  RunWorld(world, [&](comm::ProcessGroup& group) {
    auto model = std::make_shared<Exact>();
    auto ddp = MakeDdp(model, group, options);
    if (c.hook) ddp->RegisterBuiltinCommHook(*c.hook);
    const double own = c.scales.empty() ? (group.rank() == 0 ? 1.0 : 0.0) : c.scales[group.rank()];
    const Tensor scale = Tensor::Full({}, own);
    for (int it = 0; it < 3; ++it) {
      for (const Tensor& p : model->Parameters()) {
        if (options.gradient_as_bucket_view && p.grad().defined()) {
          p.grad().Zero();  // in place: .grad stays the bucket view
        } else {
          p.set_grad(Tensor());
        }
      }
      ddp->Forward(scale).Backward();
      if (group.rank() != 0) continue;
      const TensorList params = model->Parameters();
      for (size_t i = 0; i < params.size(); ++i) {
        const Json& want = golden["rank0"]["iterations"][it][i];
        // (SCOPED_TRACE is per thread, and this is a rank's: the case goes in each message.)
        const std::string where =
            StrCat(version, " ", c.name, ", iteration ", it + 1, ", parameter ", i);
        EXPECT_EQ(PathOf(params[i].grad(), model->cs()[i], world), want["path"]) << where;
        if (c.bits)
          EXPECT_EQ(Checksum(params[i].grad()), want["checksum"].get<uint32_t>()) << where;
        int64_t infinite = 0;
        for (double v : params[i].grad().ToDoubles()) infinite += std::isinf(v) ? 1 : 0;
        EXPECT_EQ(infinite, want["infinite"].get<int64_t>()) << where;
      }
    }
  });
}

TEST(DdpOptionsGoldenTest, TheBucketCopyMultipliesOrDividesAsPyTorch) {
  for (const std::string version : {"1.13", "2.15"}) {
    const PyTorchVersion v = *ParsePyTorchVersion(version);
    ExpectDivisionLikePyTorch(version, {"division/default", {.pytorch_version = v}});
    ExpectDivisionLikePyTorch(version, {"division/gradient_as_bucket_view",
                                        {.pytorch_version = v, .gradient_as_bucket_view = true}});
  }
  ExpectDivisionLikePyTorch("2.15", {"division/batched_grad_copy", {.batched_grad_copy = true}});
  ExpectDivisionLikePyTorch("2.15", {"division/batched_grad_copy+gradient_as_bucket_view",
                                     {.gradient_as_bucket_view = true, .batched_grad_copy = true}});
}

// Rank 0 at 40000 and rank 1 at 30000 times c (at most 1): a float16 sum overflows, a float16
// sum of halves does not.
const std::vector<double> kOverflow = {40000, 30000};

// The comm hooks divide before the sum, the fp16 one in float16, as PyTorch's default_hooks.
TEST(DdpOptionsGoldenTest, TheHooksDivideAsPyTorchs) {
  for (const std::string version : {"1.13", "2.15"}) {
    const PyTorchVersion v = *ParsePyTorchVersion(version);
    ExpectDivisionLikePyTorch(
        version, {"hooks/allreduce", {.pytorch_version = v}, BuiltinCommHook::kAllreduce});
    ExpectDivisionLikePyTorch(
        version, {"hooks/fp16", {.pytorch_version = v}, BuiltinCommHook::kFp16Compress});
    // 1.13's Gloo adds large float16 tensors with its own rounding (the 64-element ones agree):
    // a Gloo detail, not DDP's; ddpkit's float16 sums are 2.15's.
    ExpectDivisionLikePyTorch(version, {"hooks/fp16_overflow",
                                        {.pytorch_version = v},
                                        BuiltinCommHook::kFp16Compress,
                                        kOverflow,
                                        version != "1.13"});
  }
}

// 2.1's mixed_precision sums in reduce_dtype, then divides: where the fp16 hook stays finite,
// its float16 sum overflows; bfloat16 does not; float32 divides after the sum.
TEST(DdpOptionsGoldenTest, MixedPrecisionSumsThenDividesAsPyTorchs) {
  auto mp = [](DType reduce) {
    return DdpOptions{.mixed_precision = MixedPrecision{.reduce_dtype = reduce}};
  };
  ExpectDivisionLikePyTorch(
      "2.15", {"mixed_precision/fp16_overflow", mp(DType::kFloat16), std::nullopt, kOverflow});
  ExpectDivisionLikePyTorch(
      "2.15", {"mixed_precision/bf16", mp(DType::kBFloat16), std::nullopt, kOverflow});
  ExpectDivisionLikePyTorch("2.15", {"mixed_precision/fp32", mp(DType::kFloat32)});
}

TEST(DdpMixedPrecisionTest, HalfPrecisionComputeAndBufferCastsAreRefusedSayingWhy) {
  EXPECT_THAT(
      ValidateDdpOptions({.mixed_precision = MixedPrecision{.param_dtype = DType::kFloat16}})
          .message(),
      HasSubstr("needs half-precision forward and backward"));
  EXPECT_THAT(
      ValidateDdpOptions({.mixed_precision = MixedPrecision{.buffer_dtype = DType::kFloat16}})
          .message(),
      HasSubstr("buffer_dtype is not supported"));
  EXPECT_THAT(ValidateDdpOptions({.pytorch_version = {1, 13}, .mixed_precision = MixedPrecision{}})
                  .message(),
              HasSubstr("mixed_precision is PyTorch 2.1's"));
}

// ---------------------------------------------------------------------------- skip

// Three Linear(10, 10): a and c always, b as the golden's plan says.
class Abc : public nn::Module {
 public:
  explicit Abc(bool b_first_only) : b_first_only_(b_first_only) {
    Generator gen(0);
    a_ = RegisterModule("a", std::make_shared<nn::Linear>(10, 10, true, gen));
    b_ = RegisterModule("b", std::make_shared<nn::Linear>(10, 10, true, gen));
    c_ = RegisterModule("c", std::make_shared<nn::Linear>(10, 10, true, gen));
  }
  void SetForwardContext(const nn::ForwardContext& context) override {
    use_b_ = b_first_only_ && context.iteration == 0;
  }
  Tensor Forward(const Tensor& x) override {
    Tensor out = a_->Forward(x);
    if (use_b_) out = Add(out, b_->Forward(x));
    return c_->Forward(out);
  }
  const nn::Linear& b() const { return *b_; }

 private:
  std::string Describe() const override { return "Abc"; }
  bool b_first_only_, use_b_ = false;
  std::shared_ptr<nn::Linear> a_, b_, c_;
};

void ExpectSkipLikePyTorch(const std::string& version, const std::string& name, DdpOptions options,
                           bool b_first_only) {
  SCOPED_TRACE(version + " " + name);
  const Json& golden = Case(version, "skip/" + name);
  options.pytorch_version = *ParsePyTorchVersion(version);
  options.bucket_cap_mb = 0.0004;  // 419 bytes: a bucket per layer
  RunWorld(2, [&](comm::ProcessGroup& group) {
    auto model = std::make_shared<Abc>(b_first_only);
    auto ddp = MakeDdp(model, group, options);
    Collectives collectives(group);
    const Json& iterations = golden["rank0"]["iterations"];
    for (size_t it = 0; it < iterations.size(); ++it) {
      ddp->SetForwardContext({.rank = group.rank(), .iteration = static_cast<int64_t>(it)});
      Sum(ddp->Forward(RandomRows(2, 10, static_cast<uint64_t>(it)).To(DType::kFloat32)))
          .Backward();
      const Json& want = iterations[it];
      Json got = collectives.Take(), expected = want["collectives"];
      if (version == "1.13") {
        // 1.13 refuses Gloo options, so its two worker threads run collectives side by side and
        // the profiled order is not the issue order: compared as a multiset.
        std::sort(got.begin(), got.end());
        std::sort(expected.begin(), expected.end());
      }
      EXPECT_EQ(got, expected) << "iteration " << it + 1;
      const PyTorchFields& pytorch = ddp->LoggingData().pytorch();
      const Json logged =
          pytorch.has_num_buckets_reduced() ? Json(pytorch.num_buckets_reduced()) : Json(nullptr);
      EXPECT_EQ(logged, want["num_buckets_reduced_logged"]) << "iteration " << it + 1;
      EXPECT_EQ(model->b().weight().grad().defined(), want["b_has_grad"].get<bool>())
          << "iteration " << it + 1;
    }
  });
}

TEST(DdpOptionsGoldenTest, SkippedBucketsAndTheirCountAreLikePyTorchs) {
  ExpectSkipLikePyTorch("2.15", "find_unused_b_never",
                        {.find_unused_parameters = true, .skip_all_reduce_unused_params = true},
                        false);
  ExpectSkipLikePyTorch("2.15", "find_unused_b_never_without_skip",
                        {.find_unused_parameters = true}, false);
  ExpectSkipLikePyTorch("2.15", "find_unused_b_first_only",
                        {.find_unused_parameters = true, .skip_all_reduce_unused_params = true},
                        true);
  ExpectSkipLikePyTorch("2.15", "static_graph_b_never",
                        {.static_graph = true, .skip_all_reduce_unused_params = true}, false);
  // 1.13: no option, no count, and find_unused's first plan keeps the 1 MiB first bucket beside
  // the passed cap (one bucket here).
  ExpectSkipLikePyTorch("1.13", "find_unused_b_never_without_skip",
                        {.find_unused_parameters = true}, false);
}

// PyTorch hangs or mixes buckets when ranks leave different parameters unused; ddpkit's check
// names the ranks and the bucket, on every rank, before any bucket is reduced.
TEST(DdpSkipUnusedTest, RanksThatSkipDifferentBucketsAreNamed) {
  const absl::Status status = RunWorldStatus(2, [](comm::ProcessGroup& group) {
    auto model = std::make_shared<Abc>(true);
    auto ddp = MakeDdp(model, group,
                       {.bucket_cap_mb = 0.0004,
                        .find_unused_parameters = true,
                        .skip_all_reduce_unused_params = true});
    // Rank 0 uses b, rank 1 does not.
    ddp->SetForwardContext({.rank = group.rank(), .iteration = group.rank()});
    Sum(ddp->Forward(RandomRows(2, 10, 1).To(DType::kFloat32))).Backward();
  });
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("rank(s) 1 skip gradient bucket 1"));
  EXPECT_THAT(status.message(), HasSubstr("'b.weight'"));
  EXPECT_THAT(status.message(), HasSubstr("which rank(s) 0 reduce"));
}

TEST(DdpSkipUnusedTest, RefusedUnderAnEnabledJoin) {
  const absl::Status status = RunWorldStatus(2, [](comm::ProcessGroup& group) {
    auto ddp = MakeDdp(std::make_shared<Abc>(false), group,
                       {.find_unused_parameters = true, .skip_all_reduce_unused_params = true});
    join::Join::Run({ddp.get()}, {}, [] {});
  });
  EXPECT_THAT(status.message(), HasSubstr("does not work under an enabled Join"));
}

// ---------------------------------------------------------------------------- static graph

void ExpectStaticGraphLikePyTorch(const std::string& version, const std::string& name) {
  SCOPED_TRACE(version + " " + name);
  const Json& steps = Case(version, "static/" + name)["rank0"]["steps"];
  RunWorld(2, [&](comm::ProcessGroup& group) {
    Generator gen(0);
    auto model = std::make_shared<nn::Sequential>();
    model->Append(std::make_shared<nn::Linear>(10, 10, true, gen));
    model->Append(std::make_shared<nn::Linear>(10, 10, true, gen));
    auto ddp = MakeDdp(model, group,
                       {.pytorch_version = *ParsePyTorchVersion(version), .static_graph = true});
    Collectives collectives(group);
    const Tensor x = RandomRows(2, 10, 1).To(DType::kFloat32);
    auto step = [&](size_t i, const std::function<void()>& body) {
      SCOPED_TRACE(steps[i]["step"].get<std::string>());
      std::optional<std::string> error;
      try {
        body();
      } catch (const Error& e) {
        error = e.what();
      }
      if (steps[i]["ok"].get<bool>()) {
        EXPECT_FALSE(error.has_value()) << *error;
        Json got = collectives.Take(), expected = steps[i]["collectives"];
        if (version == "1.13") {  // as a multiset: see ExpectSkipLikePyTorch
          std::sort(got.begin(), got.end());
          std::sort(expected.begin(), expected.end());
        }
        EXPECT_EQ(got, expected);
      } else {
        EXPECT_TRUE(error.has_value());
        collectives.Take();
      }
    };
    if (name == "two_forwards") {
      step(0, [&] { Add(Sum(ddp->Forward(x)), Sum(ddp->Forward(x))).Backward(); });
    } else {
      step(0, [&] {
        auto no_sync = ddp->NoSync();
        Sum(ddp->Forward(x)).Backward();
      });
    }
    // After PyTorch's failure every later forward fails too; ddpkit's stopped the run: it does
    // not pretend to continue, so only a run that went on is compared further.
    if (!steps[0]["ok"].get<bool>()) return;
    for (size_t i = 1; i < steps.size(); ++i) step(i, [&] { Sum(ddp->Forward(x)).Backward(); });
  });
}

TEST(DdpOptionsGoldenTest, StaticGraphsFirstIterationIsPyTorchs) {
  for (const std::string version : {"1.13", "2.15"}) {
    ExpectStaticGraphLikePyTorch(version, "two_forwards");
    ExpectStaticGraphLikePyTorch(version, "no_sync_first");
  }
}

TEST(DdpStaticGraphVersionTest, UnderPyTorch215AFirstBackwardUnderNoSyncIsExplained) {
  const absl::Status status = RunWorldStatus(2, [](comm::ProcessGroup& group) {
    auto ddp = MakeDdp(nn::MakeMlp({4, 8, 3}, 1), group, {.static_graph = true});
    auto no_sync = ddp->NoSync();
    Sum(ddp->Forward(RandomRows(2, 4, 1).To(DType::kFloat32))).Backward();
  });
  EXPECT_THAT(status.message(), HasSubstr("static graph's first backward ran under no_sync"));
  EXPECT_THAT(status.message(), HasSubstr("Run the first iteration synced"));
}

// 1.13 counted static graph's first iteration from the first synced forward: a no_sync step
// first is plain local accumulation, and two forwards before one backward change the graph.
TEST(DdpStaticGraphVersionTest, UnderPyTorch113NoSyncFirstWorksAndTwoForwardsFail) {
  RunWorld(2, [](comm::ProcessGroup& group) {
    auto ddp = MakeDdp(nn::MakeMlp({4, 8, 3}, 1), group,
                       {.pytorch_version = {1, 13}, .static_graph = true});
    const Tensor x = RandomRows(2, 4, 1).To(DType::kFloat32);
    {
      auto no_sync = ddp->NoSync();
      Sum(ddp->Forward(x)).Backward();
    }
    for (int i = 0; i < 3; ++i) Sum(ddp->Forward(x)).Backward();
    EXPECT_TRUE(ddp->LoggingData().has_rebuilt_buckets());
  });
  const absl::Status status = RunWorldStatus(2, [](comm::ProcessGroup& group) {
    auto ddp = MakeDdp(nn::MakeMlp({4, 8, 3}, 1), group,
                       {.pytorch_version = {1, 13}, .static_graph = true});
    const Tensor x = RandomRows(2, 4, 1).To(DType::kFloat32);
    Add(Sum(ddp->Forward(x)), Sum(ddp->Forward(x))).Backward();
  });
  EXPECT_THAT(status.message(), HasSubstr("graph has changed"));
}

// ---------------------------------------------------------------------------- buffers

// Linear(4, 3), a BatchNorm over its 3 features, Linear(3, 2): the golden's shape of model.
class WithBuffers : public nn::Module {
 public:
  WithBuffers() {
    Generator gen(0);
    first_ = RegisterModule("0", std::make_shared<nn::Linear>(4, 3, true, gen));
    norm_ = RegisterModule("1", std::make_shared<nn::BatchNorm2d>(3));
    last_ = RegisterModule("2", std::make_shared<nn::Linear>(3, 2, true, gen));
  }
  Tensor Forward(const Tensor& x) override {
    Tensor h = first_->Forward(x);
    h = Reshape(norm_->Forward(Reshape(h, {h.size(0), 3, 1, 1})), {h.size(0), 3});
    return last_->Forward(h);
  }
  const nn::Linear& first() const { return *first_; }
  const nn::BatchNorm2d& norm() const { return *norm_; }

 private:
  std::string Describe() const override { return "WithBuffers"; }
  std::shared_ptr<nn::Linear> first_, last_;
  std::shared_ptr<nn::BatchNorm2d> norm_;
};

void ExpectBuffersLikePyTorch(const std::string& version, const std::string& name,
                              DdpOptions options) {
  SCOPED_TRACE(version + " " + name);
  const Json& want = Case(version, "buffers/" + name)["rank1"];
  options.pytorch_version = *ParsePyTorchVersion(version);
  std::vector<double> after_join[2];
  RunWorld(2, [&](comm::ProcessGroup& group) {
    const int rank = group.rank();
    auto model = std::make_shared<WithBuffers>();
    model->norm().running_mean().Fill(rank + 1.0);  // rank-local, so what is sent shows
    model->first().bias().Fill(rank + 1.0);
    Collectives collectives(group);
    auto ddp = MakeDdp(model, group, options);
    const size_t construction = collectives.Take().size();
    if (rank == 1) {
      EXPECT_EQ(construction == 0, want["construction_collectives"].get<int>() == 0);
      EXPECT_EQ(model->norm().running_mean().ToDoubles()[0] == 1.0,
                want["buffers_from_rank0_at_construction"].get<bool>());
      EXPECT_EQ(model->first().bias().ToDoubles()[0] == 1.0,
                want["params_from_rank0_at_construction"].get<bool>());
      EXPECT_EQ(ddp->LoggingData().broadcast_buffers(),
                want["logged_broadcast_buffers"].get<bool>());
    }
    model->norm().running_mean().Fill(rank + 1.0);
    join::Join::Run({ddp.get()}, {}, [&] {
      for (int i = 0; i < (rank == 0 ? 1 : 3); ++i) {
        Sum(ddp->Forward(RandomRows(4, 4, 10 * rank + i).To(DType::kFloat32))).Backward();
      }
    });
    after_join[rank] = model->norm().running_mean().ToDoubles();
  });
  EXPECT_EQ(after_join[0] == after_join[1], want["buffers_agree_after_join"].get<bool>());
}

TEST(DdpOptionsGoldenTest, BuffersGoWherePyTorchsGo) {
  ExpectBuffersLikePyTorch("1.13", "default", {});
  ExpectBuffersLikePyTorch("1.13", "broadcast_buffers_false", {.broadcast_buffers = false});
  ExpectBuffersLikePyTorch("2.15", "default", {});
  ExpectBuffersLikePyTorch("2.15", "broadcast_buffers_false", {.broadcast_buffers = false});
  ExpectBuffersLikePyTorch("2.15", "forward_sync_buffers_false", {.forward_sync_buffers = false});
  ExpectBuffersLikePyTorch("2.15", "init_sync_false", {.init_sync = false});
}

}  // namespace
}  // namespace ddpkit::reducer::testing
