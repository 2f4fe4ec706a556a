#include "comm/ops/sample_sort.h"

#include <algorithm>
#include <compare>
#include <numeric>
#include <ranges>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_join.h"
#include "autograd/base/error.h"

namespace ddpkit::comm {
namespace {

// Lexicographic over w columns.
std::strong_ordering CompareRows(const int64_t* a, const int64_t* b, int64_t w) {
  return std::lexicographical_compare_three_way(a, a + w, b, b + w);
}

// A row's place in the total order: its values, then its source rank, then its index among
// that rank's locally sorted rows. The stable local sort keeps equal rows in source-position
// order, so that index orders ties exactly as the source position does.
struct Place {
  const int64_t* values;
  int64_t rank;
  int64_t index;
};

bool Before(const Place& a, const Place& b, int64_t w) {
  if (auto c = CompareRows(a.values, b.values, w); c != 0) return c < 0;
  return std::tie(a.rank, a.index) < std::tie(b.rank, b.index);
}

// The rows in ascending lexicographic order; equal rows keep their order (steps 1 and 6).
Tensor StableSortRows(const Tensor& rows) {
  const int64_t n = rows.size(0), w = rows.size(1);
  const int64_t* in = rows.data<int64_t>();
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return CompareRows(in + a * w, in + b * w, w) < 0;
  });
  Tensor sorted = Tensor::Empty({n, w}, DType::kInt64);
  int64_t* out = sorted.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) std::copy_n(in + order[i] * w, w, out + i * w);
  return sorted;
}

// A failed collective's own diagnosis, prefixed with the step it broke.
absl::Status WaitFor(const std::shared_ptr<Work>& work, std::string_view op,
                     std::string_view what) {
  absl::Status status = work->Wait();
  if (status.ok()) return status;
  return absl::Status(status.code(), StrCat(op, ": ", what, " failed: ", status.message()));
}

absl::Status CheckRows(const Tensor& rows, std::string_view op) {
  if (rows.defined() && rows.dtype() == DType::kInt64 && rows.dim() == 2 && rows.size(1) >= 1 &&
      rows.device().is_cpu()) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      StrCat(op,
             ": rows must be an int64 [n, w] tensor on the host with w >= 1 (column 0 the key), "
             "got ",
             rows.defined() ? StrCat(DTypeName(rows.dtype()), ShapeString(rows.shape()), " on ",
                                     rows.device().ToString())
                            : "an undefined tensor"));
}

absl::Status CheckDestinations(const std::vector<int>& destination, int64_t rows, int world) {
  if (static_cast<int64_t>(destination.size()) != rows) {
    return absl::InvalidArgumentError(
        StrCat("exchange rows: got ", rows, " rows but ", destination.size(),
               " destination(s); give every row one destination rank"));
  }
  for (size_t i = 0; i < destination.size(); ++i) {
    if (destination[i] < 0 || destination[i] >= world) {
      return absl::InvalidArgumentError(StrCat("exchange rows: destination[", i, "] is ",
                                               destination[i], ", not a rank in [0, ", world, ")"));
    }
  }
  return absl::OkStatus();
}

// What every rank tells the others first: enough to size each later collective, and to fail
// alike on bad input instead of leaving peers waiting in a collective this rank never issues.
struct Header {
  int64_t rows = 0;
  int64_t width = -1;   // -1: this rank's input is invalid
  int64_t samples = 0;  // SampleSort's s_i = min(s, n_i); 0 for ExchangeRows
};

// Allgathers the headers. Every rank fails alike when some rank's input is invalid (`local`:
// this rank's verdict, which keeps its own detail) or the widths differ.
absl::StatusOr<std::vector<Header>> ShareHeaders(ProcessGroup& group, std::string_view op,
                                                 const absl::Status& local, const Header& mine) {
  const int world = group.size();
  Tensor all = Tensor::Empty({3 * world}, DType::kInt64);
  DDPKIT_RETURN_IF_ERROR(WaitFor(
      group.Allgather(Tensor::FromVector<int64_t>({mine.rows, mine.width, mine.samples}, {3}), all),
      op, "sharing the row counts and widths"));
  std::vector<Header> headers(world);
  std::vector<int> invalid;
  for (int r = 0; r < world; ++r) {
    const int64_t* h = all.data<int64_t>() + 3 * r;
    headers[r] = {h[0], h[1], h[2]};
    if (h[1] < 0) invalid.push_back(r);
  }
  if (!local.ok()) return local;
  if (!invalid.empty()) {
    return absl::InvalidArgumentError(
        StrCat(op, ": rank(s) ", absl::StrJoin(invalid, ", "),
               " passed invalid input (the error on that rank says why); no rank exchanged any "
               "rows"));
  }
  if (std::ranges::any_of(headers, [&](const Header& h) { return h.width != mine.width; })) {
    std::vector<std::string> widths;
    for (int r = 0; r < world; ++r) {
      widths.push_back(StrCat("rank ", r, ": w = ", headers[r].width));
    }
    return absl::InvalidArgumentError(
        StrCat(op, ": the ranks' rows differ in width (", absl::StrJoin(widths, ", "),
               "); every rank must pass int64 [n, w] rows with the same w, the same columns in "
               "the same order"));
  }
  return headers;
}

