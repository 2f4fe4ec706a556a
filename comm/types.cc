#include "comm/types.h"

#include "absl/strings/str_join.h"

namespace ddpkit::comm {

std::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "SUM";
    case ReduceOp::kAvg: return "AVG";
    case ReduceOp::kMin: return "MIN";
    case ReduceOp::kMax: return "MAX";
  }
  return "?";
}

absl::StatusOr<ReduceOp> ParseReduceOp(std::string_view name) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax}) {
    if (ReduceOpName(op) == name) return op;
  }
  return absl::InvalidArgumentError(StrCat("unknown reduce op '", name, "'"));
}

absl::StatusOr<OpType> ParseOpType(std::string_view name) {
  for (OpType op : {OpType::kAllreduce, OpType::kBroadcast, OpType::kAllgather, OpType::kAllgatherV,
                    OpType::kReduceScatter, OpType::kAllToAllV, OpType::kBarrier}) {
    if (OpTypeName(op) == name) return op;
  }
  return absl::InvalidArgumentError(StrCat("unknown collective '", name, "'"));
}

std::string_view OpTypeName(OpType op) {
  switch (op) {
    case OpType::kAllreduce: return "ALLREDUCE";
    case OpType::kBroadcast: return "BROADCAST";
    case OpType::kAllgather: return "ALLGATHER";
    case OpType::kAllgatherV: return "ALLGATHER_V";
    case OpType::kReduceScatter: return "REDUCE_SCATTER";
    case OpType::kAllToAllV: return "ALL_TO_ALL_V";
    case OpType::kBarrier: return "BARRIER";
  }
  return "?";
}

CollectiveFingerprint CollectiveFingerprint::Of(const Collective& c) {
  CollectiveFingerprint f;
  f.sequence_number = c.sequence_number;
  f.op = c.op;
  f.reduce_op = c.reduce_op;
  f.dtype = c.input.defined() ? c.input.dtype() : DType::kFloat32;
  f.root = c.root;
  f.input_numel = c.input.defined() ? c.input.numel() : 0;
  f.output_numel = c.output.defined() ? c.output.numel() : 0;
  f.counts = c.counts;
  f.recv_counts = c.recv_counts;
  return f;
}

std::string CollectiveFingerprint::Describe() const {
  std::string s = StrCat(OpTypeName(op), "(");
  if (op == OpType::kBarrier) return s + ")";
  if (op == OpType::kAllreduce || op == OpType::kReduceScatter) {
    StrAppend(&s, ReduceOpName(reduce_op), ", ");
  }
  StrAppend(&s, DTypeName(dtype), ", ", input_numel, " elements");
  if (op == OpType::kBroadcast) StrAppend(&s, ", root ", root);
  if (!counts.empty()) StrAppend(&s, ", counts [", absl::StrJoin(counts, ","), "]");
  if (!recv_counts.empty()) StrAppend(&s, ", recv counts [", absl::StrJoin(recv_counts, ","), "]");
  return s + ")";
}

std::vector<int64_t> CollectiveFingerprint::Encode(int world_size) const {
  std::vector<int64_t> words(EncodedSize(world_size), -1);
  words[0] = static_cast<int64_t>(sequence_number);
  words[1] = static_cast<int64_t>(op);
  words[2] = static_cast<int64_t>(reduce_op);
  words[3] = static_cast<int64_t>(dtype);
  words[4] = root;
  words[5] = input_numel;
  words[6] = output_numel;
  words[7] = static_cast<int64_t>(counts.size()) | (static_cast<int64_t>(recv_counts.size()) << 32);
  for (size_t i = 0; i < counts.size() && i < static_cast<size_t>(world_size); ++i)
    words[8 + i] = counts[i];
  for (size_t i = 0; i < recv_counts.size() && i < static_cast<size_t>(world_size); ++i) {
    words[8 + world_size + i] = recv_counts[i];
  }
  return words;
}

