#include "autograd/nn/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "absl/strings/str_join.h"
#include "autograd/base/file_util.h"
#include "autograd/cuda/runtime.h"

namespace ddpkit {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // the reference implementation's bound
constexpr std::string_view kMetadataKey = "__metadata__";

struct DTypeCode {
  std::string_view code;
  DType dtype;
};
constexpr DTypeCode kDTypeCodes[] = {
    {"F32", DType::kFloat32},   {"F64", DType::kFloat64}, {"F16", DType::kFloat16},
    {"BF16", DType::kBFloat16}, {"I32", DType::kInt32},   {"I64", DType::kInt64},
};

std::string_view CodeOf(DType dtype) {
  for (const DTypeCode& c : kDTypeCodes) {
    if (c.dtype == dtype) return c.code;
  }
  return "?";
}

// Builds "<source>: <message parts...>" DataLoss errors.
template <typename... Parts>
absl::Status Malformed(std::string_view source, const Parts&... parts) {
  return absl::DataLossError(StrCat(source, ": malformed safetensors file: ", parts...));
}

uint64_t ReadLittleEndianU64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

absl::StatusOr<Entry> ParseEntry(std::string_view source, const std::string& name,
                                 const nlohmann::json& value) {
  if (!value.is_object()) return Malformed(source, "tensor '", name, "' is not a JSON object");
  Entry entry{name, DType::kFloat32, {}, 0, 0};

  auto dtype = value.find("dtype");
  if (dtype == value.end() || !dtype->is_string()) {
    return Malformed(source, "tensor '", name, "' has no string \"dtype\"");
  }
  const std::string code = dtype->get<std::string>();
  auto known = std::find_if(std::begin(kDTypeCodes), std::end(kDTypeCodes),
                            [&](const DTypeCode& c) { return c.code == code; });
  if (known == std::end(kDTypeCodes)) {
    return absl::DataLossError(StrCat(source, ": tensor '", name, "' has dtype \"", code,
                                      "\", which ddpkit does not support (supported: F32, "
                                      "F64, F16, BF16, I32, I64)"));
  }
  entry.dtype = known->dtype;

  auto shape = value.find("shape");
  if (shape == value.end() || !shape->is_array()) {
    return Malformed(source, "tensor '", name, "' has no \"shape\" array");
  }
  uint64_t numel = 1;
  for (const nlohmann::json& extent : *shape) {
    if (!extent.is_number_unsigned()) {
      return Malformed(source, "tensor '", name, "' has a shape entry ", extent.dump(),
                       " that is not a non-negative integer");
    }
    const uint64_t e = extent.get<uint64_t>();
    if (e > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        (e != 0 && numel > std::numeric_limits<uint64_t>::max() / 16 / e)) {
      return Malformed(source, "tensor '", name, "' has an impossibly large shape ", shape->dump());
    }
    numel *= e;
    entry.shape.push_back(static_cast<int64_t>(e));
  }

  auto offsets = value.find("data_offsets");
  if (offsets == value.end() || !offsets->is_array() || offsets->size() != 2 ||
      !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
    return Malformed(source, "tensor '", name,
                     "' needs \"data_offsets\": [begin, end] with non-negative integers");
  }
  entry.begin = (*offsets)[0].get<uint64_t>();
  entry.end = (*offsets)[1].get<uint64_t>();
  if (entry.begin > entry.end) {
    return Malformed(source, "tensor '", name, "' has data_offsets [", entry.begin, ", ", entry.end,
                     "] that run backwards");
  }
  const uint64_t expected = numel * ElementSize(entry.dtype);
  if (entry.end - entry.begin != expected) {
    return Malformed(source, "tensor '", name, "' is ", code, ShapeString(entry.shape), " (",
                     expected, " bytes) but its data_offsets span ", entry.end - entry.begin,
                     " bytes");
  }
  return entry;
}

}  // namespace

const Tensor* SafetensorsFile::Find(std::string_view name) const {
  for (const auto& [n, t] : tensors) {
    if (n == name) return &t;
  }
  return nullptr;
}

