// LoadTextData (dataset.h): a text file as characters, nanoGPT's shakespeare_char way.
#include <map>

#include "absl/strings/str_join.h"
#include "autograd/base/file_util.h"
#include "tools/jobs/dataset.h"

namespace ddpkit::jobs {
namespace {

// The file's UTF-8 characters, each as its bytes; InvalidArgument at the first malformed one.
absl::StatusOr<std::vector<std::string>> SplitCharacters(const std::string& path,
                                                         const std::string& text) {
  std::vector<std::string> chars;
  for (size_t i = 0; i < text.size();) {
    const auto lead = static_cast<unsigned char>(text[i]);
    const size_t n = lead < 0x80         ? 1
                     : (lead >> 5) == 6  ? 2
                     : (lead >> 4) == 14 ? 3
                     : (lead >> 3) == 30 ? 4
                                         : 0;
    bool ok = n > 0 && i + n <= text.size();
    for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(text[i + k]) >> 6) == 2;
    if (!ok) {
      return absl::InvalidArgumentError(StrCat(path, ": byte ", i,
                                               " is not valid UTF-8; --text reads a UTF-8 text "
                                               "file as characters"));
    }
    chars.push_back(text.substr(i, n));
    i += n;
  }
  return chars;
}

}  // namespace

absl::StatusOr<ClassificationData> LoadTextData(const std::string& path,
                                                const models::ModelIo& io) {
  if (io.input_dtype != DType::kInt64 || !io.per_position) {
    return absl::InvalidArgumentError(
        StrCat("--text ", path,
               ": the model does not take token rows; use a language model, "
               "e.g. --model gpt:layers=2,heads=2,dim=64,ctx=32,vocab=65"));
  }
  DDPKIT_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path));
  DDPKIT_ASSIGN_OR_RETURN(const std::vector<std::string> chars, SplitCharacters(path, text));
  std::map<std::string, int64_t> ids;  // sorted, as Python's sorted(set(text))
  for (const std::string& c : chars) ids.emplace(c, 0);
  if (static_cast<int64_t>(ids.size()) > io.classes) {
    return absl::InvalidArgumentError(StrCat("--text ", path, ": the text has ", ids.size(),
                                             " distinct characters but the model's vocabulary is ",
                                             io.classes, "; use vocab=", ids.size(), " or more"));
  }
  const int64_t length = io.row.at(0);
  const int64_t rows = (static_cast<int64_t>(chars.size()) - 1) / length;
  if (rows < 1) {
    return absl::InvalidArgumentError(StrCat("--text ", path, ": ", chars.size(),
                                             " characters are fewer than one row of ", length,
                                             " plus the one after it"));
  }
  ClassificationData data;
  for (auto& [c, id] : ids) {
    id = static_cast<int64_t>(data.vocabulary.size());
    data.vocabulary.push_back(c);
  }
  data.x = Tensor::Empty({rows, length}, DType::kInt64);
  data.y = Tensor::Empty({rows, length}, DType::kInt64);
  for (int64_t i = 0; i < rows * length; ++i) {
    data.x.data<int64_t>()[i] = ids[chars[i]];
    data.y.data<int64_t>()[i] = ids[chars[i + 1]];
  }
  data.description = StrCat(path, " (", chars.size(), " characters, ", ids.size(), " distinct, ",
                            rows, " rows of ", length, ")");
  return data;
}

}  // namespace ddpkit::jobs
