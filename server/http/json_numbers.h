// The numbers of the REST binding's JSON, both ways: text into a tensor's
// datatype (correctly rounded, with std::from_chars; NaN and Infinity as
// Python's json and JavaScript write them; an integer out of its type's
// range, a fraction for an integer type or a float past its type's range is
// refused, never clipped), and values back into their shortest exact text.
//
//   uint8_t out[4];
//   if (!ConvertNumber(DataType::kFP32, "0.1", out)) ...   // 0.1f
//   std::string text;
//   AppendJsonNumber(0.1f, &text);                         // "0.1"
#ifndef GEMMSERVE_SERVER_HTTP_JSON_NUMBERS_H_
#define GEMMSERVE_SERVER_HTTP_JSON_NUMBERS_H_

#include <charconv>
#include <cstdint>
#include <string>
#include <system_error>
#include <type_traits>

#include "absl/strings/string_view.h"
#include "server/tensor/datatype.h"

namespace gemmserve {

// No '.', exponent, NaN or Infinity: the text of an integer.
inline bool LooksIntegral(absl::string_view s) {
  return s.find_first_of(".eEIN") == absl::string_view::npos;
}

// An integral JSON number as T; false when it is a fraction or out of T's
// range ("-0" is 0 for unsigned types).
template <typename T>
bool ParseInteger(absl::string_view s, T* out) {
  if (!LooksIntegral(s)) return false;
  if (std::is_unsigned_v<T> && !s.empty() && s[0] == '-') {
    if (s.find_first_not_of('0', 1) != absl::string_view::npos) return false;
    *out = 0;
    return true;
  }
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

// Writes one JSON number into `dst` as `type`; false when it does not fit
// (not an integer for an integer type, or out of range).
bool ConvertNumber(DataType type, absl::string_view s, uint8_t* dst);

// Value rounding of JSON numbers into half types, to nearest even: false
// when the finite value is out of the type's range.
bool DoubleToBFloat16(double v, uint16_t* out);
bool DoubleToHalf(double v, uint16_t* out);

// Shortest text that reads back as the same value; NaN and infinities as
// JavaScript and Python write them (NaN, Infinity, -Infinity).
void AppendJsonNumber(float v, std::string* out);
void AppendJsonNumber(double v, std::string* out);

template <typename T>
void AppendInteger(T v, std::string* out) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out->append(buf, end);
}

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_HTTP_JSON_NUMBERS_H_
