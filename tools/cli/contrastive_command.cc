// `ddpkit contrastive`: reproduces what each all-gather backward does to a CLIP loss under DDP —
// a gradient check against one process on the whole batch, training curves, logit memory.
#include <algorithm>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tools/cli/comm_flags.h"
#include "tools/cli/commands.h"
#include "tools/cli/ddp_flags.h"
#include "tools/cli/job_flags.h"
#include "tools/cli/print_json.h"
#include "tools/jobs/contrastive/contrastive.h"

ABSL_FLAG(std::string, layout, "both",
          "local ([b, B] logits: local rows against gathered columns), global ([B, B] on every "
          "rank) or both");
ABSL_FLAG(std::string, gather, "all",
          "the all-gather's backward: sum, allreduce_slice, slice, none, avg, a comma-separated "
          "list of them (slice,sum), or all");

// Real towers, both or neither (default: the MLPs). The ResNet's fc and the GPT's lm_head are
// not part of them: each tower's features (pooled; ln_f at the last token) are projected.
ABSL_FLAG(std::string, image_tower, "", "a ResNet image tower, resnet:...; with --text-tower");
ABSL_FLAG(std::string, text_tower, "", "a GPT text tower, gpt:...; with --image-tower");

namespace ddpkit::cli {
namespace {

// `device`: where the ranks ran; named in the heading when it is not the host.
void PrintReport(const jobs::ContrastiveReport& r, Device device) {
  const std::string towers = r.image_tower() == "mlp" ? "two MLP towers"
                                                      : StrCat("image tower ", r.image_tower(),
                                                               ", text tower ", r.text_tower());
  std::cout << absl::StrFormat(
      "ddpkit contrastive: CLIP loss, %s, %d ranks (%s%s), %d pairs per rank "
      "(B = %d), different data on every rank; %s, static graph\n\n",
      towers, r.world_size(), r.backend(), device.is_cpu() ? "" : ", on " + device.ToString(),
      r.batch_size(), r.global_batch(), r.pytorch_rules());
  std::cout << absl::StrFormat(
                   "1. gradient check: one DDP backward vs one process on the concatenated batch "
                   "(rows per rank %s)\n",
                   absl::StrJoin(r.rows_per_rank(), " "))
            << absl::StrFormat("   %-7s %-16s %14s %10s %12s %14s\n", "layout", "gather",
                               "rel_error", "scale", "residual", "logit_scale_err");
  for (const jobs::GradientCheckRow& row : r.gradient_check()) {
    std::string verdict;
    if (row.encoder_rel_error() < 1e-9) {
      verdict = "exact";
    } else if (row.encoder_scale() == 0) {
      verdict = "no encoder gradient";
    } else if (row.encoder_residual() < 1e-9) {
      verdict = absl::StrFormat("a rescale by %.4g (1/%.3g)", row.encoder_scale(),
                                1 / row.encoder_scale());
    } else {
      verdict = "biased: not a rescale";
    }
    std::cout << absl::StrFormat("   %-7s %-16s %14.3e %10.4f %12.3e %14.3e  %s\n", row.layout(),
                                 row.gather(), row.encoder_rel_error(), row.encoder_scale(),
                                 row.encoder_residual(), row.logit_scale_rel_error(), verdict);
  }
  if (r.training_size() > 0) {
    std::cout
        << absl::StrFormat(
               "\n2. training, %d steps of %s (lr %g): global loss and held-out top-1 retrieval\n",
               r.steps(), r.optimizer(), r.lr())
        << absl::StrFormat("   %-7s %-16s %10s %10s %10s %12s\n", "layout", "gather", "loss@1",
                           "loss@end", "top-1", "exp(t)");
    for (const jobs::TrainingCurve& c : r.training()) {
      std::cout << absl::StrFormat(
          "   %-7s %-16s %10.4f %10.4f %9.1f%% %12.3f\n", c.layout().empty() ? "-" : c.layout(),
          c.gather(), c.losses_size() ? c.losses(0) : 0.0,
          c.losses_size() ? c.losses(c.losses_size() - 1) : 0.0,
          c.accuracy_size() ? 100 * c.accuracy(c.accuracy_size() - 1) : 0.0,
          c.logit_scale_size() ? c.logit_scale(c.logit_scale_size() - 1) : 0.0);
    }
  }
  std::cout << "\n3. logits per rank at these sizes\n";
  for (const jobs::LogitMemory& m : r.logit_memory()) {
    std::cout << absl::StrFormat("   %-7s %12d elements (%s), %d bytes\n", m.layout(),
                                 m.elements_per_rank(), m.layout() == "local" ? "2·b·B" : "B²",
                                 m.bytes_per_rank());
  }
}

// `text` lists values (parsed by `parse`, comma-separated, each once) or, spelled `every`,
// keeps `values` as they are.
template <typename T>
absl::Status ListOrEvery(std::string_view flag, const std::string& text, std::string_view every,
                         absl::StatusOr<T> (*parse)(std::string_view), std::vector<T>& values) {
  if (text == every) return absl::OkStatus();
  std::vector<T> chosen;
  for (const std::string& item : std::vector<std::string>(absl::StrSplit(text, ','))) {
    absl::StatusOr<T> one = parse(item);
    if (!one.ok()) {
      return absl::InvalidArgumentError(StrCat(flag, ": ", one.status().message(),
                                               " (or a comma-separated list of them, or ", every,
                                               ")"));
    }
    if (std::find(chosen.begin(), chosen.end(), *one) != chosen.end()) {
      return absl::InvalidArgumentError(StrCat(flag, ": '", item, "' is listed twice"));
    }
    chosen.push_back(*one);
  }
  values = std::move(chosen);
  return absl::OkStatus();
}

absl::StatusOr<jobs::ContrastiveConfig> ConfigFromFlags() {
  jobs::ContrastiveConfig config;
  DDPKIT_RETURN_IF_ERROR(WorldFromFlags(config.world));
  DDPKIT_RETURN_IF_ERROR(ListOrEvery("--layout", absl::GetFlag(FLAGS_layout), "both",
                                     jobs::ParseContrastiveLayout, config.layouts));
  DDPKIT_RETURN_IF_ERROR(ListOrEvery("--gather", absl::GetFlag(FLAGS_gather), "all",
                                     comm::ParseGatherBackward, config.gathers));
  // Defaults of its own for the flags it shares with train: 200 steps, lr 0.5 (sgd), 0.003 (adam).
  config.steps = FlagDiffersFromDefault("steps") ? absl::GetFlag(FLAGS_steps) : 200;
  config.batch_size = absl::GetFlag(FLAGS_batch_size);
  config.optimizer = absl::GetFlag(FLAGS_optimizer);
  config.lr = FlagDiffersFromDefault("lr") ? absl::GetFlag(FLAGS_lr)
                                           : (config.optimizer == "adam" ? 0.003 : 0.5);
  config.seed = absl::GetFlag(FLAGS_seed);
  config.trace_path = absl::GetFlag(FLAGS_trace);
  config.image_tower = absl::GetFlag(FLAGS_image_tower);
  config.text_tower = absl::GetFlag(FLAGS_text_tower);
  DDPKIT_ASSIGN_OR_RETURN(config.device, DeviceFromFlag());
  DDPKIT_ASSIGN_OR_RETURN(const reducer::DdpOptions ddp, DdpCapsFromFlags());
  config.pytorch_version = ddp.pytorch_version;
  return config;
}

int RunContrastiveCommand(const std::vector<std::string>&) {
  absl::StatusOr<jobs::ContrastiveConfig> config = ConfigFromFlags();
  if (!config.ok()) return Fail("contrastive", config.status());
  absl::StatusOr<jobs::ContrastiveReport> report = jobs::RunContrastive(*config);
  if (!report.ok()) return Fail("contrastive", report.status());
  if (report->rank() != 0) return kExitOk;  // under gloo, rank 0's process reports
  const std::string out = absl::GetFlag(FLAGS_out);
  if (!out.empty()) {
    if (absl::Status s = jobs::WriteCurves(*report, out); !s.ok()) return Fail("contrastive", s);
  }
  return EmitReport<jobs::ContrastiveReport>(
      *report, absl::GetFlag(FLAGS_json), [&](const jobs::ContrastiveReport& r) {
        PrintReport(r, config->device);
        if (!out.empty()) {
          std::cout << "\nwrote " << out << "/curves.csv and " << out << "/curves.svg\n";
        }
        if (!config->trace_path.empty()) {
          std::cout << TraceWrittenLine(config->trace_path, r.backend(), r.rank()) << "\n";
        }
      });
}

}  // namespace

Subcommand ContrastiveSubcommand() {
  return {
      .name = "contrastive",
      .summary =
          "CLIP loss under DDP: what each all-gather backward does to gradients and training",
      .usage =
          "ddpkit contrastive [--world-size N | --backend gloo under ddpkit launch] "
          "[--layout local|global|both] [--gather sum|allreduce_slice|slice|none|avg[,...]|all] "
          "[--image-tower resnet:... --text-tower gpt:...] "
          "[--device cpu|cuda|cuda:N] [--steps N] [--batch-size b] [--optimizer sgd|adam] "
          "[--lr X] [--seed S] [--out DIR] [--json]",
      .flag_names = {"layout", "gather", "image_tower", "text_tower", "out", "steps", "batch_size",
                     "lr", "optimizer", "seed", "json", "backend", "world_size", "timeout", "trace",
                     "device", "pytorch_version"},
      .own_defaults = {{"steps", "200"}, {"lr", "0.5 (sgd), 0.003 (adam)"}},
      .run = RunContrastiveCommand};
}

}  // namespace ddpkit::cli
