// `ddpkit varlen`: data-parallel training on samples of different lengths — sorted across ranks,
// dealt round-robin, packed to a token budget, the LR scaled with each step's batch, under
// Join — with the imbalance before and after, and the gradient-averaging check.
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tools/cli/commands.h"
#include "tools/cli/job_flags.h"
#include "tools/cli/print_json.h"
#include "tools/jobs/varlen/plots.h"
#include "tools/jobs/varlen/varlen.h"

ABSL_FLAG(int64_t, samples, 4096, "synthetic samples");
ABSL_FLAG(int64_t, min_length, 4, "synthetic: the shortest sample, in tokens");
ABSL_FLAG(int64_t, max_length, 256, "synthetic: the longest sample, in tokens");
ABSL_FLAG(std::string, curriculum, "ascending",
          "training order of the globally sorted samples: ascending (curriculum, short first), "
          "descending (long first) or bucketed (length buckets in a seeded random order)");
ABSL_FLAG(int64_t, length_buckets, 8, "--curriculum bucketed: how many length buckets");
ABSL_FLAG(int64_t, max_tokens, 2048,
          "token budget per batch, padding counted (count x longest); 0: fixed batches of "
          "--batch-size");
ABSL_FLAG(std::string, lr_scaling, "linear",
          "scale each step's LR with its global batch: none, linear (Goyal et al.) or sqrt "
          "(Krizhevsky)");
ABSL_FLAG(int64_t, ref_batch_size, 0,
          "the global batch --lr is tuned for (0: the run's mean global batch)");
ABSL_FLAG(int32_t, epochs, 20, "passes over the layout, each under its own Join");
ABSL_FLAG(std::string, grad_weighting, "sample",
          "rank: each rank's mean loss, as DDP averages ranks (biased when batch sizes differ); "
          "sample: each rank's loss weighted by its share of the global batch (exact)");
ABSL_FLAG(int64_t, sort_samples, 64, "samples per rank the distributed sample sort draws");
ABSL_FLAG(std::string, dump_shards, "",
          "PREFIX: each rank writes the samples it trains on, in order, to "
          "PREFIX.rank<r>.safetensors (int64 ids and lengths)");
ABSL_DECLARE_FLAG(bool, no_join);

