#include "server/repository/utf8_fields.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <google/protobuf/stubs/common.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gemmserve {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

bool IsUtf8(const std::string& s) {
  // protobuf's own check, the one its binary parser applies to proto3 strings.
  return google::protobuf::internal::IsStructurallyValidUTF8(s.data(),
                                                             static_cast<int>(s.size()));
}

absl::Status CheckMessage(const Message& message, const std::string& path);

// Field `f` of `message` (its element `i` when repeated, else i < 0).
absl::Status CheckElement(const Message& message, const FieldDescriptor* f, int i,
                          const std::string& at) {
  const auto* r = message.GetReflection();
  if (f->type() == FieldDescriptor::TYPE_STRING) {
    std::string scratch;
    const std::string& value = i < 0 ? r->GetStringReference(message, f, &scratch)
                                     : r->GetRepeatedStringReference(message, f, i, &scratch);
    if (!IsUtf8(value)) return absl::InvalidArgumentError(absl::StrCat(at, " is not UTF-8"));
    return absl::OkStatus();
  }
  if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
    return CheckMessage(i < 0 ? r->GetMessage(message, f) : r->GetRepeatedMessage(message, f, i),
                        at);
  }
  return absl::OkStatus();
}

absl::Status CheckMessage(const Message& message, const std::string& path) {
  const auto* r = message.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r->ListFields(message, &fields);
  for (const FieldDescriptor* f : fields) {
    const std::string at = path.empty() ? f->name() : absl::StrCat(path, ".", f->name());
    if (!f->is_repeated()) {
      if (absl::Status s = CheckElement(message, f, -1, at); !s.ok()) return s;
      continue;
    }
    for (int i = 0; i < r->FieldSize(message, f); ++i) {
      if (absl::Status s = CheckElement(message, f, i, absl::StrCat(at, "[", i, "]")); !s.ok()) {
        return s;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckStringsAreUtf8(const Message& message) { return CheckMessage(message, ""); }

}  // namespace gemmserve
