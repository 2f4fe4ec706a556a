// Any bytes a peer can send the store, decoded frame by frame as the server does: frames,
// "read more", or DataLoss — never a crash or an allocation of an announced length.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "comm/store/frame.h"

using ddpkit::comm::DecodeFrame;
using ddpkit::comm::Frame;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  // The first byte picks the limit, as the server uses two (before and after a token).
  const uint32_t limit = size > 0 && (data[0] & 1) ? 4096 : ddpkit::comm::kMaxFrameBytes;
  while (true) {
    absl::StatusOr<std::optional<Frame>> frame = DecodeFrame(rest, limit);
    if (!frame.ok() || !frame->has_value()) return 0;
    const Frame& f = **frame;
    if (f.size != 4 + f.payload.size() || f.size > rest.size() || f.payload.size() > limit ||
        f.payload.data() != rest.data() + 4) {
      std::abort();  // a frame that is not where, or as long as, its header says
    }
    absl::StatusOr<ddpkit::comm::store::StoreRequest> request =
        ddpkit::comm::DecodeRequest(f.payload);
    if (request.ok()) {  // a request that decodes re-encodes into a frame that decodes to it
      const std::string encoded = ddpkit::comm::EncodeFrame(request->SerializeAsString());
      absl::StatusOr<std::optional<Frame>> again = DecodeFrame(encoded);
      if (!again.ok() || !again->has_value()) std::abort();
      absl::StatusOr<ddpkit::comm::store::StoreRequest> back =
          ddpkit::comm::DecodeRequest((*again)->payload);
      if (!back.ok() || back->op_case() != request->op_case()) std::abort();
    }
    (void)ddpkit::comm::DecodeResponse(f.payload);
    rest.remove_prefix(f.size);
  }
}