namespace ddpkit::cli {
namespace {

void PrintLayouts(const jobs::VarlenReport& r) {
  std::cout << "\n1. the layouts: tokens per rank per step (padding counted)\n"
            << absl::StrFormat("   %-16s %-16s %6s %-16s %9s %9s %9s %8s\n", "order", "batches",
                               "steps", "batches/rank", "max/mean", "worst", "sync cost",
                               "padding");
  for (const jobs::LayoutReport& l : r.layouts()) {
    std::cout << absl::StrFormat("   %-16s %-16s %6d %-16s %9.3f %9.3f %9.3f %7.1f%%%s\n", l.name(),
                                 l.batching(), l.steps(), absl::StrJoin(l.batches_per_rank(), " "),
                                 l.mean_imbalance(), l.worst_imbalance(), l.sync_cost(),
                                 100 * l.padding_waste(), l.trained() ? "  <- trained" : "");
  }
  std::cout << "   max/mean: the busiest rank's padded tokens over the mean rank's, averaged over "
               "steps; sync cost: the\n   steps' busiest ranks summed, over the work spread "
               "evenly (1 = balanced; a joined rank counts as idle)\n";
}

void PrintSort(const jobs::VarlenReport& r) {
  const jobs::SortReport& s = r.sort();
  std::cout << absl::StrFormat(
      "\n2. the distributed sample sort (%d samples per rank): samples per rank %s -> %s "
      "(bound %d)\n",
      s.samples_per_rank(), absl::StrJoin(s.input_sizes(), " "),
      absl::StrJoin(s.shard_sizes(), " "), s.shard_bound());
}

void PrintSteps(const jobs::VarlenReport& r) {
  std::cout << absl::StrFormat(
      "\n3. training, %d epoch(s) (%s order, LR %g for a global batch of %d, scaled %s; %s "
      "weighting%s)\n",
      r.epochs(), r.order(), r.lr(), r.ref_batch_size(), r.lr_scaling(), r.grad_weighting(),
      r.join() ? "; each epoch under Join" : "");
  std::cout << absl::StrFormat("   %5s  %-20s %7s %8s %10s %14s\n", "step", "batch per rank",
                               "global", "longest", "lr", "loss, epoch 0");
  for (const jobs::StepReport& s : r.steps()) {
    if (s.epoch() > 0) break;
    std::cout << absl::StrFormat("   %5d  %-20s %7d %8d %10.4g %14.4f\n", s.step(),
                                 absl::StrJoin(s.batch_sizes(), " "), s.global_batch(), s.longest(),
                                 s.lr(), s.loss());
  }
  // Each epoch's loss: the mean over its steps, weighted by their global batches.
  std::vector<double> sums(r.epochs()), samples(r.epochs());
  for (const jobs::StepReport& s : r.steps()) {
    sums[s.epoch()] += s.loss() * static_cast<double>(s.global_batch());
    samples[s.epoch()] += static_cast<double>(s.global_batch());
  }
  std::cout << "   mean loss per epoch:";
  for (int e = 0; e < r.epochs(); ++e) {
    std::cout << absl::StrFormat(" %.4f", samples[e] > 0 ? sums[e] / samples[e] : 0.0);
  }
  std::cout << "\n";
}

void PrintCheck(const jobs::VarlenReport& r) {
  const jobs::WeightingCheck& c = r.weighting_check();
  std::cout << "\n4. the averaging pitfall: DDP's gradient against one process on the same "
               "global batch\n";
  if (c.step() < 0) {
    std::cout << "   skipped: no step has a batch on every rank\n";
    return;
  }
  std::cout << absl::StrFormat(
      "   step %d, batch sizes %s: max error relative to the largest gradient\n"
      "     rank weighting (each rank's mean loss, DDP's average): %.3e  (best-fit scale %.4f)\n"
      "     sample weighting (summed loss x world / global batch): %.3e\n",
      c.step(), absl::StrJoin(c.batch_sizes(), " "), c.rank_error(), c.rank_scale(),
      c.sample_error());
}

void PrintStory(const jobs::VarlenReport& r) {
  std::cout << absl::StrFormat(
                   "ddpkit varlen: %s on %d ranks (%s); %d samples, %d tokens, lengths %d-%d\n",
                   r.model(), r.world_size(), r.backend(), r.samples(), r.tokens(), r.shortest(),
                   r.longest())
            << "data: " << r.data() << "\n";
  PrintLayouts(r);
  PrintSort(r);
  PrintSteps(r);
  PrintCheck(r);
  std::cout << "\nfinal models identical on all ranks: " << (r.models_identical() ? "yes" : "NO")
            << absl::StrFormat("\nrank 0's final accuracy over every sample: %.1f%%\n",
                               100 * r.final_accuracy());
  if (!r.shards_prefix().empty()) {
    std::cout << "each rank's training order: " << r.shards_prefix()
              << ".rank<r>.safetensors (ids, lengths)\n";
  }
}

absl::StatusOr<jobs::VarlenConfig> ConfigFromFlags() {
  jobs::VarlenConfig config;
  DDPKIT_RETURN_IF_ERROR(DdpTrainingFromFlags(config));
  if (!FlagDiffersFromDefault("model")) config.model = jobs::VarlenConfig().model;
  if (!FlagDiffersFromDefault("batch_size")) config.batch_size = jobs::VarlenConfig().batch_size;
  if (!FlagDiffersFromDefault("lr")) config.lr = jobs::VarlenConfig().lr;
  if (!FlagDiffersFromDefault("world_size"))
    config.world.world_size = jobs::VarlenConfig().world.world_size;
  config.data_path = absl::GetFlag(FLAGS_data);
  config.synthetic.samples = absl::GetFlag(FLAGS_samples);
  config.synthetic.min_length = absl::GetFlag(FLAGS_min_length);
  config.synthetic.max_length = absl::GetFlag(FLAGS_max_length);
  DDPKIT_ASSIGN_OR_RETURN(config.curriculum.order,
                          jobs::ParseCurriculumOrder(absl::GetFlag(FLAGS_curriculum)));
  config.curriculum.buckets = absl::GetFlag(FLAGS_length_buckets);
  config.curriculum.seed = config.seed;
  config.max_tokens = absl::GetFlag(FLAGS_max_tokens);
  DDPKIT_ASSIGN_OR_RETURN(config.lr_scaling, jobs::ParseLrScaling(absl::GetFlag(FLAGS_lr_scaling)));
  config.ref_batch_size = absl::GetFlag(FLAGS_ref_batch_size);
  config.epochs = absl::GetFlag(FLAGS_epochs);
  DDPKIT_ASSIGN_OR_RETURN(config.grad_weighting,
                          jobs::ParseGradWeighting(absl::GetFlag(FLAGS_grad_weighting)));
  config.sort.samples_per_rank = absl::GetFlag(FLAGS_sort_samples);
  config.dump_shards_prefix = absl::GetFlag(FLAGS_dump_shards);
  config.use_join = !absl::GetFlag(FLAGS_no_join);
  return config;
}

int RunVarlenCommand(const std::vector<std::string>&) {
  absl::StatusOr<jobs::VarlenConfig> config = ConfigFromFlags();
  if (!config.ok()) return Fail("varlen", config.status());
  absl::StatusOr<jobs::VarlenReport> report = jobs::RunVarlen(*config);
  if (!report.ok()) {
    const int exit = Fail("varlen", report.status());
    if (exit == kExitFailure && !config->use_join) {
      std::cerr << "\nThe ranks hold different numbers of batches: without Join the ranks that "
                   "ran out left their loops while the others still needed them in a collective. "
                   "Drop --no-join to let Join shadow those collectives.\n";
    }
    return exit;
  }
  if (report->left_without_join()) {
    std::cerr << "ddpkit varlen: this rank ran out of batches and left without Join; the ranks "
                 "still training will fail in their next collective\n";
    return kExitOk;
  }
  if (report->rank() != 0) return kExitOk;  // under gloo, rank 0's process reports
  const std::string out = absl::GetFlag(FLAGS_out);
  if (!out.empty()) {
    if (absl::Status s = jobs::WriteVarlenPlots(*report, out); !s.ok()) return Fail("varlen", s);
  }
  return EmitReport<jobs::VarlenReport>(
      *report, absl::GetFlag(FLAGS_json), [&](const jobs::VarlenReport& r) {
        PrintStory(r);
        if (!out.empty()) {
          std::cout << "wrote " << out << "/imbalance.svg and " << out << "/steps.csv\n";
        }
        if (!config->save_weights_path.empty()) {
          std::cout << "saved rank 0's weights to " << config->save_weights_path << "\n";
        }
      });
}

}  // namespace

Subcommand VarlenSubcommand() {
  std::vector<std::string> flags = {
      "data",           "samples",    "min_length",  "max_length",     "curriculum",
      "length_buckets", "max_tokens", "lr_scaling",  "ref_batch_size", "grad_weighting",
      "sort_samples",   "epochs",     "dump_shards", "no_join",        "out"};
  for (const std::string& name : kDdpTrainingFlagNames) {
    if (name != "trace" && name != "weights" && name != "sync_batchnorm") flags.push_back(name);
  }
  return {.name = "varlen",
          .summary =
              "variable-length samples: sorted across ranks, token-budget batches, LR "
              "scaling, Join, and DDP's averaging pitfall",
          .usage =
              "ddpkit varlen [--world-size N | --backend gloo under ddpkit launch] "
              "[--data FILE.safetensors | --samples N --min-length A --max-length B] "
              "[--curriculum ascending|descending|bucketed] [--max-tokens T] "
              "[--lr-scaling none|linear|sqrt] [--ref-batch-size B] "
              "[--grad-weighting rank|sample] [--no-join] [--dump-shards PREFIX] [--out DIR] "
              "[--json] [train and DDP flags]",
          .flag_names = flags,
          .own_defaults = {{"model", jobs::VarlenConfig().model},
                           {"batch_size", "16"},
                           {"lr", "1"},
                           {"world_size", "4"}},
          .run = RunVarlenCommand};
}

}  // namespace ddpkit::cli
