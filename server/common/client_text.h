// Names that clients choose (model, input and output names, datatype strings)
// appear in error messages. ClientText shows them escaped and cut short, so a
// hostile name can neither inject control characters into logs nor inflate a
// message.
//
//   absl::StrCat("unknown model '", ClientText(name), "'")
#ifndef GEMMSERVE_SERVER_COMMON_CLIENT_TEXT_H_
#define GEMMSERVE_SERVER_COMMON_CLIENT_TEXT_H_

#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/string_view.h"

namespace gemmserve {

inline std::string ClientText(absl::string_view text, size_t max_chars = 64) {
  std::string shown = absl::CHexEscape(text.substr(0, max_chars));
  if (text.size() > max_chars) shown += "...";
  return shown;
}

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_COMMON_CLIENT_TEXT_H_
