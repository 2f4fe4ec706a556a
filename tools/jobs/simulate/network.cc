#include "tools/jobs/simulate/network.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "autograd/base/error.h"
#include "google/protobuf/util/json_util.h"
#include "tools/jobs/allreduce_profile.pb.h"
#include "tools/trace/parse_trace.h"

namespace ddpkit::jobs::sim {
namespace {

double RingUs(double bytes, int n, double latency_us, double gbytes_per_s) {
  if (n <= 1) return 0;
  return 2.0 * (n - 1) * latency_us + 2.0 * (n - 1) / n * bytes / (gbytes_per_s * 1e3);
}

double TreeUs(double bytes, int n, double latency_us, double gbytes_per_s) {
  if (n <= 1) return 0;
  return 2.0 * std::ceil(std::log2(n)) * latency_us + 2.0 * bytes / (gbytes_per_s * 1e3);
}

// The presets. Sources (docs/simulate.md has them in full): NVIDIA DGX A100 and DGX-1 (V100)
// datasheets for NVLink and the NICs; latencies are typical NCCL per-step figures, assumed.
NetworkModel Preset(const std::string& name) {
  NetworkModel m;
  m.name = name;
  if (name == "dgx-a100-ib200") {  // 8 A100, NVLink 3 (300 GB/s each way), 8 x 200 Gb/s HDR IB
    m.algorithm = "hierarchical", m.ranks_per_node = 8, m.intra_gbytes_per_s = 300;
    m.intra_latency_us = 2, m.gbytes_per_s = 25, m.latency_us = 5;
    m.source = "DGX A100 datasheet: NVLink 3 600 GB/s bidirectional per GPU, 8x200 Gb/s HDR";
  } else if (name == "v100-nvlink-ib100") {  // DGX-1: NVLink 2, one 100 Gb/s link per GPU pair
    m.algorithm = "hierarchical", m.ranks_per_node = 8, m.intra_gbytes_per_s = 150;
    m.intra_latency_us = 3, m.gbytes_per_s = 12.5 / 2, m.latency_us = 6;
    m.source = "DGX-1 datasheet: NVLink 2 300 GB/s per GPU, 4x100 Gb/s EDR IB per 8 GPUs";
  } else if (name == "eth100" || name == "eth10") {  // a flat ring over Ethernet, one rank per NIC
    m.gbytes_per_s = name == "eth100" ? 12.5 : 1.25, m.latency_us = 15;
    m.source = StrCat(name == "eth100" ? 100 : 10, " Gb/s Ethernet per rank, 15 us per step");
  } else {
    m.name.clear();
  }
  return m;
}

absl::Status SetKey(NetworkModel& m, const std::string& key, const std::string& value) {
  if (key == "algo") {
    if (value != "ring" && value != "tree" && value != "hierarchical") {
      return absl::InvalidArgumentError(
          StrCat("--network: algo must be ring, tree or hierarchical"));
    }
    m.algorithm = value;
    return absl::OkStatus();
  }
  double v;
  if (!absl::SimpleAtod(value, &v) || v <= 0) {
    return absl::InvalidArgumentError(StrCat("--network: bad value for ", key));
  }
  if (key == "latency_us")
    m.latency_us = v;
  else if (key == "GBps")
    m.gbytes_per_s = v;
  else if (key == "gbps")
    m.gbytes_per_s = v / 8;
  else if (key == "node")
    m.ranks_per_node = static_cast<int>(v);
  else if (key == "intra_latency_us")
    m.intra_latency_us = v;
  else if (key == "intra_GBps")
    m.intra_gbytes_per_s = v;
  else
    return absl::InvalidArgumentError(StrCat("--network: unknown key '", key, "'"));
  return absl::OkStatus();
}

}  // namespace

LinearFit LeastSquares(const std::vector<std::pair<double, double>>& points) {
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : points) n += 1, sx += x, sy += y, sxx += x * x, sxy += x * y;
  LinearFit fit;
  const double d = n * sxx - sx * sx;
  fit.b_us_per_byte = d > 0 ? std::max(0.0, (n * sxy - sx * sy) / d) : 0;
  fit.a_us = (sy - fit.b_us_per_byte * sx) / std::max(1.0, n);
  // A latency below zero is no latency: the best line through the origin instead. Clamping the
  // intercept alone kept the free fit's slope, so two sizes 4% apart, one of them slowed (a
  // ResNet's buckets of 2.41 and 2.50 MB at 2.6 and 4.5 ms), priced 6.7 ms per MB.
  if (fit.a_us < 0) {
    fit.a_us = 0;
    fit.b_us_per_byte = sxx > 0 ? std::max(0.0, sxy / sxx) : 0;
  }
  return fit;
}

