#include "tools/cli/print_json.h"

#include <iostream>

#include "autograd/error.h"
#include "google/protobuf/util/json_util.h"

namespace ddpkit::cli {

std::string ReportToJson(const google::protobuf::Message& report) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string json;
  // Printing a well-formed message cannot fail; a failure would be a bug in the schema.
  const auto status = google::protobuf::util::MessageToJsonString(report, &json, options);
  DDPKIT_CHECK(status.ok(), "[ReportToJson] ", status.ToString());
  return json;
}

void PrintJson(const google::protobuf::Message& report) { std::cout << ReportToJson(report); }

}  // namespace ddpkit::cli
