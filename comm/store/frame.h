// The store's wire format as pure functions over bytes, apart from any socket:
//   [4 bytes: little-endian length N][N bytes: a serialised StoreRequest or StoreResponse]
// Decoding never trusts its input: a length over the limit, bytes that do not parse, or a
// request with no operation is a DataLoss status, never a crash or a large allocation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "comm/store/store.pb.h"

namespace ddpkit::comm {

inline constexpr uint32_t kMaxFrameBytes = 16u << 20;

// One whole frame at the start of a buffer: its payload (a view into the buffer) and the bytes
// it takes, header included.
struct Frame {
  std::string_view payload;
  size_t size = 0;
};

// The length header followed by `payload` (the caller keeps payloads within the limit).
std::string EncodeFrame(std::string_view payload);

// The payload length a frame header announces (`header` holds at least 4 bytes); DataLoss when
// it is over `limit`.
absl::StatusOr<uint32_t> DecodeFrameLength(std::string_view header,
                                           uint32_t limit = kMaxFrameBytes);

// The first frame of `bytes`: std::nullopt while it is incomplete (read more), DataLoss when it
// announces more than `limit` bytes.
absl::StatusOr<std::optional<Frame>> DecodeFrame(std::string_view bytes,
                                                 uint32_t limit = kMaxFrameBytes);

// A frame's payload as a request with an operation set; DataLoss otherwise.
absl::StatusOr<store::StoreRequest> DecodeRequest(std::string_view payload);

// A frame's payload as a response; DataLoss when it does not parse.
absl::StatusOr<store::StoreResponse> DecodeResponse(std::string_view payload);

}  // namespace ddpkit::comm
