#include "tools/contrastive.h"

#include <cmath>
#include <filesystem>
#include <mutex>

#include "absl/strings/str_format.h"
#include "autograd/error.h"
#include "autograd/file_util.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "autograd/optim.h"
#include "autograd/random.h"
#include "comm/rendezvous.h"
#include "comm/threads/threads_world.h"
#include "reducer/distributed_data_parallel.h"
#include "tools/comm_flags.h"

namespace ddpkit::tools {

using comm::ContrastiveLayout;
using comm::GatherBackward;

TwoTowerModel::TwoTowerModel(int64_t in, int64_t hidden, int64_t out, uint64_t seed, DType dtype) {
  logit_scale_ = RegisterParameter("logit_scale", Tensor::Full({1}, std::log(1 / 0.07), dtype));
  image_ = RegisterModule("image", nn::MakeMlp({in, hidden, out}, seed, dtype));
  text_ = RegisterModule("text", nn::MakeMlp({in, hidden, out}, seed + 1, dtype));
}

Tensor TwoTowerModel::Forward(const Tensor& views) {
  DDPKIT_CHECK(views.dim() == 2 && views.size(0) % 2 == 0,
               "[two_tower] expects [2b, in]: b image views, then their b text views; got ",
               ShapeString(views.shape()));
  const int64_t b = views.size(0) / 2;
  return Concat({L2NormalizeRows(image_->Forward(Slice(views, 0, b))),
                 L2NormalizeRows(text_->Forward(Slice(views, b, 2 * b)))});
}

PairedData MakePairedData(int64_t rows, int64_t in, int64_t latent, uint64_t seed, DType dtype) {
  Generator gen(seed);
  Tensor z = Tensor::Empty({rows, latent}, DType::kFloat64);
  Tensor project_image = Tensor::Empty({latent, in}, DType::kFloat64);
  Tensor project_text = Tensor::Empty({latent, in}, DType::kFloat64);
  Tensor noise = Tensor::Empty({2, rows, in}, DType::kFloat64);
  gen.FillNormal(z);
  gen.FillNormal(project_image);
  gen.FillNormal(project_text);
  gen.FillNormal(noise);
  auto view = [&](const Tensor& projection, int which) {
    Tensor out = Tensor::Empty({rows, in}, DType::kFloat64);
    const double* zp = z.data<double>();
    const double* pp = projection.data<double>();
    const double* np = noise.data<double>() + which * rows * in;
    double* o = out.data<double>();
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < in; ++c) {
        double v = 0.5 * np[r * in + c];
        for (int64_t k = 0; k < latent; ++k)
          v += zp[r * latent + k] * pp[k * in + c] / std::sqrt(latent);
        o[r * in + c] = v;
      }
    }
    return out.To(dtype);
  };
  return {view(project_image, 0), view(project_text, 1)};
}

