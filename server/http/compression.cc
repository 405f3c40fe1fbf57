#include "server/http/compression.h"

#include <zlib.h>

#include <algorithm>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "server/common/allocation.h"
#include "server/common/client_text.h"

namespace gemmserve {
namespace {

constexpr size_t kChunk = 64 << 10;
// zlib's windowBits: 15 + 16 writes gzip; 15 + 32 reads gzip or zlib.
constexpr int kGzipWrite = 15 + 16;
constexpr int kZlibWrite = 15;
constexpr int kAutoRead = 15 + 32;

}  // namespace

absl::StatusOr<ContentCoding> ParseContentEncoding(absl::string_view header) {
  const std::string coding = absl::AsciiStrToLower(absl::StripAsciiWhitespace(header));
  if (coding.empty() || coding == "identity") return ContentCoding::kIdentity;
  if (coding == "gzip" || coding == "x-gzip") return ContentCoding::kGzip;
  if (coding == "deflate") return ContentCoding::kDeflate;
  return absl::InvalidArgumentError(absl::StrCat("Content-Encoding '", ClientText(header),
                                                 "' is not supported; use gzip or deflate"));
}

ContentCoding NegotiateContentCoding(absl::string_view accept_encoding) {
  bool gzip = false, deflate = false;
  for (absl::string_view item : absl::StrSplit(accept_encoding, ',')) {
    std::vector<absl::string_view> parts = absl::StrSplit(item, ';');
    const std::string name = absl::AsciiStrToLower(absl::StripAsciiWhitespace(parts[0]));
    double q = 1;
    for (size_t i = 1; i < parts.size(); ++i) {
      absl::string_view p = absl::StripAsciiWhitespace(parts[i]);
      if (absl::ConsumePrefix(&p, "q=") && !absl::SimpleAtod(p, &q)) q = 0;
    }
    if (q <= 0) continue;
    if (name == "gzip" || name == "x-gzip") gzip = true;
    if (name == "deflate") deflate = true;
  }
  return gzip ? ContentCoding::kGzip : deflate ? ContentCoding::kDeflate : ContentCoding::kIdentity;
}

absl::StatusOr<std::string> Inflate(absl::string_view in, ContentCoding coding, int64_t max_bytes) {
  if (coding == ContentCoding::kIdentity) return std::string(in);
  if (in.size() > std::numeric_limits<uInt>::max()) {
    return absl::ResourceExhaustedError("the compressed body is too large");
  }
  z_stream z{};
  if (inflateInit2(&z, kAutoRead) != Z_OK) return AllocationFailure("decompression");
  std::string out;
  absl::Status status = CatchAllocationFailure("the decompressed body", [&]() -> absl::Status {
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    z.avail_in = static_cast<uInt>(in.size());
    for (;;) {
      const size_t have = out.size();
      const int64_t room = max_bytes - static_cast<int64_t>(have);
      // One byte past the limit tells "exactly the limit" from "over it".
      const size_t chunk = static_cast<size_t>(std::min<int64_t>(kChunk, room + 1));
      out.resize(have + chunk);
      z.next_out = reinterpret_cast<Bytef*>(out.data() + have);
      z.avail_out = static_cast<uInt>(chunk);
      const int r = inflate(&z, Z_NO_FLUSH);
      out.resize(have + chunk - z.avail_out);
      if (static_cast<int64_t>(out.size()) > max_bytes) {
        return absl::ResourceExhaustedError(
            absl::StrCat("the decompressed request body is over ", max_bytes,
                         " bytes; --max_message_bytes raises the limit"));
      }
      if (r == Z_STREAM_END) {
        if (z.avail_in != 0) {
          return absl::InvalidArgumentError("the compressed body has data after its end");
        }
        return absl::OkStatus();
      }
      if (r == Z_MEM_ERROR) return AllocationFailure("decompression");
      if (r != Z_OK && r != Z_BUF_ERROR) {
        return absl::InvalidArgumentError(
            absl::StrCat("the request body is not valid ",
                         coding == ContentCoding::kGzip ? "gzip" : "deflate", " data"));
      }
      if (r == Z_BUF_ERROR && z.avail_in == 0) {
        return absl::InvalidArgumentError("the compressed request body is cut short");
      }
    }
  });
  inflateEnd(&z);
  if (!status.ok()) return status;
  return out;
}

absl::StatusOr<std::string> Deflate(absl::string_view in, ContentCoding coding) {
  if (coding == ContentCoding::kIdentity) return std::string(in);
  if (in.size() > std::numeric_limits<uInt>::max()) {
    return absl::ResourceExhaustedError("the response is too large to compress");
  }
  z_stream z{};
  if (deflateInit2(&z, 1, Z_DEFLATED, coding == ContentCoding::kGzip ? kGzipWrite : kZlibWrite, 8,
                   Z_DEFAULT_STRATEGY) != Z_OK) {
    return AllocationFailure("compression");
  }
  std::string out;
  absl::Status status = CatchAllocationFailure("the compressed response", [&]() -> absl::Status {
    out.resize(deflateBound(&z, static_cast<uLong>(in.size())));
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    z.avail_in = static_cast<uInt>(in.size());
    z.next_out = reinterpret_cast<Bytef*>(out.data());
    z.avail_out = static_cast<uInt>(out.size());
    if (deflate(&z, Z_FINISH) != Z_STREAM_END) return absl::InternalError("deflate failed");
    out.resize(out.size() - z.avail_out);
    return absl::OkStatus();
  });
  deflateEnd(&z);
  if (!status.ok()) return status;
  return out;
}

}  // namespace gemmserve
