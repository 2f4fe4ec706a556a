#include "tools/cli/print_json.h"

#include <cstdint>
#include <iostream>

#include "absl/strings/escaping.h"
#include "autograd/base/error.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"

namespace ddpkit::cli {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;
using Json = nlohmann::ordered_json;

Json MessageToJson(const Message& m);

// One value of a field: element `i` of a repeated field, or the field itself (i < 0).
Json ValueToJson(const Message& m, const FieldDescriptor* f, int i) {
  const Reflection* r = m.GetReflection();
  const bool rep = i >= 0;
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return rep ? r->GetRepeatedInt32(m, f, i) : r->GetInt32(m, f);
    case FieldDescriptor::CPPTYPE_INT64:
      return rep ? r->GetRepeatedInt64(m, f, i) : r->GetInt64(m, f);
    case FieldDescriptor::CPPTYPE_UINT32:
      return rep ? r->GetRepeatedUInt32(m, f, i) : r->GetUInt32(m, f);
    case FieldDescriptor::CPPTYPE_UINT64:
      return rep ? r->GetRepeatedUInt64(m, f, i) : r->GetUInt64(m, f);
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return rep ? r->GetRepeatedDouble(m, f, i) : r->GetDouble(m, f);
    case FieldDescriptor::CPPTYPE_FLOAT:
      return rep ? r->GetRepeatedFloat(m, f, i) : r->GetFloat(m, f);
    case FieldDescriptor::CPPTYPE_BOOL: return rep ? r->GetRepeatedBool(m, f, i) : r->GetBool(m, f);
    case FieldDescriptor::CPPTYPE_ENUM:
      return (rep ? r->GetRepeatedEnum(m, f, i) : r->GetEnum(m, f))->name();
    case FieldDescriptor::CPPTYPE_STRING: {
      std::string s = rep ? r->GetRepeatedString(m, f, i) : r->GetString(m, f);
      // Bytes are base64, as proto3's JSON mapping writes them; strings are UTF-8 already.
      return f->type() == FieldDescriptor::TYPE_BYTES ? absl::Base64Escape(s) : s;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return MessageToJson(rep ? r->GetRepeatedMessage(m, f, i) : r->GetMessage(m, f));
  }
  return nullptr;
}

// A map field: a JSON object keyed by the entries' keys written as text.
Json MapToJson(const Message& m, const FieldDescriptor* f) {
  Json object = Json::object();
  const Reflection* r = m.GetReflection();
  for (int i = 0; i < r->FieldSize(m, f); ++i) {
    const Message& entry = r->GetRepeatedMessage(m, f, i);
    const Json key = ValueToJson(entry, f->message_type()->map_key(), -1);
    object[key.is_string() ? key.get<std::string>() : key.dump()] =
        ValueToJson(entry, f->message_type()->map_value(), -1);
  }
  return object;
}

// A well-known type (google.protobuf.ListValue, Struct, Timestamp, ...) as proto3's mapping
// writes it: a list as a list, a timestamp as its RFC 3339 string.
Json WellKnownToJson(const Message& m) {
  std::string json;
  const auto status = google::protobuf::util::MessageToJsonString(m, &json);
  // Printing a well-formed message cannot fail; a failure would be a bug in the schema.
  DDPKIT_CHECK(status.ok(), "[ReportToJson] ", m.GetTypeName(), ": ", status.ToString());
  return Json::parse(json);
}

// Every field in .proto order, defaults too; a submessage or `optional` field only when set.
Json MessageToJson(const Message& m) {
  if (m.GetDescriptor()->file()->package() == "google.protobuf") return WellKnownToJson(m);
  Json object = Json::object();
  const Reflection* r = m.GetReflection();
  for (int k = 0; k < m.GetDescriptor()->field_count(); ++k) {
    const FieldDescriptor* f = m.GetDescriptor()->field(k);
    if (f->is_map()) {
      object[f->name()] = MapToJson(m, f);
    } else if (f->is_repeated()) {
      Json list = Json::array();
      for (int i = 0; i < r->FieldSize(m, f); ++i) list.push_back(ValueToJson(m, f, i));
      object[f->name()] = std::move(list);
    } else if (!f->has_presence() || r->HasField(m, f)) {
      object[f->name()] = ValueToJson(m, f, -1);
    }
  }
  return object;
}

}  // namespace

std::string ReportToJson(const google::protobuf::Message& report) {
  Json json = Json::object();
  json["schema_version"] = kReportSchemaVersion;
  json["report"] = report.GetDescriptor()->name();
  json.update(MessageToJson(report));
  // A NaN or infinity (a diverged loss) prints as null: JSON has no such numbers.
  return json.dump(2) + "\n";
}

void PrintJson(const google::protobuf::Message& report) { std::cout << ReportToJson(report); }

}  // namespace ddpkit::cli
