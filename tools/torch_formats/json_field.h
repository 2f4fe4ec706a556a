// A JSON value and where it sits in a file ("compiled.nodes[3].users[0]"), so that every error a
// reader of outside JSON returns names the field and what was expected: the plan file reads
// through it (plan_file.cc, and its compiled section in compiled_record.cc).
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "autograd/base/error.h"
#include "nlohmann/json.hpp"

namespace ddpkit::torch_formats {

class JsonField {
 public:
  JsonField(const nlohmann::json& value, std::string path)
      : value_(value), path_(std::move(path)) {}

  const std::string& path() const { return path_; }
  const nlohmann::json& value() const { return value_; }

  // InvalidArgument: "<path>: expected <what>, got <the value, cut at 40 characters>".
  absl::Status Expected(std::string_view what) const {
    std::string got = value_.dump();
    if (got.size() > 40) got = got.substr(0, 37) + "...";
    return absl::InvalidArgumentError(
        StrCat(path_.empty() ? "the file" : path_, ": expected ", what, ", got ", got));
  }
  bool Has(std::string_view key) const {
    return value_.is_object() && value_.contains(std::string(key));
  }
  bool IsNull() const { return value_.is_null(); }
  absl::StatusOr<JsonField> Member(std::string_view key) const {
    if (!value_.is_object()) return Expected("an object");
    const std::string child = path_.empty() ? std::string(key) : StrCat(path_, ".", key);
    if (!Has(key)) return absl::InvalidArgumentError(StrCat(child, ": missing"));
    return JsonField(value_.at(std::string(key)), child);
  }
  absl::StatusOr<std::vector<JsonField>> List() const {
    if (!value_.is_array()) return Expected("a list");
    std::vector<JsonField> items;
    for (size_t i = 0; i < value_.size(); ++i) {
      items.emplace_back(value_[i], StrCat(path_, "[", i, "]"));
    }
    return items;
  }
  absl::StatusOr<std::string> String() const {
    if (!value_.is_string()) return Expected("a string");
    return value_.get<std::string>();
  }
  absl::StatusOr<bool> Bool() const {
    if (!value_.is_boolean()) return Expected("true or false");
    return value_.get<bool>();
  }
  absl::StatusOr<double> Number() const {
    if (!value_.is_number()) return Expected("a number");
    return value_.get<double>();
  }
  // An integer in [min, max].
  absl::StatusOr<int64_t> Int(int64_t min,
                              int64_t max = std::numeric_limits<int64_t>::max()) const {
    const bool fits =
        value_.is_number_integer() &&
        (!value_.is_number_unsigned() || value_.get<uint64_t>() <= static_cast<uint64_t>(max));
    const int64_t v = fits ? value_.get<int64_t>() : 0;
    if (!fits || v < min || v > max) {
      return Expected(max == std::numeric_limits<int64_t>::max()
                          ? StrCat("an integer >= ", min)
                          : StrCat("an integer in [", min, ", ", max, "]"));
    }
    return v;
  }
  absl::StatusOr<std::vector<int64_t>> Ints(int64_t min, int64_t max) const {
    DDPKIT_ASSIGN_OR_RETURN(const std::vector<JsonField> items, List());
    std::vector<int64_t> out;
    for (const JsonField& item : items) {
      DDPKIT_ASSIGN_OR_RETURN(const int64_t v, item.Int(min, max));
      out.push_back(v);
    }
    return out;
  }
  absl::StatusOr<std::vector<std::vector<int64_t>>> IntLists(int64_t min, int64_t max) const {
    DDPKIT_ASSIGN_OR_RETURN(const std::vector<JsonField> items, List());
    std::vector<std::vector<int64_t>> out;
    for (const JsonField& item : items) {
      DDPKIT_ASSIGN_OR_RETURN(std::vector<int64_t> v, item.Ints(min, max));
      out.push_back(std::move(v));
    }
    return out;
  }

 private:
  const nlohmann::json& value_;
  std::string path_;
};

}  // namespace ddpkit::torch_formats
