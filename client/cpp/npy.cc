#include "client/cpp/npy.h"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/common/status_macros.h"
#include "server/tensor/shape.h"

namespace gemmserve::client {
namespace {

constexpr absl::string_view kMagic = "\x93NUMPY";
// Magic, two version bytes, then the header length: 2 bytes in version 1.0,
// 4 bytes in version 2.0.
constexpr size_t kPrefixV1 = 10;
constexpr size_t kPrefixV2 = 12;
// numpy aligns the data to 64 bytes so that it can be memory-mapped.
constexpr size_t kAlignment = 64;
constexpr size_t kGrowthDigits = 21;

struct Dtype {
  absl::string_view descr;
  absl::string_view datatype;
  int64_t size;
};

// '<u2' comes last so that looking up FP16 by datatype finds '<f2'.
constexpr Dtype kDtypes[] = {
    {"<f2", "FP16", 2},  {"<f4", "FP32", 4},   {"<f8", "FP64", 8},   {"<i4", "INT32", 4},
    {"<i8", "INT64", 8}, {"<u4", "UINT32", 4}, {"<u8", "UINT64", 8}, {"<u2", "BF16", 2},
};

const Dtype* FindByDescr(absl::string_view descr) {
  for (const Dtype& d : kDtypes) {
    if (d.descr == descr) return &d;
  }
  return nullptr;
}

const Dtype* FindByDatatype(absl::string_view datatype) {
  for (const Dtype& d : kDtypes) {
    if (d.datatype == datatype) return &d;
  }
  return nullptr;
}

absl::Status Malformed(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("malformed .npy header: ", what));
}

// The header is a Python dict literal, e.g.
//   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
// This parser accepts exactly the literals numpy writes for it (either quote
// style, any whitespace, optional trailing commas) and nothing else, so no
// Python evaluation is needed to read what numpy wrote.
class HeaderParser {
 public:
  explicit HeaderParser(absl::string_view text) : text_(text) {}

  struct Header {
    std::string descr;
    bool fortran_order = false;
    std::vector<int64_t> shape;
  };

  absl::StatusOr<Header> Parse() {
    Header header;
    bool have_descr = false, have_order = false, have_shape = false;
    SkipSpace();
    if (!Consume('{')) return Malformed("expected '{'");
    while (true) {
      SkipSpace();
      if (Consume('}')) break;
      GEMMSERVE_ASSIGN_OR_RETURN(std::string key, ParseString());
      SkipSpace();
      if (!Consume(':')) return Malformed(absl::StrCat("expected ':' after '", key, "'"));
      SkipSpace();
      bool* seen = nullptr;
      if (key == "descr") {
        seen = &have_descr;
        GEMMSERVE_ASSIGN_OR_RETURN(header.descr, ParseString());
      } else if (key == "fortran_order") {
        seen = &have_order;
        GEMMSERVE_ASSIGN_OR_RETURN(header.fortran_order, ParseBool());
      } else if (key == "shape") {
        seen = &have_shape;
        GEMMSERVE_ASSIGN_OR_RETURN(header.shape, ParseShape());
      } else {
        return Malformed(absl::StrCat("unexpected key '", key, "'"));
      }
      if (*seen) return Malformed(absl::StrCat("duplicate key '", key, "'"));
      *seen = true;
      SkipSpace();
      if (Consume(',')) continue;
      if (!Consume('}')) return Malformed("expected ',' or '}'");
      break;
    }
    SkipSpace();
    if (pos_ != text_.size()) return Malformed("trailing characters after the dict");
    if (!have_descr || !have_order || !have_shape) {
      return Malformed("'descr', 'fortran_order' and 'shape' are all required");
    }
    return header;
  }