namespace {

using Grads = std::vector<std::pair<std::string, std::vector<double>>>;

void CheckOk(const absl::Status& s, std::string_view what) {
  if (!s.ok()) throw Error(StrCat("[contrastive] ", what, " failed: ", s.message()), s.code());
}

// Rows [start, start + count) of both views, stacked as the model's input [2·count, in].
Tensor Views(const PairedData& data, int64_t start, int64_t count) {
  return Concat({data.image.Rows(start, start + count), data.text.Rows(start, start + count)});
}

struct Setup {
  const ContrastiveConfig& config;
  PairedData train, held_out;
};

std::shared_ptr<TwoTowerModel> MakeModel(const ContrastiveConfig& c) {
  return std::make_shared<TwoTowerModel>(c.input_dim, c.hidden_dim, c.feature_dim, c.seed);
}

// static_graph: the graph is the same every step, and with gather `none` in the global layout
// the encoders get no gradient at all (everything they produce reaches the loss only through
// constants); static graph records that once instead of failing the next forward.
std::shared_ptr<reducer::DistributedDataParallel> WrapInDdp(std::shared_ptr<TwoTowerModel> model,
                                                            comm::ProcessGroup& group) {
  absl::StatusOr<std::shared_ptr<reducer::DistributedDataParallel>> ddp =
      reducer::DistributedDataParallel::Create(std::move(model), group, {.static_graph = true});
  CheckOk(ddp.status(), "wrapping the model in DDP");
  return *ddp;
}

// One synced backward on `group`: this rank's `rows` rows starting at `first` (of the global
// batch at `start`); returns the averaged gradients (identical on every rank).
Grads GradientsOn(const Setup& s, comm::ProcessGroup& group, int64_t start, int64_t first,
                  int64_t rows, ContrastiveLayout layout, GatherBackward gather) {
  auto model = MakeModel(s.config);
  auto ddp = WrapInDdp(model, group);
  Tensor features = ddp->Forward(Views(s.train, start + first, rows));
  comm::ClipLoss(Slice(features, 0, rows), Slice(features, rows, 2 * rows), model->logit_scale(),
                 group, layout, gather)
      .loss.Backward();
  Grads grads;
  for (const auto& [name, p] : model->NamedParameters()) {
    grads.emplace_back(
        name, p.grad().defined() ? p.grad().ToDoubles() : std::vector<double>(p.numel(), 0.0));
  }
  return grads;
}

GradientCheckRow Compare(const Grads& g, const Grads& ref) {
  double dot = 0, ref_sq = 0, diff_sq = 0, g_sq = 0, scale_g = 0, scale_ref = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    for (size_t k = 0; k < ref[i].second.size(); ++k) {
      const double a = g[i].second[k], r = ref[i].second[k];
      if (ref[i].first == "logit_scale") {
        scale_g = a, scale_ref = r;
        continue;
      }
      dot += a * r, ref_sq += r * r, diff_sq += (a - r) * (a - r), g_sq += a * a;
    }
  }
  const double s = ref_sq > 0 ? dot / ref_sq : 0;
  double residual_sq = 0;  // ||g - s·ref||²
  for (size_t i = 0; i < ref.size(); ++i) {
    if (ref[i].first == "logit_scale") continue;
    for (size_t k = 0; k < ref[i].second.size(); ++k) {
      const double e = g[i].second[k] - s * ref[i].second[k];
      residual_sq += e * e;
    }
  }
  GradientCheckRow row;
  row.set_encoder_rel_error(std::sqrt(diff_sq / ref_sq));
  row.set_encoder_scale(s);
  row.set_encoder_residual(g_sq == 0 ? 0.0
                                     : std::sqrt(residual_sq) / (std::abs(s) * std::sqrt(ref_sq)));
  row.set_logit_scale_rel_error(std::abs(scale_g - scale_ref) / std::abs(scale_ref));
  return row;
}

double Top1Accuracy(TwoTowerModel& model, const PairedData& held_out) {
  NoGradGuard no_grad;
  const int64_t m = held_out.image.size(0);
  Tensor features = model.Forward(Views(held_out, 0, m));
  Tensor sims = Matmul(Slice(features, 0, m), Transpose(Slice(features, m, 2 * m)));
  int64_t correct = 0;
  for (int64_t i = 0; i < m; ++i) {
    const double* row = sims.data<double>() + i * m;
    correct += std::max_element(row, row + m) - row == i;
  }
  return static_cast<double>(correct) / static_cast<double>(m);
}