absl::StatusOr<SafetensorsFile> ParseSafetensors(std::string_view bytes, std::string_view source,
                                                 Device device) {
  if (absl::Status usable = cuda::CheckUsable(device); !usable.ok()) {
    return absl::FailedPreconditionError(StrCat(source, ": cannot load onto ", usable.message()));
  }
  if (bytes.size() < 8) {
    return Malformed(source, "only ", bytes.size(),
                     " bytes; a safetensors file starts with an 8-byte header length");
  }
  const uint64_t header_size = ReadLittleEndianU64(bytes.data());
  if (header_size > kMaxHeaderBytes) {
    return Malformed(source, "header length ", header_size, " exceeds the ", kMaxHeaderBytes,
                     "-byte limit");
  }
  if (header_size > bytes.size() - 8) {
    return Malformed(source, "header length ", header_size, " exceeds the ", bytes.size() - 8,
                     " bytes that follow it (truncated file?)");
  }
  const std::string_view header = bytes.substr(8, header_size);
  const std::string_view data = bytes.substr(8 + header_size);

  nlohmann::json root;
  try {
    root = nlohmann::json::parse(header);
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for 1e999
    return Malformed(source, "header is not valid JSON (", e.what(), ")");
  }
  if (!root.is_object()) return Malformed(source, "header is not a JSON object");

  SafetensorsFile file;
  std::vector<Entry> entries;
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (it.key() == kMetadataKey) {
      if (!it.value().is_object()) return Malformed(source, "__metadata__ is not an object");
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        if (!m.value().is_string()) {
          return Malformed(source, "__metadata__ value for '", m.key(), "' is not a string");
        }
        file.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    absl::StatusOr<Entry> entry = ParseEntry(source, it.key(), it.value());
    if (!entry.ok()) return entry.status();
    if (entry->end > data.size()) {
      return Malformed(source, "tensor '", entry->name, "' has data_offsets [", entry->begin, ", ",
                       entry->end, "] beyond the ", data.size(),
                       "-byte data section (truncated file?)");
    }
    entries.push_back(*std::move(entry));
  }

  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < entries.size(); ++i) {
    if (entries[i].begin < entries[i - 1].end) {
      return Malformed(source, "tensors '", entries[i - 1].name, "' and '", entries[i].name,
                       "' overlap in the data section");
    }
  }
  for (const Entry& entry : entries) {
    Tensor t = Tensor::Empty(entry.shape, entry.dtype);
    if (t.nbytes() > 0) std::memcpy(t.raw_data(), data.data() + entry.begin, t.nbytes());
    file.tensors.emplace_back(entry.name, device.is_cuda() ? t.To(device) : std::move(t));
  }
  return file;
}

absl::StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path, Device device) {
  absl::StatusOr<std::string> bytes = ReadFileToString(path);
  if (!bytes.ok()) return bytes.status();
  return ParseSafetensors(*bytes, path, device);
}

std::string SerializeSafetensors(const NamedTensors& tensors,
                                 const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[std::string(kMetadataKey)] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    DDPKIT_CHECK(name != kMetadataKey, "[safetensors] '__metadata__' is reserved");
    DDPKIT_CHECK(!header.contains(name), "[safetensors] tensor name '", name, "' appears twice");
    header[name] = {{"dtype", CodeOf(tensor.dtype())},
                    {"shape", tensor.shape()},
                    {"data_offsets", {offset, offset + tensor.nbytes()}}};
    offset += tensor.nbytes();
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // pad so the data section is 8-byte aligned

  std::string out(8, '\0');
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i, n >>= 8) out[i] = static_cast<char>(n & 0xff);
  out += json;
  out.reserve(out.size() + offset);
  for (const auto& [name, tensor] : tensors) {
    const Tensor host = tensor.is_cuda() ? tensor.To(Device::Cpu()) : tensor;
    out.append(static_cast<const char*>(host.raw_data()), host.nbytes());
  }
  return out;
}