 private:
  void SkipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  bool Consume(char c) {
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  bool ConsumeWord(absl::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  // A quoted string without escapes (numpy never writes any).
  absl::StatusOr<std::string> ParseString() {
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) {
      return Malformed("expected a quoted string");
    }
    const char quote = text_[pos_++];
    const size_t end = text_.find(quote, pos_);
    if (end == absl::string_view::npos) return Malformed("unterminated string");
    std::string value(text_.substr(pos_, end - pos_));
    if (value.find('\\') != std::string::npos) return Malformed("escapes in a string");
    pos_ = end + 1;
    return value;
  }

  absl::StatusOr<bool> ParseBool() {
    if (ConsumeWord("True")) return true;
    if (ConsumeWord("False")) return false;
    return Malformed("'fortran_order' must be True or False");
  }

  absl::StatusOr<int64_t> ParseDimension() {
    const size_t start = pos_;
    int64_t value = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      if (__builtin_mul_overflow(value, 10, &value) ||
          __builtin_add_overflow(value, text_[pos_] - '0', &value)) {
        return Malformed("dimension overflows int64");
      }
      ++pos_;
    }
    if (pos_ == start) return Malformed("expected a non-negative integer in 'shape'");
    return value;
  }

  // A Python tuple of ints: "()", "(3,)", "(3, 4)", "(3, 4,)". "(3)" is an int
  // in Python, not a tuple, so numpy would reject it and so do we.
  absl::StatusOr<std::vector<int64_t>> ParseShape() {
    if (!Consume('(')) return Malformed("'shape' must be a tuple");
    std::vector<int64_t> shape;
    bool trailing_comma = false;
    while (true) {
      SkipSpace();
      if (Consume(')')) break;
      if (static_cast<int64_t>(shape.size()) >= kMaxRank) {
        return Malformed(absl::StrCat("rank exceeds ", kMaxRank));
      }
      GEMMSERVE_ASSIGN_OR_RETURN(int64_t dim, ParseDimension());
      shape.push_back(dim);
      SkipSpace();
      trailing_comma = Consume(',');
      if (trailing_comma) continue;
      if (!Consume(')')) return Malformed("expected ',' or ')' in 'shape'");
      break;
    }
    if (shape.size() == 1 && !trailing_comma) {
      return Malformed("a one-element 'shape' needs a trailing comma");
    }
    return shape;
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

uint32_t ReadLittleEndian(absl::string_view bytes) {
  uint32_t value = 0;
  for (size_t i = bytes.size(); i-- > 0;) {
    value = (value << 8) | static_cast<unsigned char>(bytes[i]);
  }
  return value;
}

void AppendLittleEndian(uint32_t value, int width, std::string* out) {
  for (int i = 0; i < width; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

// FP16 or BF16: the datatypes whose bits may be stored as '<u2'.
absl::StatusOr<absl::string_view> CheckU2Datatype(absl::string_view u2_datatype) {
  if (u2_datatype == "BF16" || u2_datatype == "FP16") return u2_datatype;
  return absl::InvalidArgumentError(
      absl::StrCat("'<u2' data can be read as BF16 or FP16, not '", u2_datatype, "'"));
}

}  // namespace

absl::StatusOr<HostTensor> ParseNpy(absl::string_view file, absl::string_view u2_datatype) {
  GEMMSERVE_ASSIGN_OR_RETURN(u2_datatype, CheckU2Datatype(u2_datatype));
  if (file.size() < kPrefixV1 || file.substr(0, kMagic.size()) != kMagic) {
    return absl::InvalidArgumentError("not a .npy file (bad magic or truncated)");
  }
  const int major = static_cast<unsigned char>(file[6]);
  const int minor = static_cast<unsigned char>(file[7]);
  size_t prefix;
  if (major == 1 && minor == 0) {
    prefix = kPrefixV1;
  } else if (major == 2 && minor == 0) {
    prefix = kPrefixV2;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unsupported .npy format version ", major, ".",
                                                   minor, " (1.0 and 2.0 are supported)"));
  }
  if (file.size() < prefix) return absl::InvalidArgumentError("truncated .npy header");
  const uint64_t header_len = ReadLittleEndian(file.substr(8, prefix - 8));
  if (header_len > file.size() - prefix) {
    return absl::InvalidArgumentError(absl::StrCat("truncated .npy header: ", header_len,
                                                   " bytes declared, ", file.size() - prefix,
                                                   " present"));
  }
  GEMMSERVE_ASSIGN_OR_RETURN(HeaderParser::Header header,
                             HeaderParser(file.substr(prefix, header_len)).Parse());

  if (header.fortran_order) {
    return absl::InvalidArgumentError("Fortran-order .npy files are not supported");
  }
  const Dtype* dtype = FindByDescr(header.descr);
  if (dtype == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported .npy dtype '", header.descr,
                     "' (supported: little-endian f2 f4 f8 i4 i8 u2 u4 u8)"));
  }
  GEMMSERVE_ASSIGN_OR_RETURN(int64_t count, ElementCount(header.shape));
  GEMMSERVE_ASSIGN_OR_RETURN(int64_t expected, CheckedMul(count, dtype->size));
  const absl::string_view data = file.substr(prefix + header_len);
  if (static_cast<uint64_t>(expected) != data.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(".npy data size mismatch for shape ", ShapeToString(header.shape), " of '",
                     header.descr, "': expected ", expected, " bytes, got ", data.size()));
  }

  HostTensor tensor;
  tensor.datatype = std::string(dtype->descr == "<u2" ? u2_datatype : dtype->datatype);
  tensor.shape = std::move(header.shape);
  tensor.bytes = std::string(data);
  return tensor;
}