// Step 2: s blocks, block k being the sorted rows [k·n/s, (k+1)·n/s) — none empty, none over
// ceil(n/s) rows — each represented by its first row. A sample is
// [values..., rank, index, weight]: its place in the total order, then its block's size.
Tensor TakeSamples(const Tensor& sorted, int64_t s, int rank) {
  const int64_t n = sorted.size(0), w = sorted.size(1);
  Tensor samples = Tensor::Empty({s, w + 3}, DType::kInt64);
  for (int64_t k = 0; k < s; ++k) {
    const int64_t begin = k * n / s, end = (k + 1) * n / s;
    int64_t* sample = samples.data<int64_t>() + k * (w + 3);
    std::copy_n(sorted.data<int64_t>() + begin * w, w, sample);
    sample[w] = rank;
    sample[w + 1] = begin;
    sample[w + 2] = end - begin;
  }
  return samples;
}

// Steps 3-4: orders every rank's samples and picks world - 1 splitters at the weighted
// quantiles: splitter t is the first sample with at least t·N/world weight before it, null when
// there is none (every row goes below it). Returns pointers into `samples`.
std::vector<const int64_t*> PickSplitters(const Tensor& samples, int64_t w, int world,
                                          int64_t total) {
  const int64_t m = samples.size(0), stride = w + 3;
  const int64_t* data = samples.data<int64_t>();
  std::vector<int64_t> order(m);
  std::iota(order.begin(), order.end(), int64_t{0});
  // [values..., rank, index] is a sample's place: lexicographic over w + 2 columns, all distinct.
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return CompareRows(data + a * stride, data + b * stride, w + 2) < 0;
  });
  std::vector<const int64_t*> splitters;
  int64_t k = 0, before = 0;             // the weight of the samples before order[k]
  for (int64_t t = 1; t < world; ++t) {  // before >= t·N/world, in integers: no rounding
    for (; k < m && before * world < t * total; ++k) before += data[order[k] * stride + w + 2];
    splitters.push_back(k < m ? data + order[k] * stride : nullptr);
  }
  return splitters;
}

// Step 5: how many of the sorted local rows come before `splitter` (null: all of them). The
// rows being sorted, it is a binary search.
int64_t RowsBefore(const Tensor& sorted, int rank, const int64_t* splitter) {
  const int64_t n = sorted.size(0), w = sorted.size(1);
  if (splitter == nullptr) return n;
  const int64_t* rows = sorted.data<int64_t>();
  const Place place{splitter, splitter[w], splitter[w + 1]};
  auto positions = std::views::iota(int64_t{0}, n);
  return std::ranges::partition_point(positions,
                                      [&](int64_t j) {
                                        return Before({rows + j * w, rank, j}, place, w);
                                      }) -
         positions.begin();
}

// Rank t gets the local rows from splitter t (inclusive) up to splitter t + 1.
std::vector<int64_t> CountPerRank(const Tensor& sorted, int rank,
                                  const std::vector<const int64_t*>& splitters) {
  std::vector<int64_t> counts;
  int64_t below = 0;  // rows before the current rank's lower splitter
  for (const int64_t* s : splitters) {
    const int64_t cut = RowsBefore(sorted, rank, s);
    counts.push_back(cut - below);
    below = cut;
  }
  counts.push_back(sorted.size(0) - below);
  return counts;
}

// The exchange behind both entry points: `rows` holds the rows for each rank contiguously, in
// rank order (send[j] rows for rank j). The counts go first (an all_to_all: AllToAllV with one
// element per peer) so that each rank can size what it receives.
absl::StatusOr<Tensor> SendRows(ProcessGroup& group, std::string_view op, const Tensor& rows,
                                const std::vector<int64_t>& send) {
  const int world = group.size();
  const int64_t w = rows.size(1);
  Tensor recv = Tensor::Empty({world}, DType::kInt64);
  const std::vector<int64_t> ones(world, 1);
  DDPKIT_RETURN_IF_ERROR(
      WaitFor(group.AllToAllV(Tensor::FromVector<int64_t>(send, {world}), recv, ones, ones), op,
              "exchanging the counts"));
  std::vector<int64_t> send_elements, recv_elements;
  int64_t received = 0;
  for (int r = 0; r < world; ++r) {
    send_elements.push_back(send[r] * w);
    recv_elements.push_back(recv.data<int64_t>()[r] * w);
    received += recv.data<int64_t>()[r];
  }
  Tensor out = Tensor::Empty({received, w}, DType::kInt64);
  DDPKIT_RETURN_IF_ERROR(
      WaitFor(group.AllToAllV(rows.Flatten(), out.Flatten(), send_elements, recv_elements), op,
              "exchanging the rows"));
  return out;
}

}  // namespace