// A training run on `group` (every rank `b` rows per step; global batch world·b).
TrainingCurve TrainOn(const Setup& s, comm::ProcessGroup& group, ContrastiveLayout layout,
                      GatherBackward gather) {
  const ContrastiveConfig& c = s.config;
  const int64_t b = c.batch_size * (group.size() == 1 ? c.world_size : 1);  // one process: all rows
  const int64_t global = static_cast<int64_t>(c.batch_size) * c.world_size;
  auto model = MakeModel(c);
  auto ddp = WrapInDdp(model, group);
  std::unique_ptr<Optimizer> optimizer;
  if (c.optimizer == "adam") {
    optimizer = std::make_unique<Adam>(model->Parameters(), AdamOptions{.lr = c.lr});
  } else {
    optimizer = std::make_unique<Sgd>(model->Parameters(), SgdOptions{.lr = c.lr});
  }
  TrainingCurve curve;
  curve.set_layout(std::string(group.size() == 1 ? "" : comm::ContrastiveLayoutName(layout)));
  curve.set_gather(
      std::string(group.size() == 1 ? "single-process" : comm::GatherBackwardName(gather)));
  Tensor losses = Tensor::Zeros({c.steps}, DType::kFloat64);
  for (int step = 0; step < c.steps; ++step) {
    optimizer->ZeroGrad();
    Tensor features = ddp->Forward(Views(s.train, step * global + group.rank() * b, b));
    Tensor loss = comm::ClipLoss(Slice(features, 0, b), Slice(features, b, 2 * b),
                                 model->logit_scale(), group, layout, gather)
                      .loss;
    loss.Backward();
    optimizer->Step();
    losses.data<double>()[step] = loss.item();
    if ((step + 1) % c.eval_every == 0 || step + 1 == c.steps) {
      curve.add_eval_steps(step + 1);
      curve.add_accuracy(Top1Accuracy(*model, s.held_out));
      curve.add_logit_scale(std::exp(model->logit_scale().item()));
    }
  }
  // The global loss: local layout ranks hold shares whose mean is it; global ranks hold it.
  CheckOk(group.Allreduce(losses)->Wait(), "averaging the losses");
  for (int step = 0; step < c.steps; ++step)
    curve.add_losses(losses.data<double>()[step] / group.size());
  return curve;
}