absl::StatusOr<std::string> EncodeNpy(const HostTensor& tensor) {
  const Dtype* dtype = FindByDatatype(tensor.datatype);
  if (dtype == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("datatype '", tensor.datatype, "' of tensor '",
                                                   tensor.name, "' has no .npy dtype"));
  }
  GEMMSERVE_ASSIGN_OR_RETURN(int64_t count, ElementCount(tensor.shape));
  GEMMSERVE_ASSIGN_OR_RETURN(int64_t expected, CheckedMul(count, dtype->size));
  if (static_cast<uint64_t>(expected) != tensor.bytes.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "byte size mismatch for tensor '", tensor.name, "' of shape ", ShapeToString(tensor.shape),
        ": expected ", expected, ", got ", tensor.bytes.size()));
  }

  std::string dims = absl::StrJoin(tensor.shape, ", ");
  if (tensor.shape.size() == 1) dims += ",";
  std::string header = absl::StrCat("{'descr': '", dtype->descr,
                                    "', 'fortran_order': False, 'shape': (", dims, "), }");
  // Like numpy, leave room for the first dimension to grow to 21 digits in
  // place; files then come out byte-identical to np.save's.
  if (!tensor.shape.empty()) {
    header.append(kGrowthDigits - absl::StrCat(tensor.shape[0]).size(), ' ');
  }
  // Version 2.0 only when the 16-bit header length of 1.0 cannot hold it, as
  // numpy does; with shapes capped at rank 32 that never happens in practice.
  size_t prefix = kPrefixV1;
  size_t padded = (prefix + header.size() + 1 + kAlignment - 1) / kAlignment * kAlignment;
  if (padded - prefix > 0xffff) {
    prefix = kPrefixV2;
    padded = (prefix + header.size() + 1 + kAlignment - 1) / kAlignment * kAlignment;
  }
  header.append(padded - prefix - header.size() - 1, ' ');
  header.push_back('\n');

  std::string out(kMagic);
  out.push_back(prefix == kPrefixV1 ? 1 : 2);
  out.push_back(0);
  AppendLittleEndian(static_cast<uint32_t>(header.size()), prefix == kPrefixV1 ? 2 : 4, &out);
  out.reserve(out.size() + header.size() + tensor.bytes.size());
  out += header;
  out += tensor.bytes;
  return out;
}

namespace {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

}  // namespace

absl::StatusOr<HostTensor> ReadNpy(const std::string& path, absl::string_view u2_datatype) {
  File file(std::fopen(path.c_str(), "rb"));
  if (file == nullptr) return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
  std::string contents;
  char buffer[1 << 16];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, file.get())) > 0) contents.append(buffer, n);
  if (std::ferror(file.get())) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot read ", path));
  }
  absl::StatusOr<HostTensor> tensor = ParseNpy(contents, u2_datatype);
  if (!tensor.ok()) {
    return absl::Status(tensor.status().code(),
                        absl::StrCat(path, ": ", tensor.status().message()));
  }
  return tensor;
}

absl::Status WriteNpy(const std::string& path, const HostTensor& tensor) {
  GEMMSERVE_ASSIGN_OR_RETURN(std::string contents, EncodeNpy(tensor));
  File file(std::fopen(path.c_str(), "wb"));
  if (file == nullptr) return absl::ErrnoToStatus(errno, absl::StrCat("cannot create ", path));
  if (std::fwrite(contents.data(), 1, contents.size(), file.get()) != contents.size() ||
      std::fclose(file.release()) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

}  // namespace gemmserve::client
