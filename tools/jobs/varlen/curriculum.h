// Which samples each rank trains on, and in what order: the two layouts `ddpkit varlen`
// compares.
//
// Before — PyTorch's DistributedSampler: one seeded permutation of the sample ids, rank r
// taking positions r, r + world, ...; a curriculum then sorts each rank's share by length on
// its own. Every rank holds a random mix, so at step t the ranks' t-th batches differ in
// length by chance, and the order depends on the seed and the world size.
//
// After — the recipe: all samples sorted by length across ranks (comm/ops/sample_sort.h), then
// the sorted order dealt out round-robin: the sample at training position q goes to rank
// q % world, as its (q / world)-th sample. At every step each rank holds neighbours in the
// global order, so similar lengths.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ddpkit::jobs {

// Ids 0..samples-1 in DistributedSampler(shuffle=True, seed) order, this rank's share: positions
// rank, rank + world, ... of the permutation. Without the sampler's padding (which repeats
// samples to even the counts): under Join the ranks may hold different counts.
std::vector<int64_t> ShuffledShare(int64_t samples, int world, int rank, uint64_t seed);

enum class CurriculumOrder {
  kAscending,   // shortest first: the curriculum
  kDescending,  // longest first: the largest batches (and any out-of-memory) come at once
  kBucketed,    // the sorted order cut into length buckets, the buckets in a seeded random
                // order: no curriculum, but every step still balanced across ranks
};
absl::StatusOr<CurriculumOrder> ParseCurriculumOrder(std::string_view name);
std::string_view CurriculumOrderName(CurriculumOrder order);

struct CurriculumOptions {
  CurriculumOrder order = CurriculumOrder::kAscending;
  int64_t buckets = 8;  // kBucketed: how many length buckets
  uint64_t seed = 0;    // kBucketed: the buckets' order
};

// Maps a sample's position in the global ascending-length order to its training position q
// (then rank q % world, local index q / world). The same on every rank: a function of the
// sample count, the world size and the options only.
class Curriculum {
 public:
  Curriculum(int64_t samples, int world, const CurriculumOptions& options);
  int64_t TrainingPosition(int64_t sorted_position) const;
  int RankOf(int64_t training_position) const {
    return static_cast<int>(training_position % world_);
  }

 private:
  int64_t samples_;
  int world_;
  CurriculumOptions options_;
  int64_t bucket_rows_ = 1;            // kBucketed: a multiple of world, so ranks stay aligned
  std::vector<int64_t> bucket_start_;  // kBucketed: each sorted bucket's first training position
};

}  // namespace ddpkit::jobs