absl::Status Validate(const ContrastiveConfig& c) {
  if (c.batch_size < 1)
    return absl::InvalidArgumentError(StrCat("--batch-size must be >= 1, got ", c.batch_size));
  if (c.steps < 0) return absl::InvalidArgumentError(StrCat("--steps must be >= 0, got ", c.steps));
  if (!(c.lr > 0)) return absl::InvalidArgumentError(StrCat("--lr must be > 0, got ", c.lr));
  if (c.optimizer != "sgd" && c.optimizer != "adam") {
    return absl::InvalidArgumentError(
        StrCat("--optimizer must be sgd or adam, got '", c.optimizer, "'"));
  }
  if (c.backend == "threads" && c.world_size < 1) {
    return absl::InvalidArgumentError(StrCat("--world-size must be >= 1, got ", c.world_size));
  }
  if (!c.check_rows.empty() && static_cast<int>(c.check_rows.size()) != c.world_size) {
    return absl::InvalidArgumentError("check_rows needs one count per rank");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ContrastiveReport> RunContrastive(const ContrastiveConfig& config_in) {
  ContrastiveConfig config = config_in;
  if (config.backend != "threads") {
    DDPKIT_ASSIGN_OR_RETURN(comm::EnvRendezvous env, comm::ReadEnvRendezvous());
    config.world_size = env.world_size;
  }
  DDPKIT_RETURN_IF_ERROR(Validate(config));
  const int world = config.world_size;
  std::vector<int64_t> check_rows = config.check_rows;
  if (check_rows.empty()) check_rows.assign(world, config.batch_size);
  int64_t check_total = 0;
  for (int64_t n : check_rows) check_total += n;
  const int64_t global = static_cast<int64_t>(config.batch_size) * world;
  const int64_t train_rows = std::max<int64_t>(check_total, global * std::max(1, config.steps));
  PairedData all = MakePairedData(train_rows + config.held_out, config.input_dim, config.latent_dim,
                                  config.seed + 7);
  Setup setup{config,
              {all.image.Rows(0, train_rows), all.text.Rows(0, train_rows)},
              {all.image.Rows(train_rows, train_rows + config.held_out),
               all.text.Rows(train_rows, train_rows + config.held_out)}};

  ContrastiveReport report;
  report.set_world_size(world);
  report.set_backend(config.backend);
  report.set_batch_size(config.batch_size);
  report.set_global_batch(static_cast<int32_t>(global));
  report.set_steps(config.steps);
  report.set_optimizer(config.optimizer);
  report.set_lr(config.lr);
  report.set_seed(static_cast<int32_t>(config.seed));
  for (int64_t n : check_rows) report.add_rows_per_rank(static_cast<int32_t>(n));
  for (ContrastiveLayout layout : config.layouts) {
    LogitMemory& m = *report.add_logit_memory();
    m.set_layout(std::string(comm::ContrastiveLayoutName(layout)));
    m.set_elements_per_rank(layout == ContrastiveLayout::kLocalGlobal
                                ? 2 * config.batch_size * global
                                : global * global);
    m.set_bytes_per_rank(m.elements_per_rank() * static_cast<int64_t>(sizeof(double)));
  }

  try {
    // One process on the concatenated batch: the reference gradient and the reference curve.
    Grads reference;
    TrainingCurve reference_curve;
    CheckOk(comm::RunThreadsWorld(
                1,
                [&](comm::ProcessGroup& one) {
                  reference = GradientsOn(setup, one, 0, 0, check_total,
                                          ContrastiveLayout::kLocalGlobal, GatherBackward::kSum);
                  if (config.train)
                    reference_curve =
                        TrainOn(setup, one, ContrastiveLayout::kLocalGlobal, GatherBackward::kSum);
                  return absl::OkStatus();
                }),
            "the single-process reference");

    std::mutex mu;
    const cli::CommSetup comm_setup{
        .backend = config.backend, .world_size = world, .options = config.comm_options};
    CheckOk(
        cli::RunOnWorld(comm_setup,
                        [&](comm::ProcessGroup& group) -> absl::Status {
                          try {
                            int64_t first = 0;
                            for (int r = 0; r < group.rank(); ++r) first += check_rows[r];
                            ContrastiveReport mine;
                            mine.set_rank(group.rank());
                            for (ContrastiveLayout layout : config.layouts) {
                              for (GatherBackward gather : config.gathers) {
                                Grads g = GradientsOn(setup, group, 0, first,
                                                      check_rows[group.rank()], layout, gather);
                                GradientCheckRow row = Compare(g, reference);
                                row.set_layout(std::string(comm::ContrastiveLayoutName(layout)));
                                row.set_gather(std::string(comm::GatherBackwardName(gather)));
                                *mine.add_gradient_check() = row;
                              }
                            }
                            if (config.train) {
                              *mine.add_training() = reference_curve;
                              for (ContrastiveLayout layout : config.layouts) {
                                for (GatherBackward gather : config.gathers)
                                  *mine.add_training() = TrainOn(setup, group, layout, gather);
                              }
                            }
                            if (group.rank() == 0 || config.backend != "threads") {
                              std::lock_guard<std::mutex> lock(mu);
                              report.MergeFrom(mine);
                            }
                          } catch (const Error& e) {
                            return e.ToStatus();
                          }
                          return absl::OkStatus();
                        }),
        "the data-parallel runs");
  } catch (const Error& e) {
    return e.ToStatus();
  }
  return report;
}

// ---------------------------------------------------------------------------- curves

namespace {

std::string Csv(const ContrastiveReport& report) {
  std::string out = "step,layout,gather,loss,accuracy\n";
  for (const TrainingCurve& c : report.training()) {
    int e = 0;
    for (int step = 1; step <= c.losses_size(); ++step) {
      std::string accuracy;
      if (e < c.eval_steps_size() && c.eval_steps(e) == step)
        accuracy = absl::StrFormat("%.6f", c.accuracy(e++));
      absl::StrAppendFormat(&out, "%d,%s,%s,%.8f,%s\n", step, c.layout(), c.gather(),
                            c.losses(step - 1), accuracy);
    }
  }
  return out;
}

// Two panels (loss, accuracy) sharing the step axis; one polyline per curve.
std::string Svg(const ContrastiveReport& report) {
  constexpr double kW = 460, kH = 300, kLeft = 50, kTop = 30, kPlotW = 380, kPlotH = 220;
  const char* colours[] = {"#000000", "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                           "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  double max_loss = 0;
  int steps = 1;
  for (const TrainingCurve& c : report.training()) {
    for (double l : c.losses()) {
      if (std::isfinite(l)) max_loss = std::max(max_loss, l);
    }
    steps = std::max(steps, c.losses_size());
  }
  if (max_loss <= 0) max_loss = 1;
  std::string out = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
      "font-family=\"sans-serif\" "
      "font-size=\"11\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
      static_cast<int>(2 * kW), static_cast<int>(kH + 20 * report.training_size() / 2 + 40));
  for (int panel = 0; panel < 2; ++panel) {
    const double x0 = panel * kW + kLeft, y0 = kTop;
    const double y_max = panel == 0 ? max_loss : 1.0;
    absl::StrAppendFormat(
        &out,
        "<text x=\"%g\" y=\"18\" font-size=\"13\">%s (%d ranks, %s)</text>\n"
        "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" stroke=\"#999\"/>\n"
        "<text x=\"%g\" y=\"%g\">%.3g</text><text x=\"%g\" y=\"%g\">0</text>\n"
        "<text x=\"%g\" y=\"%g\">step %d</text>\n",
        x0, panel == 0 ? "global loss" : "held-out top-1 accuracy", report.world_size(),
        report.optimizer(), x0, y0, kPlotW, kPlotH, x0 - 40, y0 + 10, y_max, x0 - 12, y0 + kPlotH,
        x0 + kPlotW - 50, y0 + kPlotH + 14, steps);
    for (int i = 0; i < report.training_size(); ++i) {
      const TrainingCurve& c = report.training(i);
      std::string points;
      auto point = [&](int step, double v) {
        if (!std::isfinite(v)) return;
        v = std::clamp(v, 0.0, y_max);
        absl::StrAppendFormat(&points, "%.1f,%.1f ", x0 + kPlotW * step / steps,
                              y0 + kPlotH * (1 - v / y_max));
      };
      if (panel == 0) {
        for (int s = 0; s < c.losses_size(); ++s) point(s + 1, c.losses(s));
      } else {
        point(0, 0);
        for (int e = 0; e < c.eval_steps_size(); ++e) point(c.eval_steps(e), c.accuracy(e));
      }
      absl::StrAppendFormat(
          &out, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%g\" points=\"%s\"/>\n",
          colours[i % 11], i == 0 ? 2.5 : 1.5, points);
    }
  }
  for (int i = 0; i < report.training_size(); ++i) {  // legend
    const TrainingCurve& c = report.training(i);
    const double x = kLeft + (i % 2) * kW, y = kTop + kPlotH + 40 + 18 * (i / 2);
    absl::StrAppendFormat(
        &out,
        "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"%s\" stroke-width=\"3\"/>"
        "<text x=\"%g\" y=\"%g\">%s</text>\n",
        x, y - 4, x + 24, y - 4, colours[i % 11], x + 30, y,
        c.layout().empty() ? c.gather() : StrCat(c.layout(), " + ", c.gather()));
  }
  out += "</svg>\n";
  return out;
}

}  // namespace

absl::Status WriteCurves(const ContrastiveReport& report, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return absl::InvalidArgumentError(
        StrCat("cannot create --out directory '", dir, "': ", ec.message()));
  DDPKIT_RETURN_IF_ERROR(WriteFileAtomically(dir + "/curves.csv", Csv(report)));
  return WriteFileAtomically(dir + "/curves.svg", Svg(report));
}

}  // namespace ddpkit::tools
