// The manifest: parsing any bytes without trusting them, and writing it. Pure (no file
// system), so a fuzzer can link it with little more than nlohmann_json and Abseil.
#include "tools/checkpoint/manifest.h"

#include <charconv>
#include <set>

#include "absl/strings/str_format.h"
#include "autograd/base/error.h"
#include "nlohmann/json.hpp"

namespace ddpkit::checkpoint {
namespace {

using Json = nlohmann::json;

constexpr char kFormat[] = "ddpkit-checkpoint";
constexpr char kFolderPrefix[] = "step-";

absl::Status Bad(std::string_view what) {
  return absl::DataLossError(StrCat("checkpoint manifest: ", what));
}

// An unsigned integer field of at most `max`.
absl::StatusOr<uint64_t> UnsignedField(const Json& object, const char* key, uint64_t max,
                                       std::string_view where) {
  const auto it = object.find(key);
  if (it == object.end()) return Bad(StrCat(where, " has no \"", key, "\""));
  if (!it->is_number_unsigned() || it->get<uint64_t>() > max) {
    return Bad(StrCat(where, "'s \"", key, "\" must be an integer in [0, ", max, "]"));
  }
  return it->get<uint64_t>();
}

bool IsPlainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.size() <= 255 &&
         name.find_first_of(std::string_view("/\0", 2)) == std::string::npos;
}

absl::StatusOr<CheckpointFile> ParseFileEntry(const Json& entry, size_t index) {
  const std::string where = StrCat("files[", index, "]");
  if (!entry.is_object()) return Bad(StrCat(where, " is not an object"));
  const auto name = entry.find("name");
  if (name == entry.end() || !name->is_string()) return Bad(StrCat(where, " has no string name"));
  CheckpointFile file{.name = name->get<std::string>()};
  if (!IsPlainFileName(file.name) || file.name == kManifestFileName) {
    return Bad(StrCat(where, " has a name that is not a plain file name of the checkpoint"));
  }
  DDPKIT_ASSIGN_OR_RETURN(file.size, UnsignedField(entry, "size", UINT64_MAX, where));
  DDPKIT_ASSIGN_OR_RETURN(const uint64_t crc, UnsignedField(entry, "crc32", UINT32_MAX, where));
  file.crc32 = static_cast<uint32_t>(crc);
  return file;
}

absl::StatusOr<CheckpointManifest> ParseDocument(const Json& doc) {
  if (!doc.is_object()) return Bad("not a JSON object");
  const auto format = doc.find("format");
  if (format == doc.end() || *format != kFormat) {
    return Bad(StrCat("\"format\" is not \"", kFormat, "\""));
  }
  DDPKIT_ASSIGN_OR_RETURN(const uint64_t version, UnsignedField(doc, "version", INT32_MAX, "it"));
  if (version != kCheckpointFormatVersion) {
    return Bad(StrCat("version ", version, " is not ", kCheckpointFormatVersion,
                      " (written by another ddpkit?)"));
  }
  CheckpointManifest manifest;
  DDPKIT_ASSIGN_OR_RETURN(const uint64_t step, UnsignedField(doc, "step", INT64_MAX, "it"));
  manifest.step = static_cast<int64_t>(step);
  const auto files = doc.find("files");
  if (files == doc.end() || !files->is_array()) return Bad("\"files\" is not an array");
  std::set<std::string> seen;
  for (size_t i = 0; i < files->size(); ++i) {
    DDPKIT_ASSIGN_OR_RETURN(CheckpointFile file, ParseFileEntry((*files)[i], i));
    if (!seen.insert(file.name).second) return Bad(StrCat("'", file.name, "' is listed twice"));
    manifest.files.push_back(std::move(file));
  }
  return manifest;
}

}  // namespace

const CheckpointFile* CheckpointManifest::Find(std::string_view name) const {
  for (const CheckpointFile& file : files) {
    if (file.name == name) return &file;
  }
  return nullptr;
}

absl::StatusOr<CheckpointManifest> ParseCheckpointManifest(std::string_view bytes) {
  // No exceptions from the parser (allow_exceptions = false); the accessors above check types
  // before every get, and the catch is a last guard so no input can escape as an exception.
  try {
    const Json doc = Json::parse(bytes.begin(), bytes.end(), nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded()) return Bad("not valid JSON");
    return ParseDocument(doc);
  } catch (const std::exception& e) {
    return Bad(StrCat("unreadable: ", e.what()));
  }
}

std::string SerializeCheckpointManifest(const CheckpointManifest& manifest) {
  Json files = Json::array();
  for (const CheckpointFile& f : manifest.files) {
    files.push_back({{"name", f.name}, {"size", f.size}, {"crc32", f.crc32}});
  }
  nlohmann::ordered_json doc = {{"format", kFormat},
                                {"version", kCheckpointFormatVersion},
                                {"step", manifest.step},
                                {"files", files}};
  return doc.dump(2) + "\n";
}

std::string CheckpointFolderName(int64_t step) {
  return absl::StrFormat("%s%08d", kFolderPrefix, step);
}

std::optional<int64_t> StepOfCheckpointFolder(std::string_view name) {
  const std::string_view prefix = kFolderPrefix;
  if (name.size() <= prefix.size() || name.substr(0, prefix.size()) != prefix) return std::nullopt;
  const std::string_view digits = name.substr(prefix.size());
  int64_t step = -1;
  const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (ec != std::errc() || ptr != digits.data() + digits.size() || step < 0) return std::nullopt;
  if (CheckpointFolderName(step) != name) return std::nullopt;  // one spelling per step
  return step;
}

}  // namespace ddpkit::checkpoint
