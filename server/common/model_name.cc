#include "server/common/model_name.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "server/common/client_text.h"

namespace gemmserve {

absl::Status ValidateModelName(absl::string_view name) {
  bool ok = !name.empty() && name.size() <= kMaxModelNameLength && name.front() != '.';
  for (char c : name) {
    ok &= absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
  }
  if (!ok) {
    if (name.empty()) return absl::InvalidArgumentError("model name is empty");
    return absl::InvalidArgumentError(absl::StrCat(
        "model name '", ClientText(name), "' is not valid: it must be 1 to ", kMaxModelNameLength,
        " characters of A-Z a-z 0-9 _ . - and not start with '.'"));
  }
  if (name == kUnknownModelLabel) {
    return absl::InvalidArgumentError(
        absl::StrCat("model name '", kUnknownModelLabel,
                     "' is reserved (the metric label of requests naming no served model)"));
  }
  return absl::OkStatus();
}

absl::Status ValidateTensorName(absl::string_view name) {
  bool ok = !name.empty() && name.size() <= 256;
  for (char c : name) ok &= c > ' ' && c <= '~';
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor name '", ClientText(name),
                     "' is not valid: it must be 1 to 256 printable ASCII characters without "
                     "spaces"));
  }
  return absl::OkStatus();
}

}  // namespace gemmserve
