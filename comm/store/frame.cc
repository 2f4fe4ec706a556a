#include "comm/store/frame.h"

#include <limits>

#include "autograd/base/error.h"

namespace ddpkit::comm {
namespace {

// Protobuf takes an int size; anything larger is not one of our frames.
bool FitsProtobuf(std::string_view payload) {
  return payload.size() <= static_cast<size_t>(std::numeric_limits<int>::max());
}

}  // namespace

std::string EncodeFrame(std::string_view payload) {
  std::string out(4, '\0');
  const uint64_t n = payload.size();
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out.append(payload);
  return out;
}

absl::StatusOr<uint32_t> DecodeFrameLength(std::string_view header, uint32_t limit) {
  DDPKIT_CHECK(header.size() >= 4, "[DecodeFrameLength] needs the 4-byte header, got ",
               header.size(), " bytes");
  uint32_t n = 0;
  for (int i = 3; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(header[i]);
  if (n > limit) {
    return absl::DataLossError(StrCat("frame of ", n, " bytes exceeds the ", limit, "-byte limit"));
  }
  return n;
}

absl::StatusOr<std::optional<Frame>> DecodeFrame(std::string_view bytes, uint32_t limit) {
  if (bytes.size() < 4) return std::nullopt;
  DDPKIT_ASSIGN_OR_RETURN(const uint32_t length, DecodeFrameLength(bytes, limit));
  if (bytes.size() - 4 < length) return std::nullopt;  // wait for the rest
  return Frame{bytes.substr(4, length), 4 + static_cast<size_t>(length)};
}

absl::StatusOr<store::StoreRequest> DecodeRequest(std::string_view payload) {
  store::StoreRequest request;
  if (!FitsProtobuf(payload) ||
      !request.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return absl::DataLossError(
        StrCat("a ", payload.size(), "-byte frame is not a valid store request"));
  }
  if (request.op_case() == store::StoreRequest::OP_NOT_SET) {
    return absl::DataLossError("request has no known operation");
  }
  return request;
}

absl::StatusOr<store::StoreResponse> DecodeResponse(std::string_view payload) {
  store::StoreResponse response;
  if (!FitsProtobuf(payload) ||
      !response.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return absl::DataLossError(
        StrCat("a ", payload.size(), "-byte frame is not a valid store response"));
  }
  return response;
}

}  // namespace ddpkit::comm
