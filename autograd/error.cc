#include "autograd/error.h"

namespace ddpkit {

void ThrowStatus(const absl::Status& status) {
  throw Error(std::string(status.message()), status.code());
}

}  // namespace ddpkit
