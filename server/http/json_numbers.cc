#include "server/http/json_numbers.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>

#include "server/tensor/half.h"

namespace gemmserve {
namespace {

bool IsSpecial(absl::string_view s, double* v) {
  if (s == "NaN" || s == "-NaN") {
    *v = std::numeric_limits<double>::quiet_NaN();
  } else if (s == "Infinity" || s == "Inf") {
    *v = std::numeric_limits<double>::infinity();
  } else if (s == "-Infinity" || s == "-Inf") {
    *v = -std::numeric_limits<double>::infinity();
  } else {
    return false;
  }
  return true;
}


// A finite decimal as T, correctly rounded; false when out of T's range
// (a value too small rounds to zero or a subnormal, as strtod does).
template <typename T>
bool ParseFloat(absl::string_view s, T* out) {
  // A JSON number ends in a digit; only RapidJSON's NaN and Infinity tokens
  // end in a letter.
  double special;
  if (!s.empty() && (s.back() < '0' || s.back() > '9') && IsSpecial(s, &special)) {
    *out = static_cast<T>(special);
    return true;
  }
  T v;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec == std::errc() && end == s.data() + s.size()) {
    *out = v;
    return true;
  }
  if (ec != std::errc::result_out_of_range) return false;
  // Overflow or underflow: strtod tells them apart (the text is a valid
  // JSON number, so nothing but the range is wrong).
  const std::string text(s);
  const double d = std::strtod(text.c_str(), nullptr);
  if (std::isinf(d) || std::fabs(d) > static_cast<double>(std::numeric_limits<T>::max())) {
    return false;
  }
  *out = static_cast<T>(d);
  return true;
}


// Rounds to float with round-to-odd, after which rounding to a narrower type
// to nearest even is exact (float has more than two extra bits).
float RoundToOddFloat(double v) {
  float f = static_cast<float>(v);
  if (static_cast<double>(f) != v && !std::isnan(v)) {
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    if ((bits & 1u) == 0) {
      f = std::nextafter(f, v > static_cast<double>(f) ? std::numeric_limits<float>::infinity()
                                                       : -std::numeric_limits<float>::infinity());
    }
  }
  return f;
}

// `s` parsed as a T (a float type rounds, an integer type must fit), its
// bytes written to `dst`.
template <typename T>
bool ParseInto(absl::string_view s, uint8_t* dst) {
  T v;
  if constexpr (std::is_floating_point_v<T>) {
    if (!ParseFloat(s, &v)) return false;
  } else {
    if (!ParseInteger(s, &v)) return false;
  }
  std::memcpy(dst, &v, sizeof(T));
  return true;
}

}  // namespace

// Writes one JSON number into `dst` as `type`; false when it does not fit
// (not an integer for an integer type, or out of range).
bool ConvertNumber(DataType type, absl::string_view s, uint8_t* dst) {
  switch (type) {
    case DataType::kFP32: return ParseInto<float>(s, dst);
    case DataType::kFP64: return ParseInto<double>(s, dst);
    case DataType::kBF16:
    case DataType::kFP16: {
      double d;
      uint16_t h;
      if (!ParseFloat(s, &d)) return false;
      if (!(type == DataType::kBF16 ? DoubleToBFloat16(d, &h) : DoubleToHalf(d, &h))) return false;
      std::memcpy(dst, &h, 2);
      return true;
    }
    case DataType::kINT32: return ParseInto<int32_t>(s, dst);
    case DataType::kINT64: return ParseInto<int64_t>(s, dst);
    case DataType::kUINT32: return ParseInto<uint32_t>(s, dst);
    case DataType::kUINT64: return ParseInto<uint64_t>(s, dst);
  }
  return false;
}

bool DoubleToBFloat16(double v, uint16_t* out) {
  const uint16_t h = FloatToBFloat16(RoundToOddFloat(v));
  if (std::isfinite(v) && (h & 0x7fffu) == 0x7f80u) return false;
  *out = h;
  return true;
}

bool DoubleToHalf(double v, uint16_t* out) {
  const uint16_t h = FloatToHalf(RoundToOddFloat(v));
  if (std::isfinite(v) && (h & 0x7fffu) == 0x7c00u) return false;
  *out = h;
  return true;
}

void AppendJsonNumber(float v, std::string* out) {
  if (std::isnan(v)) {
    out->append("NaN");
  } else if (std::isinf(v)) {
    out->append(v > 0 ? "Infinity" : "-Infinity");
  } else {
    char buf[32];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
    out->append(buf, end);
  }
}

void AppendJsonNumber(double v, std::string* out) {
  if (std::isnan(v)) {
    out->append("NaN");
  } else if (std::isinf(v)) {
    out->append(v > 0 ? "Infinity" : "-Infinity");
  } else {
    char buf[40];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
    out->append(buf, end);
  }
}

}  // namespace gemmserve
