#include "tools/jobs/fr/ddp_labels.h"

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tools/jobs/bucket_plans.h"

namespace ddpkit::jobs {

using torch_formats::Dump;
using torch_formats::FrEntry;
using torch_formats::PlanFile;
namespace {

constexpr size_t kNamesShown = 4;  // a ResNet bucket holds dozens: the first few name it

std::vector<DdpCallPlan::Bucket> BucketsOf(
    const google::protobuf::RepeatedPtrField<reducer::BucketInfo>& infos,
    const std::vector<int64_t>& numel) {
  std::vector<DdpCallPlan::Bucket> out;
  for (const reducer::BucketInfo& info : infos) {
    DdpCallPlan::Bucket b;
    for (int i = 0; i < info.param_indices_size(); ++i) {
      b.elements += numel.at(info.param_indices(i));
      b.params.push_back(info.param_names(i));
    }
    out.push_back(std::move(b));
  }
  return out;
}

std::string ShortList(const std::vector<std::string>& names) {
  if (names.size() <= kNamesShown) return absl::StrJoin(names, ", ");
  const std::vector<std::string> first(names.begin(), names.begin() + kNamesShown);
  return absl::StrFormat("%s, ... (%d in all)", absl::StrJoin(first, ", "), names.size());
}

// "all_reduce" for "gloo:all_reduce" or "nccl:all_reduce".
std::string TypeOf(const FrEntry& e) {
  const size_t colon = e.op().find(':');
  return colon == std::string::npos ? e.op() : e.op().substr(colon + 1);
}

bool IsFloat(const std::string& dtype) {
  return dtype == "Float" || dtype == "Double" || dtype == "Half" || dtype == "BFloat16";
}

// Walks one rank's default-group calls in order, as DDP issued them.
class Walker {
 public:
  explicit Walker(const DdpCallPlan& plan) : plan_(plan) {}

  void Label(FrEntry& e) {
    const std::string type = TypeOf(e);
    const std::vector<DdpCallPlan::Bucket>& buckets = Current();
    if (type == "all_reduce" && IsFloat(e.dtype()) && !buckets.empty() &&
        e.count() == buckets[next_].elements) {
      LabelBucket(e, buckets);
    } else if (type == "broadcast" && e.dtype() == "Int" && iteration_ > 0 && !rebuilt_) {
      e.set_purpose("rebuild");  // rank 0's rebuilt plan: its indices, then its limits
      if (++rebuild_broadcasts_ == 2) rebuilt_ = !plan_.rebuilt.empty();
    } else if (Constructing() && (type == "all_gather" || type == "allgather" ||
                                  (type == "broadcast" && e.dtype() == "Long"))) {
      e.set_purpose("ddp_param_check");
    } else if (Constructing() && type == "broadcast" && IsFloat(e.dtype())) {
      e.set_purpose("ddp_module_states");
    } else if (type == "all_reduce" && e.dtype() == "Int" && e.count() == plan_.parameters) {
      e.set_purpose("used_map");
    } else if (e.count() == 1) {
      e.set_purpose("one_element");
    } else {
      e.set_purpose("not_ddp");
    }
  }

 private:
  const std::vector<DdpCallPlan::Bucket>& Current() const {
    return rebuilt_ ? plan_.rebuilt : plan_.initial;
  }
  bool Constructing() const { return iteration_ == 0 && next_ == 0; }

  void LabelBucket(FrEntry& e, const std::vector<DdpCallPlan::Bucket>& buckets) {
    e.set_purpose("bucket");
    e.set_bucket(static_cast<int>(next_));
    e.set_iteration(iteration_);
    e.set_ddp_params(ShortList(buckets[next_].params));
    e.set_last_bucket(next_ + 1 == buckets.size());
    if (++next_ == buckets.size()) {
      next_ = 0;
      ++iteration_;
      // The rebuild comes in the second iteration's forward; a plan file without one (or a
      // dump whose ring lost the broadcasts) still switches there.
      if (iteration_ == 2 && !plan_.rebuilt.empty()) rebuilt_ = true;
    }
  }

  const DdpCallPlan& plan_;
  size_t next_ = 0;
  int iteration_ = 0;
  int rebuild_broadcasts_ = 0;
  bool rebuilt_ = false;
};

}  // namespace

absl::StatusOr<DdpCallPlan> DdpCallPlanOf(const PlanFile& file) {
  DDPKIT_ASSIGN_OR_RETURN(const ModelBuckets plans,
                          PlanFileBucketPlans(file, RecordedDdpOptions(file)));
  std::vector<int64_t> numel;
  for (size_t p : file.DdpParameters()) numel.push_back(file.parameters[p].numel);
  DdpCallPlan plan;
  plan.parameters = static_cast<int64_t>(numel.size());
  plan.initial = BucketsOf(plans.initial_buckets(), numel);
  plan.rebuilt = BucketsOf(plans.rebuilt_buckets(), numel);
  return plan;
}

void LabelDdpCollectives(const DdpCallPlan& plan, std::map<int, Dump>& default_group) {
  for (auto& [rank, dump] : default_group) {
    Walker walker(plan);
    for (auto& [seq, entry] : dump.entries) walker.Label(entry);
  }
}

std::string PurposeWords(const std::string& purpose) {
  static const std::map<std::string, std::string> kWords = {
      {"ddp_param_check", "DDP's constructor checking the parameters' shapes across ranks"},
      {"ddp_module_states", "DDP's constructor broadcasting rank 0's parameters and buffers"},
      {"rebuild", "DDP's bucket rebuild: rank 0's new plan"},
      {"used_map", "find_unused_parameters' used-parameter map"},
      {"one_element", "one element: Join's per-iteration count, or the loop's own loss/metric"},
      {"not_ddp", "not DDP's: the training loop's own collective"}};
  auto it = kWords.find(purpose);
  return it == kWords.end() ? purpose : it->second;
}

std::optional<std::string> UnevenInputsHint(const FrEntry& gone_last, const FrEntry& missed,
                                            int gone) {
  if (gone_last.purpose() != "bucket" || !gone_last.last_bucket() || missed.purpose() != "bucket" ||
      missed.bucket() != 0 || missed.iteration() != gone_last.iteration() + 1) {
    return std::nullopt;
  }
  return absl::StrFormat(
      "rank %d finished iteration %d and issued nothing more while the others began iteration "
      "%d: uneven inputs (rank %d ran out of batches). Wrap the training loop in `with "
      "Join([model]):` (torch.distributed.algorithms.join), or give every rank the same number "
      "of batches (DistributedSampler with drop_last=True)",
      gone, gone_last.iteration(), missed.iteration(), gone);
}

}  // namespace ddpkit::jobs
