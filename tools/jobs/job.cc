#include "tools/jobs/job.h"

#include <algorithm>

namespace ddpkit::jobs {

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::nth_element(values.begin(), values.begin() + values.size() / 2, values.end());
  return values[values.size() / 2];
}

}  // namespace ddpkit::jobs
