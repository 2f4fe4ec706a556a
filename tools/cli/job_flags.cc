#include "tools/cli/job_flags.h"

#include "absl/flags/flag.h"
#include "tools/cli/comm_flags.h"
#include "tools/cli/ddp_flags.h"
#include "tools/trace/session.h"

ABSL_FLAG(std::string, model, "mlp:32,64,64,10",
          "model spec mlp:IN,H1,...,OUT[,bias=0][,unused=1][,tied=1][,branch=WORD] (Linear/ReLU "
          "alternating; "
          "parameters named 0.weight, 0.bias, 2.weight, ... as PyTorch's nn.Sequential). "
          "bias=0: Linears without bias; unused=1: one more Linear(OUT,OUT), 'unused', that "
          "forward never calls (DDP needs --find-unused-parameters or --static-graph); tied=1: "
          "the last two hidden-to-hidden Linears share one weight (needs three equal widths "
          "before OUT, e.g. mlp:8,16,16,16,4,tied=1); branch=iters|rank1|rank1+iters: one more "
          "Linear(OUT,OUT), 'branch', applied to ReLU(output) only in odd iterations (iters), "
          "only on rank 1 (rank1) or only on rank 1 in odd iterations (rank1+iters): control "
          "flow, which DDP needs --find-unused-parameters for); or "
          "gpt:layers=L,heads=H,dim=D,ctx=T,vocab=V[,bias=0]: nanoGPT's GPT (parameter names as "
          "its model.py, lm_head tied to transformer.wte), token rows in, a prediction at every "
          "position (train --text FILE trains it on a text's characters)");
ABSL_FLAG(std::string, weights, "", "initial weights: a safetensors state dict");
ABSL_FLAG(bool, sync_batchnorm, false,
          "train and join: convert every BatchNorm2d of a resnet model to SyncBatchNorm "
          "(PyTorch's convert_sync_batchnorm: batch statistics over every rank's batch, one "
          "allreduce in each BatchNorm's forward and one in its backward); Join cannot shadow "
          "those allreduces (docs/join.md)");
ABSL_FLAG(std::string, device, "cpu",
          "where the work runs: cpu, cuda or cuda:N (threads: every rank on that GPU, each on its "
          "own stream; nccl: each rank on cuda:LOCAL_RANK)");
ABSL_FLAG(std::string, data, "",
          "training data, a safetensors file (train: x [N, ...the model's input] (float32, or "
          "int64 token ids) and y int64 [N] (or [N, T] for a language model); varlen: int64 "
          "tokens (flat), lengths and labels); default: a seeded synthetic task");
ABSL_FLAG(std::string, eval_data, "",
          "train: held-out rows (a safetensors file like --data's); the final model's top-1 "
          "accuracy on them is reported beside the accuracy on the training rows");
ABSL_FLAG(std::string, text, "",
          "train: a UTF-8 text file as a language model's data, read as characters (the "
          "vocabulary is its distinct characters, sorted, as nanoGPT's shakespeare_char)");
ABSL_FLAG(int32_t, batch_size, 32, "rows per rank per micro-batch");
ABSL_FLAG(int32_t, steps, 60, "optimizer steps");
ABSL_FLAG(double, lr, 0.1, "SGD learning rate");
ABSL_FLAG(double, momentum, 0.0, "SGD momentum");
ABSL_FLAG(std::string, optimizer, "sgd",
          "train and join: sgd (every rank steps every parameter) or zero-sgd (ZeRO stage 1: "
          "each rank steps and keeps momentum for its shard, then broadcasts it); "
          "contrastive: sgd or adam");
ABSL_FLAG(std::string, loss, "ce",
          "train and join: ce (cross-entropy), mse (mean squared error against the one-hot "
          "labels) or sum (the output's sum, as PyTorch's DDP tests use)");
ABSL_FLAG(uint64_t, seed, 0, "seed for the model's initialisation and the synthetic data");
ABSL_FLAG(std::string, save_weights, "",
          "write rank 0's final weights here (safetensors, atomically)");
ABSL_FLAG(bool, json, false, "print only a JSON report on stdout");
ABSL_FLAG(std::string, out, "",
          "contrastive: write curves.csv and curves.svg into this directory; bench paper: "
          "paper.svg; trace svg: the SVG file; trace merge: the merged trace");
ABSL_FLAG(std::string, trace, "",
          "write a Chrome trace of the run to FILE (open it in ui.perfetto.dev or "
          "chrome://tracing; `ddpkit trace stats|svg FILE` read it); under gloo each rank writes "
          "FILE.rank<r>.json, combined by `ddpkit trace merge`");

namespace ddpkit::cli {

const std::vector<std::string> kDdpTrainingFlagNames = [] {
  std::vector<std::string> names = {
      "model", "weights",      "batch_size", "lr",    "momentum", "optimizer",     "loss",
      "seed",  "save_weights", "json",       "trace", "device",   "sync_batchnorm"};
  names.insert(names.end(), kCommFlagNames.begin(), kCommFlagNames.end());
  names.insert(names.end(), kDdpFlagNames.begin(), kDdpFlagNames.end());
  return names;
}();

absl::StatusOr<Device> DeviceFromFlag() {
  absl::StatusOr<Device> device = ParseDevice(absl::GetFlag(FLAGS_device));
  if (!device.ok()) {
    return absl::InvalidArgumentError(StrCat("--device: ", device.status().message()));
  }
  return *device;
}

bool TracesPerRank(std::string_view backend) {
  const absl::StatusOr<comm::Backend> parsed = comm::ParseBackend(backend);
  return parsed.ok() && !comm::InfoOf(*parsed).ranks_share_process;
}

std::string TraceWrittenLine(const std::string& path, const std::string& backend, int rank) {
  if (!TracesPerRank(backend)) {
    return StrCat("trace written to ", path, " (open it in ui.perfetto.dev; `ddpkit trace stats ",
                  path, "`)");
  }
  return StrCat("trace written to ", trace::TraceSession::RankPath(path, rank),
                " on each rank; `ddpkit trace merge` combines them");
}

absl::Status DdpTrainingFromFlags(jobs::DdpTrainingConfig& config) {
  DDPKIT_RETURN_IF_ERROR(WorldFromFlags(config.world));
  DDPKIT_ASSIGN_OR_RETURN(config.ddp, DdpOptionsFromFlags());
  DDPKIT_ASSIGN_OR_RETURN(config.comm_hook, CommHookFromFlags());
  DDPKIT_ASSIGN_OR_RETURN(config.powersgd, PowerSgdOptionsFromFlags());
  DDPKIT_ASSIGN_OR_RETURN(config.device, DeviceFromFlag());
  config.model = absl::GetFlag(FLAGS_model);
  config.weights_path = absl::GetFlag(FLAGS_weights);
  config.save_weights_path = absl::GetFlag(FLAGS_save_weights);
  config.batch_size = absl::GetFlag(FLAGS_batch_size);
  config.lr = absl::GetFlag(FLAGS_lr);
  config.momentum = absl::GetFlag(FLAGS_momentum);
  config.optimizer = absl::GetFlag(FLAGS_optimizer);
  config.loss = absl::GetFlag(FLAGS_loss);
  config.seed = absl::GetFlag(FLAGS_seed);
  config.trace_path = absl::GetFlag(FLAGS_trace);
  config.sync_batchnorm = absl::GetFlag(FLAGS_sync_batchnorm);
  return absl::OkStatus();
}

}  // namespace ddpkit::cli
