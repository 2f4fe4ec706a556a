#include "comm/flight_recorder.h"

#include "absl/strings/str_format.h"

namespace ddpkit::comm {

std::string_view StateName(FlightRecorder::State state) {
  switch (state) {
    case FlightRecorder::State::kQueued: return "queued";
    case FlightRecorder::State::kRunning: return "running";
    case FlightRecorder::State::kCompleted: return "completed";
    case FlightRecorder::State::kFailed: return "failed";
  }
  return "?";
}

void FlightRecorder::Queued(const Collective& c) {
  Entry entry;
  entry.sequence_number = c.sequence_number;
  entry.tag = c.tag;
  entry.output_count = c.output.defined() ? c.output.numel() : 0;
  entry.op = c.op;
  entry.reduce_op = c.reduce_op;
  entry.root = c.root;
  entry.dtype = c.input.defined() ? c.input.dtype() : DType::kFloat32;
  entry.count = c.input.defined() ? c.input.numel() : 0;
  entry.queued = absl::Now();
  std::lock_guard<std::mutex> lock(mu_);
  entry.record_id = recorded_++;
  if (ring_.size() < capacity_) {
    ring_.push_back(entry);
  } else {
    ring_[next_] = entry;
    next_ = (next_ + 1) % capacity_;
  }
}

FlightRecorder::Entry* FlightRecorder::Find(uint64_t sequence_number) {
  for (Entry& e : ring_) {
    if (e.sequence_number == sequence_number) return &e;
  }
  return nullptr;
}

void FlightRecorder::Started(uint64_t sequence_number) {
  std::lock_guard<std::mutex> lock(mu_);
  if (Entry* e = Find(sequence_number)) {
    e->state = State::kRunning;
    e->started = absl::Now();
  }
}

void FlightRecorder::Finished(uint64_t sequence_number, bool ok) {
  std::lock_guard<std::mutex> lock(mu_);
  if (Entry* e = Find(sequence_number)) {
    e->state = ok ? State::kCompleted : State::kFailed;
    e->finished = absl::Now();
  }
}

std::string DescribeTag(const CollectiveTag& tag) {
  if (tag.purpose.empty()) return "";
  std::string out(tag.purpose);
  if (tag.bucket >= 0) absl::StrAppend(&out, " ", tag.bucket);
  if (tag.shadow) out += " (shadow)";
  return out;
}

std::vector<FlightRecorder::Entry> FlightRecorder::Entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Entry> out(ring_.begin() + next_, ring_.end());
  out.insert(out.end(), ring_.begin(), ring_.begin() + next_);
  return out;
}

std::string FlightRecorder::Dump() const {
  std::string out = absl::StrFormat("%6s  %-14s  %-8s  %10s  %-9s  %12s  %s\n", "seq", "op",
                                    "dtype", "count", "state", "duration", "for");
  for (const Entry& e : Entries()) {
    std::string duration = "-";
    if (e.finished != absl::Time())
      duration = absl::FormatDuration(e.finished - e.started);
    else if (e.started != absl::Time())
      duration = absl::FormatDuration(absl::Now() - e.started) + "+";
    const std::string tag = DescribeTag(e.tag);
    absl::StrAppendFormat(&out, "%6d  %-14s  %-8s  %10d  %-9s  %12s%s\n", e.sequence_number,
                          std::string(OpTypeName(e.op)), std::string(DTypeName(e.dtype)), e.count,
                          std::string(StateName(e.state)), duration, tag.empty() ? "" : "  " + tag);
  }
  return out;
}

}  // namespace ddpkit::comm
