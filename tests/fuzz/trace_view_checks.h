// What the trace harnesses (ddpkit's and PyTorch's traces) require of a view they accepted: ranks
// in order, each once, and every span and instant with finite times that do not run backwards.
#pragma once

#include <cmath>
#include <cstdlib>
#include <vector>

#include "tools/trace/trace_view.h"

namespace ddpkit::fuzz {

inline void CheckItems(const std::vector<trace::TraceItem>& items) {
  for (const trace::TraceItem& i : items) {
    if (!std::isfinite(i.start_us) || !std::isfinite(i.end_us) || i.end_us < i.start_us) {
      std::abort();
    }
  }
}

inline void CheckView(const trace::TraceView& view) {
  for (size_t r = 0; r < view.ranks.size(); ++r) {
    if (r > 0 && view.ranks[r].rank <= view.ranks[r - 1].rank) std::abort();
    CheckItems(view.ranks[r].phases);
    CheckItems(view.ranks[r].hooks);
    CheckItems(view.ranks[r].collectives);
    CheckItems(view.ranks[r].instants);
  }
}

}  // namespace ddpkit::fuzz