absl::Status WriteSafetensors(const std::string& path, const NamedTensors& tensors,
                              const std::map<std::string, std::string>& metadata) {
  return WriteFileAtomically(path, SerializeSafetensors(tensors, metadata));
}

absl::Status SaveStateDict(const nn::Module& module, const std::string& path) {
  return WriteSafetensors(path, module.StateDict(), {{"format", "pt"}});
}

namespace {

// The file's tensor for the model's `name`: under that name or, for a tied parameter, under
// another of its names (a PyTorch state dict lists a tied weight under every name).
const Tensor* SourceOf(const SafetensorsFile& file, const std::string& name, const Tensor& target,
                       const NamedTensors& aliases) {
  if (const Tensor* source = file.Find(name)) return source;
  for (const auto& [alias, tensor] : aliases) {
    if (tensor.impl() != target.impl()) continue;
    if (const Tensor* source = file.Find(alias)) return source;
  }
  return nullptr;
}

absl::Status CheckSource(const std::string& path, const std::string& name, const Tensor& source,
                         const Tensor& target) {
  if (source.shape() != target.shape()) {
    return absl::InvalidArgumentError(
        StrCat(path, ": tensor '", name, "' has shape ", ShapeString(source.shape()),
               " but the model's parameter has shape ", ShapeString(target.shape()),
               "; was the file saved from a different model?"));
  }
  if (!IsFloatingPoint(source.dtype()) && IsFloatingPoint(target.dtype())) {
    return absl::InvalidArgumentError(StrCat(path, ": tensor '", name, "' is ",
                                             DTypeName(source.dtype()),
                                             ", expected a floating-point tensor"));
  }
  return absl::OkStatus();
}

// The file's tensors that are no name of the model's.
std::vector<std::string> Unexpected(const SafetensorsFile& file, const NamedTensors& targets,
                                    const NamedTensors& aliases) {
  std::vector<std::string> unexpected;
  for (const NamedTensor& entry : file.tensors) {  // no structured binding: clang 14
    const std::string& name = entry.first;         // cannot capture one in a lambda
    auto named = [&](const NamedTensor& t) { return t.first == name; };
    if (std::none_of(targets.begin(), targets.end(), named) &&
        std::none_of(aliases.begin(), aliases.end(), named)) {
      unexpected.push_back(name);
    }
  }
  return unexpected;
}

}  // namespace

absl::Status LoadStateDict(nn::Module& module, const std::string& path) {
  absl::StatusOr<SafetensorsFile> file = ReadSafetensors(path);
  if (!file.ok()) return file.status();
  NamedTensors targets = module.NamedParameters();
  for (auto& buffer : module.NamedBuffers()) targets.push_back(std::move(buffer));
  const NamedTensors aliases = module.NamedParameterAliases();

  // Check everything first, so a mismatch leaves the module untouched.
  std::vector<std::string> missing;
  for (const auto& [name, target] : targets) {
    const Tensor* source = SourceOf(*file, name, target, aliases);
    if (source == nullptr) {
      missing.push_back(name);
      continue;
    }
    DDPKIT_RETURN_IF_ERROR(CheckSource(path, name, *source, target));
  }
  for (const auto& [alias, target] : aliases) {
    if (const Tensor* source = file->Find(alias)) {
      DDPKIT_RETURN_IF_ERROR(CheckSource(path, alias, *source, target));
    }
  }
  if (!missing.empty()) {
    return absl::InvalidArgumentError(
        StrCat(path, ": missing tensors for the model: ", absl::StrJoin(missing, ", ")));
  }
  if (std::vector<std::string> unexpected = Unexpected(*file, targets, aliases);
      !unexpected.empty()) {
    return absl::InvalidArgumentError(
        StrCat(path, ": tensors the model does not have: ", absl::StrJoin(unexpected, ", ")));
  }
  for (const auto& [name, target] : targets) {
    target.CopyFrom(*SourceOf(*file, name, target, aliases));
  }
  return absl::OkStatus();
}

}  // namespace ddpkit