CollectiveFingerprint CollectiveFingerprint::Decode(const int64_t* words, int world_size) {
  CollectiveFingerprint f;
  f.sequence_number = static_cast<uint64_t>(words[0]);
  f.op = static_cast<OpType>(words[1]);
  f.reduce_op = static_cast<ReduceOp>(words[2]);
  f.dtype = static_cast<DType>(words[3]);
  f.root = static_cast<int>(words[4]);
  f.input_numel = words[5];
  f.output_numel = words[6];
  const int64_t n_counts = std::min<int64_t>(words[7] & 0xffffffff, world_size);
  const int64_t n_recv = std::min<int64_t>(words[7] >> 32, world_size);
  f.counts.assign(words + 8, words + 8 + n_counts);
  f.recv_counts.assign(words + 8 + world_size, words + 8 + world_size + n_recv);
  return f;
}

std::optional<std::string_view> CallDifference(const CollectiveFingerprint& a,
                                               const CollectiveFingerprint& b) {
  if (b.op != a.op) return "different operations";
  if (b.dtype != a.dtype && a.op != OpType::kBarrier) return "different dtypes";
  if ((a.op == OpType::kAllreduce || a.op == OpType::kReduceScatter) &&
      b.reduce_op != a.reduce_op) {
    return "different reduce ops";
  }
  switch (a.op) {
    case OpType::kAllreduce:
    case OpType::kAllgather:
      if (b.input_numel != a.input_numel) return "different element counts";
      break;
    case OpType::kBroadcast:
      if (b.root != a.root) return "different roots";
      if (b.input_numel != a.input_numel) return "different element counts";
      break;
    case OpType::kAllgatherV:
    case OpType::kReduceScatter:
      if (b.counts != a.counts) return "different per-rank counts";
      break;
    case OpType::kAllToAllV:
    case OpType::kBarrier: break;
  }
  return std::nullopt;
}

absl::Status CheckCollectivesMatch(const std::vector<CollectiveFingerprint>& per_rank) {
  const int size = static_cast<int>(per_rank.size());
  const CollectiveFingerprint& first = per_rank[0];
  auto mismatch = [&](int a, int b, std::string_view what) {
    return absl::FailedPreconditionError(StrCat(
        "collective mismatch at sequence number ", first.sequence_number, " (", what, "): rank ", a,
        " called ", per_rank[a].Describe(), " but rank ", b, " called ", per_rank[b].Describe(),
        "; every rank must issue the same collectives in the same order with matching shapes"
        // PyTorch's ProcessGroupWrapper (TORCH_DISTRIBUTED_DEBUG=DETAIL) says it this way.
        " (PyTorch: \"Detected mismatch between collectives on ranks\")"));
  };
  for (int r = 1; r < size; ++r) {
    if (std::optional<std::string_view> what = CallDifference(first, per_rank[r])) {
      return mismatch(0, r, *what);
    }
  }
  if (first.op == OpType::kAllToAllV) {  // what i sends to j is what j expects from i
    for (int i = 0; i < size; ++i) {
      for (int j = 0; j < size; ++j) {
        if (per_rank[i].counts.at(j) != per_rank[j].recv_counts.at(i)) {
          return mismatch(i, j,
                          StrCat("rank ", i, " sends ", per_rank[i].counts[j], " elements to rank ",
                                 j, ", which expects ", per_rank[j].recv_counts[i]));
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckCollectivesMatchByAllgather(const Collective& c, int world_size,
                                              const FingerprintGather& gather) {
  const CollectiveFingerprint mine = CollectiveFingerprint::Of(c);
  std::vector<int64_t> local = mine.Encode(world_size);
  std::vector<int64_t> all(local.size() * world_size);
  if (absl::Status s = gather(local, all); !s.ok()) {
    return absl::Status(s.code(), StrCat("DETAIL check before sequence number ",
                                         mine.sequence_number, " failed: ", s.message()));
  }
  std::vector<CollectiveFingerprint> prints;
  for (int r = 0; r < world_size; ++r) {
    prints.push_back(CollectiveFingerprint::Decode(all.data() + r * local.size(), world_size));
  }
  return CheckCollectivesMatch(prints);
}

}  // namespace ddpkit::comm
