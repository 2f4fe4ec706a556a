// The verdicts the gloo fixtures cannot show (they record every call "scheduled", one op, no
// gathers): a type mismatch, a state mismatch (NCCL's started against completed), a gather's
// and a reduce-scatter's sizes against the group, an all-to-all by its totals, a coalesced
// group, and the order PyTorch's analyser checks in. Calls written here, not PyTorch's.
#include "tools/jobs/fr/torch_match.h"

#include "gtest/gtest.h"

namespace ddpkit::jobs {

using torch_formats::Dump;
using torch_formats::TorchCall;
namespace {

TorchCall Call(const std::string& op, std::vector<std::vector<int64_t>> in,
               std::vector<std::vector<int64_t>> out, const std::string& dtype = "Float",
               const std::string& state = "scheduled") {
  TorchCall c;
  c.op = "nccl:" + op;
  c.type = op;
  c.input_sizes = std::move(in);
  c.output_sizes = std::move(out);
  c.input_dtypes = std::vector<std::string>(c.input_sizes.size(), dtype);
  c.output_dtypes = std::vector<std::string>(c.output_sizes.size(), dtype);
  c.has_dtypes = true;
  c.state = state;
  return c;
}

TEST(TorchMatchTest, CallsCompareInTheAnalysersOrder) {
  const TorchCall ref = Call("all_reduce", {{4}}, {{4}});
  EXPECT_EQ(MatchCall(ref, ref, 2).kind, "");
  EXPECT_EQ(MatchCall(ref, Call("broadcast", {{4}}, {{4}}), 2).kind, "type_mismatch");
  // Sizes before dtypes before state: a call wrong in all three is a size mismatch.
  EXPECT_EQ(MatchCall(ref, Call("all_reduce", {{5}}, {{5}}, "Int", "started"), 2).kind,
            "size_mismatch");
  EXPECT_EQ(MatchCall(ref, Call("all_reduce", {{4}}, {{4}}, "Int", "started"), 2).kind,
            "dtype_mismatch");
  const CallMatch state = MatchCall(ref, Call("all_reduce", {{4}}, {{4}}, "Float", "started"), 2);
  EXPECT_EQ(state.kind, "state_mismatch");
  EXPECT_EQ(state.detail, "state scheduled vs started");
  // Dump version 1.x records no dtypes: nothing to compare.
  TorchCall old = Call("all_reduce", {{4}}, {{4}}, "Int");
  old.has_dtypes = false;
  EXPECT_EQ(MatchCall(ref, old, 2).kind, "");
}

TEST(TorchMatchTest, GathersAndReduceScattersAreSizedByTheGroup) {
  const TorchCall gather = Call("_all_gather_base", {{3}}, {{9}});
  EXPECT_EQ(MatchCall(gather, gather, 3).kind, "");
  EXPECT_EQ(MatchCall(gather, gather, 2).kind, "size_mismatch");  // 9 is not 2 x 3
  // One output buffer per rank (how c10d's hook records it) is as good as one flat buffer.
  const TorchCall per_rank = Call("all_gather", {{3}}, {{3}, {3}, {3}});
  EXPECT_EQ(MatchCall(per_rank, per_rank, 3).kind, "");
  const TorchCall scatter = Call("reduce_scatter", {{8}}, {{4}});
  EXPECT_EQ(MatchCall(scatter, scatter, 2).kind, "");
  EXPECT_EQ(MatchCall(scatter, scatter, 4).kind, "size_mismatch");
}

Dump RankDump(int rank, std::map<int64_t, std::vector<TorchCall>> calls) {
  Dump d;
  d.rank = rank;
  d.torch_calls = std::move(calls);
  return d;
}

std::vector<FrCollective> Compare(const std::map<int, Dump>& dumps, std::set<int> expected,
                                  std::set<int> dumped, const std::string& version = "2.10") {
  return CompareCollectives(
      {.name = "0", .dumps = &dumps, .expected = expected, .dumped = dumped, .version = version});
}

// All-to-all sizes differ by rank by design: the ranks agree when, in all, they send what they
// receive.
TEST(TorchMatchTest, AllToAllIsJudgedByItsTotals) {
  const std::map<int, Dump> even = {{0, RankDump(0, {{1, {Call("all_to_all", {{6}}, {{2}})}}})},
                                    {1, RankDump(1, {{1, {Call("all_to_all", {{2}}, {{6}})}}})}};
  EXPECT_EQ(Compare(even, {0, 1}, {0, 1})[0].verdict(), "fully_matched");
  const std::map<int, Dump> uneven = {{0, RankDump(0, {{1, {Call("all_to_all", {{6}}, {{2}})}}})},
                                      {1, RankDump(1, {{1, {Call("all_to_all", {{2}}, {{5}})}}})}};
  const FrCollective c = Compare(uneven, {0, 1}, {0, 1})[0];
  EXPECT_EQ(c.verdict(), "size_mismatch");
  ASSERT_EQ(c.mismatches_size(), 1);
  EXPECT_EQ(c.mismatches(0).rank(), 0);  // the analyser cannot tell whose: the reference
  EXPECT_EQ(c.mismatches(0).detail(), "the ranks send 8 elements in all and receive 7");
  // Versions up to 2.3 are not summed (the analyser's rule).
  EXPECT_EQ(Compare(uneven, {0, 1}, {0, 1}, "2.3")[0].verdict(), "fully_matched");
}

TEST(TorchMatchTest, MissingUndecidedAndCoalesced) {
  const TorchCall a = Call("all_reduce", {{4}}, {{4}});
  const std::map<int, Dump> dumps = {{0, RankDump(0, {{1, {a}}, {2, {a, a}}})},
                                     {1, RankDump(1, {{1, {a}}, {2, {a}}})}};
  // Rank 2 dumped and recorded nothing: missing from both; rank 1's coalesced group is short.
  std::vector<FrCollective> c = Compare(dumps, {0, 1, 2}, {0, 1, 2});
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].verdict(), "missing");
  EXPECT_EQ(std::vector<int>(c[0].missing_ranks().begin(), c[0].missing_ranks().end()),
            std::vector<int>({2}));
  EXPECT_EQ(c[1].verdict(), "missing");
  ASSERT_EQ(c[1].mismatches_size(), 1);
  EXPECT_EQ(c[1].mismatches(0).detail(), "a coalesced group of 2 calls vs 1");
  // Rank 2 left no dump: what the others agree on is undecided.
  c = Compare(dumps, {0, 1, 2}, {0, 1});
  EXPECT_EQ(c[0].verdict(), "undecided");
  EXPECT_EQ(c[1].verdict(), "size_mismatch");
}

}  // namespace
}  // namespace ddpkit::jobs
