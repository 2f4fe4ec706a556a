#include "tests/comm/collective_checks.h"

#include <algorithm>
#include <csignal>
#include <functional>
#include <iostream>
#include <numeric>

#include "absl/strings/str_join.h"
#include "autograd/base/error.h"

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

// splitmix64: the same pseudo-random values in every process.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

using Row = std::vector<int64_t>;

Row RowOf(const Tensor& rows, int64_t i) {
  const int64_t w = rows.size(1);
  return Row(rows.data<int64_t>() + i * w, rows.data<int64_t>() + (i + 1) * w);
}

std::string RowString(const Row& row) { return StrCat("[", absl::StrJoin(row, ", "), "]"); }

// Every rank's input for `c` in the documented order: rows ascending (std::vector compares
// lexicographically), equal rows by (source rank, source position) — a stable sort of the
// inputs concatenated in rank order.
std::vector<Row> GlobalOrder(const SampleSortCase& c) {
  std::vector<Row> rows;
  for (int r = 0; r < static_cast<int>(c.rows_per_rank.size()); ++r) {
    const Tensor input = SampleSortInput(c, r);
    for (int64_t i = 0; i < input.size(0); ++i) rows.push_back(RowOf(input, i));
  }
  std::stable_sort(rows.begin(), rows.end());
  return rows;
}

// The sizes SampleSort reports against what `c` implies for this rank's shard of m rows.
absl::Status CheckShardSizes(const SortedShard& shard, const SampleSortCase& c, int rank,
                             int64_t m) {
  const int64_t total = std::accumulate(c.rows_per_rank.begin(), c.rows_per_rank.end(), int64_t{0});
  const std::vector<int64_t>& sizes = shard.shard_sizes;
  if (shard.input_sizes != c.rows_per_rank || shard.global_rows != total ||
      sizes.size() != c.rows_per_rank.size() || sizes[rank] != m ||
      std::accumulate(sizes.begin(), sizes.end(), int64_t{0}) != total ||
      shard.global_offset != std::accumulate(sizes.begin(), sizes.begin() + rank, int64_t{0})) {
    return absl::InternalError(
        StrCat("sizes: input_sizes [", absl::StrJoin(shard.input_sizes, ", "), "] (expected [",
               absl::StrJoin(c.rows_per_rank, ", "), "]), global_rows ", shard.global_rows,
               " (expected ", total, "), shard_sizes [", absl::StrJoin(sizes, ", "), "] with ", m,
               " rows here, global_offset ", shard.global_offset));
  }
  const int64_t largest = *std::max_element(sizes.begin(), sizes.end());
  const int64_t bound = SampleSortShardBound(c.rows_per_rank, c.samples_per_rank);
  if (largest > bound) {
    return absl::InternalError(
        StrCat("the largest shard has ", largest, " rows, over SampleSortShardBound = ", bound));
  }
  return absl::OkStatus();
}

// The shard's rows: sorted, and exactly rows [global_offset, global_offset + m) of the global
// order.
absl::Status CheckShardRows(const SortedShard& shard, const std::vector<Row>& global,
                            int64_t width) {
  const Tensor& rows = shard.rows;
  if (rows.dtype() != DType::kInt64 || rows.dim() != 2 || rows.size(1) != width) {
    return absl::InternalError(StrCat("rows are ", DTypeName(rows.dtype()),
                                      ShapeString(rows.shape()), ", expected int64 [m, ", width,
                                      "]"));
  }
  for (int64_t i = 1; i < rows.size(0); ++i) {
    if (RowOf(rows, i) < RowOf(rows, i - 1)) {
      return absl::InternalError(StrCat("not sorted: row ", i, " ", RowString(RowOf(rows, i)),
                                        " comes after ", RowString(RowOf(rows, i - 1))));
    }
  }
  for (int64_t i = 0; i < rows.size(0); ++i) {
    const Row& expected = global[shard.global_offset + i];
    if (RowOf(rows, i) != expected) {
      return absl::InternalError(StrCat("row ", i, " (global position ", shard.global_offset + i,
                                        ") is ", RowString(RowOf(rows, i)), ", expected ",
                                        RowString(expected)));
    }
  }
  return absl::OkStatus();
}

bool SameShard(const SortedShard& a, const SortedShard& b) {
  return a.rows.shape() == b.rows.shape() &&
         std::equal(a.rows.data<int64_t>(), a.rows.data<int64_t>() + a.rows.numel(),
                    b.rows.data<int64_t>()) &&
         a.shard_sizes == b.shard_sizes && a.global_offset == b.global_offset;
}

