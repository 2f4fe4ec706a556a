#include "tests/comm/collective_checks.h"

#include <algorithm>
#include <numeric>

#include "autograd/error.h"

namespace ddpkit::comm::testing_util {
namespace {

Tensor RankInput(int rank, int64_t count, DType dtype, int64_t salt = 0) {
  std::vector<double> values(count);
  for (int64_t i = 0; i < count; ++i) values[i] = InputValue(rank, i + salt);
  Tensor t = Tensor::Empty({count}, dtype);
  t.CopyFrom(Tensor::FromVector<double>(values, {count}));
  return t;
}

absl::Status Compare(std::string_view what, const Tensor& got,
                     const std::vector<double>& expected) {
  if (got.numel() != static_cast<int64_t>(expected.size())) {
    return absl::InternalError(
        StrCat(what, ": ", got.numel(), " elements, expected ", expected.size()));
  }
  for (int64_t i = 0; i < got.numel(); ++i) {
    if (got.at(i) != expected[i]) {
      return absl::InternalError(
          StrCat(what, ": element ", i, " is ", got.at(i), ", expected ", expected[i]));
    }
  }
  return absl::OkStatus();
}

absl::Status WaitFor(const std::shared_ptr<Work>& work) { return work->Wait(); }

}  // namespace

double InputValue(int rank, int64_t i) {
  return static_cast<double>((rank * 31 + i * 17) % 13 - 3);
}

absl::Status CheckAllCollectives(ProcessGroup& group, DType dtype, int64_t count) {
  const int size = group.size(), rank = group.rank();
  const std::string tag =
      StrCat(" [", DTypeName(dtype), ", ", count, " elements, world ", size, "]");

  // allreduce, every op
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax}) {
    if (op == ReduceOp::kAvg && !IsFloatingPoint(dtype)) continue;
    Tensor t = RankInput(rank, count, dtype);
    DDPKIT_RETURN_IF_ERROR(WaitFor(group.Allreduce(t, op)));
    std::vector<double> expected(count);
    for (int64_t i = 0; i < count; ++i) {
      double acc = InputValue(0, i);
      for (int r = 1; r < size; ++r) {
        const double v = InputValue(r, i);
        acc = op == ReduceOp::kMin   ? std::min(acc, v)
              : op == ReduceOp::kMax ? std::max(acc, v)
                                     : acc + v;
      }
      expected[i] = op == ReduceOp::kAvg ? acc / size : acc;
    }
    if (op == ReduceOp::kAvg && dtype != DType::kFloat64) {  // the division rounds
      Tensor rounded = Tensor::Empty({count}, dtype);
      rounded.CopyFrom(Tensor::FromVector<double>(expected, {count}));
      expected = rounded.ToDoubles();
    }
    DDPKIT_RETURN_IF_ERROR(Compare(StrCat("allreduce ", ReduceOpName(op), tag), t, expected));
  }

  // broadcast from every root
  for (int root = 0; root < size; ++root) {
    Tensor t = RankInput(rank, count, dtype);
    DDPKIT_RETURN_IF_ERROR(WaitFor(group.Broadcast(t, root)));
    DDPKIT_RETURN_IF_ERROR(Compare(StrCat("broadcast from ", root, tag), t,
                                   RankInput(root, count, DType::kFloat64).ToDoubles()));
  }

  // allgather
  {
    Tensor out = Tensor::Empty({count * size}, dtype);
    DDPKIT_RETURN_IF_ERROR(WaitFor(group.Allgather(RankInput(rank, count, dtype), out)));
    std::vector<double> expected;
    for (int r = 0; r < size; ++r) {
      for (int64_t i = 0; i < count; ++i) expected.push_back(InputValue(r, i));
    }
    DDPKIT_RETURN_IF_ERROR(Compare(StrCat("allgather", tag), out, expected));
  }

  // allgather_v: rank r contributes count + r elements (a rank may contribute 0 when count is 0)
  std::vector<int64_t> counts(size);
  for (int r = 0; r < size; ++r) counts[r] = count + r;
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  {
    Tensor out = Tensor::Empty({total}, dtype);
    DDPKIT_RETURN_IF_ERROR(
        WaitFor(group.AllgatherV(RankInput(rank, counts[rank], dtype), out, counts)));
    std::vector<double> expected;
    for (int r = 0; r < size; ++r) {
      for (int64_t i = 0; i < counts[r]; ++i) expected.push_back(InputValue(r, i));
    }
    DDPKIT_RETURN_IF_ERROR(Compare(StrCat("allgather_v", tag), out, expected));
  }

  // reduce_scatter with unequal segments
  {
    Tensor out = Tensor::Empty({counts[rank]}, dtype);
    DDPKIT_RETURN_IF_ERROR(
        WaitFor(group.ReduceScatter(RankInput(rank, total, dtype), out, counts)));
    int64_t offset = 0;
    for (int r = 0; r < rank; ++r) offset += counts[r];
    std::vector<double> expected(counts[rank], 0.0);
    for (int64_t i = 0; i < counts[rank]; ++i) {
      for (int r = 0; r < size; ++r) expected[i] += InputValue(r, offset + i);
    }
    DDPKIT_RETURN_IF_ERROR(Compare(StrCat("reduce_scatter", tag), out, expected));
  }

  // all_to_all_v: rank r sends (count + r + j) % 3 + count elements to peer j
  {
    auto sends = [&](int from, int to) { return count + (from + to) % 3; };
    std::vector<int64_t> send(size), recv(size);
    for (int j = 0; j < size; ++j) {
      send[j] = sends(rank, j);
      recv[j] = sends(j, rank);
    }
    const int64_t send_total = std::accumulate(send.begin(), send.end(), int64_t{0});
    const int64_t recv_total = std::accumulate(recv.begin(), recv.end(), int64_t{0});
    Tensor out = Tensor::Empty({recv_total}, dtype);
    DDPKIT_RETURN_IF_ERROR(
        WaitFor(group.AllToAllV(RankInput(rank, send_total, dtype), out, send, recv)));
    std::vector<double> expected;
    for (int j = 0; j < size; ++j) {
      int64_t offset = 0;  // where peer j's block for this rank starts in j's input
      for (int k = 0; k < rank; ++k) offset += sends(j, k);
      for (int64_t i = 0; i < recv[j]; ++i) expected.push_back(InputValue(j, offset + i));
    }
    DDPKIT_RETURN_IF_ERROR(Compare(StrCat("all_to_all_v", tag), out, expected));
  }

  return WaitFor(group.Barrier());
}

}  // namespace ddpkit::comm::testing_util