absl::StatusOr<SortedShard> SampleSort(ProcessGroup& group, const Tensor& rows,
                                       const SampleSortOptions& options) {
  constexpr std::string_view kOp = "sample sort";
  const int world = group.size(), rank = group.rank();
  absl::Status valid = CheckRows(rows, kOp);
  if (valid.ok() && options.samples_per_rank < 1) {
    valid = absl::InvalidArgumentError(
        StrCat(kOp, ": samples_per_rank must be at least 1, got ", options.samples_per_rank));
  }
  Header mine;
  if (valid.ok()) {
    mine = {rows.size(0), rows.size(1), std::min(options.samples_per_rank, rows.size(0))};
  }
  DDPKIT_ASSIGN_OR_RETURN(const std::vector<Header> headers, ShareHeaders(group, kOp, valid, mine));
  SortedShard shard;
  std::vector<int64_t> sample_elements;
  int64_t samples = 0;
  for (const Header& h : headers) {
    shard.input_sizes.push_back(h.rows);
    shard.global_rows += h.rows;
    sample_elements.push_back(h.samples * (mine.width + 3));
    samples += h.samples;
  }

  // Steps 1-3: sort locally, sample, gather every rank's samples (each sends its own count).
  const Tensor sorted = StableSortRows(rows);
  Tensor all_samples = Tensor::Empty({samples, mine.width + 3}, DType::kInt64);
  DDPKIT_RETURN_IF_ERROR(WaitFor(group.AllgatherV(TakeSamples(sorted, mine.samples, rank).Flatten(),
                                                  all_samples.Flatten(), sample_elements),
                                 kOp, "gathering the samples"));

  // Steps 4-6: split, exchange, merge. The segments arrive in source-rank order, each sorted,
  // so a stable sort leaves equal rows in (source rank, source position) order.
  const std::vector<int64_t> send =
      CountPerRank(sorted, rank, PickSplitters(all_samples, mine.width, world, shard.global_rows));
  DDPKIT_ASSIGN_OR_RETURN(const Tensor received, SendRows(group, kOp, sorted, send));
  shard.rows = StableSortRows(received);

  // Every rank's shard size, for the offsets a caller numbers its rows by.
  Tensor sizes = Tensor::Empty({world}, DType::kInt64);
  DDPKIT_RETURN_IF_ERROR(
      WaitFor(group.Allgather(Tensor::FromVector<int64_t>({shard.rows.size(0)}, {1}), sizes), kOp,
              "sharing the shard sizes"));
  shard.shard_sizes.assign(sizes.data<int64_t>(), sizes.data<int64_t>() + world);
  for (int r = 0; r < rank; ++r) shard.global_offset += shard.shard_sizes[r];
  return shard;
}

int64_t SampleSortShardBound(const std::vector<int64_t>& input_sizes, int64_t samples_per_rank) {
  DDPKIT_CHECK(!input_sizes.empty() && samples_per_rank >= 1,
               "[SampleSortShardBound] expects one input size per rank and samples_per_rank >= 1, "
               "got ",
               input_sizes.size(), " sizes and samples_per_rank ", samples_per_rank);
  const int64_t world = static_cast<int64_t>(input_sizes.size());
  int64_t total = 0, largest_block = 0, blocks = 0;
  for (int64_t n : input_sizes) {
    DDPKIT_CHECK(n >= 0, "[SampleSortShardBound] input sizes must be >= 0, got ", n);
    const int64_t s = std::min(samples_per_rank, n);
    const int64_t b = n == 0 ? 0 : (n + s - 1) / s;  // b_i = ceil(n_i / s_i)
    total += n;
    largest_block = std::max(largest_block, b);
    blocks += b;
  }
  return (total + world - 1) / world + largest_block + blocks;
}

absl::StatusOr<Tensor> ExchangeRows(ProcessGroup& group, const Tensor& rows,
                                    const std::vector<int>& destination) {
  constexpr std::string_view kOp = "exchange rows";
  const int world = group.size();
  absl::Status valid = CheckRows(rows, kOp);
  if (valid.ok()) valid = CheckDestinations(destination, rows.size(0), world);
  Header mine;
  if (valid.ok()) mine = {rows.size(0), rows.size(1), 0};
  DDPKIT_RETURN_IF_ERROR(ShareHeaders(group, kOp, valid, mine).status());

  // Group the rows by destination, each group in send order (a counting sort).
  const int64_t n = mine.rows, w = mine.width;
  std::vector<int64_t> send(world, 0), next(world, 0);
  for (int d : destination) ++send[d];
  std::exclusive_scan(send.begin(), send.end(), next.begin(), int64_t{0});
  Tensor grouped = Tensor::Empty({n, w}, DType::kInt64);
  for (int64_t i = 0; i < n; ++i) {
    std::copy_n(rows.data<int64_t>() + i * w, w,
                grouped.data<int64_t>() + next[destination[i]]++ * w);
  }
  return SendRows(group, kOp, grouped, send);
}

}  // namespace ddpkit::comm