namespace {

// The bucket allreduces of a ddpkit trace (rank 0, after iteration 0) as they ran inside DDP:
// contention with backward included.
absl::StatusOr<NetworkModel> FromTrace(const std::string& path) {
  DDPKIT_ASSIGN_OR_RETURN(const trace::TraceView view, trace::ReadTraceFile(path));
  std::vector<std::pair<double, double>> points;
  for (const trace::TraceItem& c :
       view.ranks.empty() ? std::vector<trace::TraceItem>{} : view.ranks[0].collectives) {
    if (c.purpose == "bucket" && c.iteration >= 1 && !c.shadow) {
      points.emplace_back(static_cast<double>(c.bytes), c.end_us - c.start_us);
    }
  }
  if (points.empty()) return absl::InvalidArgumentError(StrCat(path, ": no bucket allreduce"));
  NetworkModel m;
  m.name = "trace";
  m.measured[view.world_size] = LeastSquares(points);
  m.source = StrCat("fitted to ", points.size(), " bucket allreduces in ", path,
                    " (as they ran inside DDP)");
  return m;
}

absl::StatusOr<NetworkModel> Measured(const std::string& files) {
  NetworkModel m;
  m.name = "measured";
  for (const std::string& path : std::vector<std::string>(absl::StrSplit(files, '+'))) {
    std::ifstream in(path);
    if (!in) return absl::NotFoundError(StrCat("--network: cannot read ", path));
    std::stringstream text;
    text << in.rdbuf();
    DDPKIT_ASSIGN_OR_RETURN(auto fit, FitAllreduceReport(text.str()));
    m.measured[fit.first] = fit.second;
  }
  m.source = StrCat("measured here: ", files, " (time = a + b·bytes per world size)");
  return m;
}

}  // namespace

double NetworkModel::UnscaledUs(double bytes, int world) const {
  if (world <= 1) return 0;
  if (!measured.empty()) {
    if (auto it = measured.find(world); it != measured.end()) {
      return it->second.a_us + it->second.b_us_per_byte * bytes;
    }
    // The largest measured world's fit, read as a ring: α = a / 2(n-1), 1/β = b / (2(n-1)/n).
    const auto& [n, fit] = *measured.rbegin();
    const double alpha = fit.a_us / (2.0 * (n - 1));
    const double gbs = 2.0 * (n - 1) / n / std::max(1e-12, fit.b_us_per_byte) / 1e3;
    return RingUs(bytes, world, alpha, gbs);
  }
  const int g = std::max(1, ranks_per_node);
  if (algorithm == "hierarchical") {
    const int inside = std::min(g, world), nodes = (world + g - 1) / g;
    return RingUs(bytes, inside, intra_latency_us, intra_gbytes_per_s) +
           RingUs(bytes / inside, nodes, latency_us, gbytes_per_s);
  }
  // A flat ring or tree inside one node runs on NVLink; across nodes, on the slowest link.
  const bool one_node = world <= g && g > 1;
  const double a = one_node ? intra_latency_us : latency_us;
  const double b = one_node ? intra_gbytes_per_s : gbytes_per_s;
  return algorithm == "tree" ? TreeUs(bytes, world, a, b) : RingUs(bytes, world, a, b);
}

absl::StatusOr<std::pair<int, LinearFit>> FitAllreduceReport(const std::string& json_text) {
  BenchAllreduceReport report;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  if (!google::protobuf::util::JsonStringToMessage(json_text, &report, options).ok() ||
      report.points_size() < 2) {
    return absl::InvalidArgumentError(
        "--network measured=: not a `ddpkit bench allreduce --json` report with two sizes or more");
  }
  std::vector<std::pair<double, double>> points;
  for (const AllreducePoint& p : report.points()) {
    points.emplace_back(static_cast<double>(p.bytes()), p.time_us());
  }
  return std::make_pair(report.world_size(), LeastSquares(points));
}

absl::StatusOr<NetworkModel> ParseNetwork(const std::string& spec) {
  if (absl::StartsWith(spec, "measured=")) return Measured(spec.substr(9));
  if (absl::StartsWith(spec, "trace=")) return FromTrace(spec.substr(6));
  std::vector<std::string> parts = absl::StrSplit(spec, ',');
  NetworkModel m = Preset(parts[0]);
  size_t first_key = m.name.empty() ? 0 : 1;
  if (m.name.empty()) {
    m = Preset("eth100");
    m.name = "custom", m.source = "flags";
  }
  for (size_t i = first_key; i < parts.size(); ++i) {
    std::vector<std::string> kv = absl::StrSplit(parts[i], absl::MaxSplits('=', 1));
    if (kv.size() != 2) {
      return absl::InvalidArgumentError(StrCat("--network: '", parts[i],
                                               "' is no preset (dgx-a100-ib200, v100-nvlink-ib100, "
                                               "eth100, eth10) and no key=value"));
    }
    DDPKIT_RETURN_IF_ERROR(SetKey(m, kv[0], kv[1]));
    if (first_key == 1) m.name += StrCat(",", parts[i]);
  }
  return m;
}

}  // namespace ddpkit::jobs::sim