// all_to_all_v where rank `from` sends sends(from, to) elements to rank `to`.
absl::Status CheckAllToAllV(ProcessGroup& group, DType dtype, const std::string& what,
                            const std::function<int64_t(int, int)>& sends) {
  const int size = group.size(), rank = group.rank();
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
  return Compare(what, out, expected);
}

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
  DDPKIT_RETURN_IF_ERROR(CheckAllToAllV(group, dtype, StrCat("all_to_all_v", tag),
                                        [&](int from, int to) { return count + (from + to) % 3; }));
  // ... and with a silent rank: the last one sends and receives nothing, yet must take part
  // (Gloo's all_to_all_v exchanges empty messages with it).
  DDPKIT_RETURN_IF_ERROR(CheckAllToAllV(group, dtype,
                                        StrCat("all_to_all_v with a silent rank", tag),
                                        [&](int from, int to) -> int64_t {
                                          return from == size - 1 || to == size - 1 ? 0 : count + 1;
                                        }));

  return WaitFor(group.Barrier());
}

Tensor SampleSortInput(const SampleSortCase& c, int rank) {
  const int64_t n = c.rows_per_rank[rank], w = c.width;
  std::vector<int64_t> values(n * w);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t col = 0; col < w; ++col) {
      const uint64_t random = Mix(Mix(Mix(rank) + i) + col);
      int64_t& v = values[i * w + col];
      if (col == 0) {
        v = static_cast<int64_t>(random % c.key_range) - c.key_range / 2;  // negative keys too
      } else if (c.payload_range > 0) {
        v = static_cast<int64_t>(random % c.payload_range);
      } else {
        v = col == 1 ? rank : col == 2 ? i : 0;
      }
    }
  }
  return Tensor::FromVector<int64_t>(values, {n, w});
}

