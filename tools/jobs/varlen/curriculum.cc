#include "tools/jobs/varlen/curriculum.h"

#include <algorithm>
#include <numeric>

#include "autograd/base/error.h"
#include "autograd/random.h"

namespace ddpkit::jobs {
namespace {

// Fisher-Yates with the repo's seeded generator: the same permutation on every rank.
std::vector<int64_t> SeededPermutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  Generator gen(seed);
  for (int64_t i = n - 1; i > 0; --i) {
    std::swap(p[i], p[gen.NextU64() % static_cast<uint64_t>(i + 1)]);
  }
  return p;
}

}  // namespace

std::vector<int64_t> ShuffledShare(int64_t samples, int world, int rank, uint64_t seed) {
  const std::vector<int64_t> order = SeededPermutation(samples, seed);
  std::vector<int64_t> share;
  for (int64_t q = rank; q < samples; q += world) share.push_back(order[q]);
  return share;
}

absl::StatusOr<CurriculumOrder> ParseCurriculumOrder(std::string_view name) {
  for (CurriculumOrder order :
       {CurriculumOrder::kAscending, CurriculumOrder::kDescending, CurriculumOrder::kBucketed}) {
    if (name == CurriculumOrderName(order)) return order;
  }
  return absl::InvalidArgumentError(StrCat(
      "--curriculum must be ascending, descending or bucketed, got '", std::string(name), "'"));
}

std::string_view CurriculumOrderName(CurriculumOrder order) {
  switch (order) {
    case CurriculumOrder::kAscending: return "ascending";
    case CurriculumOrder::kDescending: return "descending";
    case CurriculumOrder::kBucketed: return "bucketed";
  }
  return "?";
}

Curriculum::Curriculum(int64_t samples, int world, const CurriculumOptions& options)
    : samples_(samples), world_(world), options_(options) {
  DDPKIT_CHECK(world >= 1 && samples >= 0, "[curriculum] bad sizes: ", samples, " samples, world ",
               world);
  if (options.order != CurriculumOrder::kBucketed) return;
  DDPKIT_CHECK(options.buckets >= 1, "[curriculum] --length-buckets must be >= 1, got ",
               options.buckets);
  const int64_t per_bucket = (samples + options.buckets - 1) / options.buckets;
  bucket_rows_ = std::max<int64_t>(world, (per_bucket + world - 1) / world * world);
  const int64_t count = (samples + bucket_rows_ - 1) / bucket_rows_;
  // The buckets in a seeded order; each starts where the ones before it (in that order) end.
  const std::vector<int64_t> order = SeededPermutation(count, options.seed);
  bucket_start_.assign(static_cast<size_t>(count), 0);
  int64_t next = 0;
  for (int64_t bucket : order) {
    bucket_start_[bucket] = next;
    next += std::min(bucket_rows_, samples - bucket * bucket_rows_);
  }
}

int64_t Curriculum::TrainingPosition(int64_t sorted_position) const {
  DDPKIT_CHECK(sorted_position >= 0 && sorted_position < samples_, "[curriculum] position ",
               sorted_position, " outside [0, ", samples_, ")");
  switch (options_.order) {
    case CurriculumOrder::kAscending: return sorted_position;
    case CurriculumOrder::kDescending: return samples_ - 1 - sorted_position;
    case CurriculumOrder::kBucketed:
      return bucket_start_[sorted_position / bucket_rows_] + sorted_position % bucket_rows_;
  }
  return sorted_position;
}

}  // namespace ddpkit::jobs
