// What `bench ddp` and `bench paper` share: the model they time, named by any spec of the zoo,
// and one rank's batch of that model's synthetic data.
#include "tools/jobs/bench/bench.h"
#include "tools/jobs/dataset.h"
#include "tools/jobs/training.h"

namespace ddpkit::jobs {

absl::StatusOr<models::ModelSpec> ParseBenchModel(const std::string& model, int batch_size,
                                                  const comm::WorldSpec& world) {
  DDPKIT_ASSIGN_OR_RETURN(models::ModelSpec spec, models::ParseModel(model));
  DDPKIT_RETURN_IF_ERROR(RequirePositive("--batch-size", batch_size));
  const int ranks_here = comm::InfoOf(world.backend).ranks_share_process ? world.world_size : 1;
  // Each rank holds two models at a time: bench ddp's DDP one beside its local reference.
  DDPKIT_RETURN_IF_ERROR(CheckFitsInMemory(2 * EstimateRankBytes(spec, batch_size, 0), ranks_here,
                                           "--model, --batch-size and --world-size"));
  return spec;
}

// Seeded by the rank, so that the ranks' gradients differ as in training.
BenchBatch MakeBenchBatch(const models::ModelSpec& model, int64_t rows, int rank) {
  ClassificationData data = MakeSyntheticData(rows, model.io, static_cast<uint64_t>(rank) + 1);
  return {std::move(data.x), std::move(data.y)};
}

Tensor BenchLoss(nn::Module& model, const BenchBatch& batch) {
  return TrainingLoss("ce", model.Forward(batch.x), batch.y);
}

}  // namespace ddpkit::jobs