std::vector<SampleSortCase> SampleSortCases(int world) {
  auto sizes = [world](auto rows_of_rank) {
    std::vector<int64_t> rows(world);
    for (int r = 0; r < world; ++r) rows[r] = rows_of_rank(r);
    return rows;
  };
  return {
      {.name = "empty", .rows_per_rank = sizes([](int) { return 0; })},
      {.name = "one_row", .rows_per_rank = sizes([](int r) { return r == 0 ? 1 : 0; })},
      {.name = "small", .rows_per_rank = sizes([](int r) { return 3 + 2 * r; }), .key_range = 5},
      {.name = "large",
       .rows_per_rank =
           sizes([world](int r) { return 20000 * (r + 1) / (world * (world + 1) / 2); }),
       .width = 2,
       .key_range = 1'000'000'000},
      {.name = "skewed",
       .rows_per_rank = sizes([world](int r) { return r == world - 1 ? 6000 : 2; })},
      {.name = "rank_without_rows",
       .rows_per_rank = sizes([](int r) { return r == 1 ? 0 : 400 + 50 * r; })},
      {.name = "duplicate_rows",
       .rows_per_rank = sizes([](int) { return 500; }),
       .width = 2,
       .key_range = 3,
       .payload_range = 2},
      {.name = "all_equal_rows",
       .rows_per_rank = sizes([](int) { return 3000; }),
       .width = 1,
       .key_range = 1},
      {.name = "all_equal_keys",
       .rows_per_rank = sizes([](int r) { return 700 + 100 * r; }),
       .key_range = 1},
      {.name = "one_sample_per_rank",
       .rows_per_rank = sizes([](int r) { return 300 + 7 * r; }),
       .key_range = 50,
       .samples_per_rank = 1},
      {.name = "four_samples_skewed",
       .rows_per_rank = sizes([world](int r) { return r == 0 ? 2000 : 10 * r; }),
       .width = 1,
       .key_range = 20,
       .samples_per_rank = 4},
  };
}

absl::StatusOr<SortedShard> CheckSampleSort(ProcessGroup& group, const SampleSortCase& c) {
  const std::string where =
      StrCat("sample sort [", c.name, ", world ", group.size(), ", rank ", group.rank(), "]: ");
  const Tensor input = SampleSortInput(c, group.rank());
  const SampleSortOptions options{.samples_per_rank = c.samples_per_rank};
  DDPKIT_ASSIGN_OR_RETURN(SortedShard shard, SampleSort(group, input, options));
  DDPKIT_ASSIGN_OR_RETURN(SortedShard again, SampleSort(group, input, options));
  absl::Status status = CheckShardSizes(shard, c, group.rank(), shard.rows.size(0));
  if (status.ok()) status = CheckShardRows(shard, GlobalOrder(c), c.width);
  if (status.ok() && !SameShard(shard, again)) {
    status = absl::InternalError("a second run gave another shard");
  }
  if (!status.ok()) return absl::InternalError(StrCat(where, status.message()));
  return shard;
}

absl::Status CheckExchangeRows(ProcessGroup& group) {
  const int world = group.size(), rank = group.rank();
  // Rank r sends rows [r, i] for i < RowsOf(r) (rank 1 none), row i to rank (i² + r) % world:
  // squares leave some ranks nothing from some peers.
  auto rows_of = [](int r) -> int64_t { return r == 1 ? 0 : 5 + 4 * r; };
  auto destination = [world](int r, int64_t i) { return static_cast<int>((i * i + r) % world); };
  std::vector<int64_t> mine;
  std::vector<int> to;
  for (int64_t i = 0; i < rows_of(rank); ++i) {
    mine.insert(mine.end(), {rank, i});
    to.push_back(destination(rank, i));
  }
  DDPKIT_ASSIGN_OR_RETURN(
      const Tensor got,
      ExchangeRows(group, Tensor::FromVector<int64_t>(mine, {rows_of(rank), 2}), to));
  std::vector<double> expected;
  for (int r = 0; r < world; ++r) {
    for (int64_t i = 0; i < rows_of(r); ++i) {
      if (destination(r, i) == rank) expected.insert(expected.end(), {double(r), double(i)});
    }
  }
  if (got.dim() != 2 || got.size(1) != 2) {
    return absl::InternalError(StrCat("exchange rows: got ", ShapeString(got.shape())));
  }
  return Compare(StrCat("exchange rows [world ", world, ", rank ", rank, "]"), got, expected);
}

absl::Status CheckSampleSortRejectsMismatchedWidths(ProcessGroup& group) {
  const int world = group.size();
  std::vector<std::string> widths;
  for (int r = 0; r < world; ++r) widths.push_back(StrCat("rank ", r, ": w = ", r == 1 ? 3 : 2));
  const std::string expected =
      StrCat("sample sort: the ranks' rows differ in width (", absl::StrJoin(widths, ", "),
             "); every rank must pass int64 [n, w] rows with the same w, the same columns in the "
             "same order");
  absl::StatusOr<SortedShard> bad =
      SampleSort(group, Tensor::Zeros({4, group.rank() == 1 ? 3 : 2}, DType::kInt64));
  if (bad.status().code() != absl::StatusCode::kInvalidArgument ||
      bad.status().message() != expected) {
    return absl::InternalError(StrCat("rank ", group.rank(), ": a width mismatch gave ",
                                      bad.status().ToString(),
                                      ", expected InvalidArgument: ", expected));
  }
  // Nothing was exchanged, so the group still works.
  DDPKIT_ASSIGN_OR_RETURN(SortedShard shard,
                          SampleSort(group, Tensor::Zeros({4, 2}, DType::kInt64)));
  if (shard.global_rows != 4 * world) {
    return absl::InternalError(StrCat("after the mismatch: ", shard.global_rows, " rows"));
  }
  return absl::OkStatus();
}

int StoppedRankMode(ProcessGroup& group) {
  if (!group.Allreduce(Tensor::Full({8}, 1.0))->Wait().ok()) return 1;
  if (group.rank() == 2) std::raise(SIGSTOP);
  absl::Status status = group.Allreduce(Tensor::Full({8}, 1.0))->Wait();
  std::cout << "second allreduce: " << status << std::endl;
  return status.ok() ? 1 : 4;
}

int MismatchMode(ProcessGroup& group) {
  absl::Status status = group.Allreduce(Tensor::Full({group.rank() == 0 ? 4 : 5}, 1.0))->Wait();
  std::cout << "mismatched allreduce: " << status << std::endl;
  return status.code() == absl::StatusCode::kFailedPrecondition ? 0 : 1;
}

absl::Status CheckBackendContract(ProcessGroup& group, Device device) {
  const std::string backend(group.backend_name());
  // Rank r gives r + 1 everywhere: the mean (size + 1) / 2 is exact in float16.
  Tensor half = Tensor::Full({6}, group.rank() + 1.0).To(DType::kFloat16).To(device);
  DDPKIT_RETURN_IF_ERROR(group.Allreduce(half, ReduceOp::kAvg)->Wait());
  for (double v : half.ToDoubles()) {
    if (v != (group.size() + 1) / 2.0) {
      return absl::InternalError(
          StrCat(backend, ": float16 AVG gave ", v, ", expected ", (group.size() + 1) / 2.0));
    }
  }
  const Tensor t = Tensor::Full({4}, 1.0).To(device);
  const absl::Status status = group.Allreduce(t, static_cast<ReduceOp>(17))->Wait();
  const std::string message(status.message());
  for (const std::string& part : {backend + " backend does not handle",
                                  std::string("ALLREDUCE (reduce op #17) on float32")}) {
    if (status.code() != absl::StatusCode::kUnimplemented ||
        message.find(part) == std::string::npos) {
      return absl::InternalError(StrCat(backend, ": an unknown reduce op gave '", status.ToString(),
                                        "', expected Unimplemented with '", part, "'"));
    }
  }
  if (group.health().ok()) {
    return absl::InternalError(StrCat(backend, ": the group is still usable after a failure"));
  }
  return absl::OkStatus();
}

}  // namespace ddpkit::comm::testing_util
