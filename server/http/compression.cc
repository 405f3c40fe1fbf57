#include "server/http/compression.h"

#include <zlib.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <new>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/types/span.h"
#include "server/common/allocation.h"
#include "server/common/client_text.h"
#include "server/common/status_macros.h"

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

namespace {

// Runs `in` through zlib once. With `out` empty the output goes to a scratch
// chunk and only its size is kept (RESOURCE_EXHAUSTED past `max_bytes`); else
// it fills `out`, which must be exactly the size a first pass found.
absl::StatusOr<int64_t> RunInflate(absl::string_view in, ContentCoding coding, int64_t max_bytes,
                                   absl::Span<char> out) {
  if (in.size() > std::numeric_limits<uInt>::max()) {
    return absl::ResourceExhaustedError("the compressed body is too large");
  }
  const bool counting = out.empty();
  std::unique_ptr<char[]> scratch;
  if (counting) scratch.reset(new (std::nothrow) char[kChunk]);
  if (counting && scratch == nullptr) return AllocationFailure("decompression");
  z_stream z{};
  if (inflateInit2(&z, kAutoRead) != Z_OK) return AllocationFailure("decompression");
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  int64_t produced = 0;
  absl::Status status;
  for (;;) {
    // Counting: one byte past the limit tells "exactly the limit" from "over it".
    const int64_t room =
        counting ? max_bytes - produced + 1 : static_cast<int64_t>(out.size()) - produced;
    const size_t chunk = static_cast<size_t>(std::min<int64_t>(kChunk, std::max<int64_t>(room, 1)));
    char* const into = counting ? scratch.get() : out.data() + produced;
    z.next_out = reinterpret_cast<Bytef*>(into);
    z.avail_out = static_cast<uInt>(room > 0 ? chunk : 0);
    if (!counting && room <= 0) {
      // The stream must end here: one byte more of room would be a change.
      char probe;
      z.next_out = reinterpret_cast<Bytef*>(&probe);
      z.avail_out = 1;
    }
    const int r = inflate(&z, Z_NO_FLUSH);
    const int64_t made = static_cast<int64_t>((room > 0 ? chunk : 1) - z.avail_out);
    produced += made;
    if (produced > (counting ? max_bytes : static_cast<int64_t>(out.size()))) {
      status = counting ? absl::ResourceExhaustedError(
                              absl::StrCat("the decompressed request body is over ", max_bytes,
                                           " bytes; --max_message_bytes raises the limit"))
                        : absl::InternalError("the body inflated differently the second time");
      break;
    }
    if (r == Z_STREAM_END) {
      if (z.avail_in != 0) {
        status = absl::InvalidArgumentError("the compressed body has data after its end");
      }
      break;
    }
    if (r == Z_MEM_ERROR) {
      status = AllocationFailure("decompression");
      break;
    }
    if (r != Z_OK && r != Z_BUF_ERROR) {
      status = absl::InvalidArgumentError(
          absl::StrCat("the request body is not valid ",
                       coding == ContentCoding::kGzip ? "gzip" : "deflate", " data"));
      break;
    }
    if (r == Z_BUF_ERROR && z.avail_in == 0) {
      status = absl::InvalidArgumentError("the compressed request body is cut short");
      break;
    }
  }
  inflateEnd(&z);
  if (!status.ok()) return status;
  return produced;
}

}  // namespace

absl::StatusOr<int64_t> InflatedSize(absl::string_view in, ContentCoding coding,
                                     int64_t max_bytes) {
  if (coding == ContentCoding::kIdentity) {
    if (static_cast<int64_t>(in.size()) > max_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the request body is over ", max_bytes, " bytes; --max_message_bytes raises the limit"));
    }
    return static_cast<int64_t>(in.size());
  }
  return RunInflate(in, coding, max_bytes, {});
}

absl::StatusOr<std::string> InflateExactly(absl::string_view in, ContentCoding coding,
                                           int64_t size) {
  if (coding == ContentCoding::kIdentity) return std::string(in);
  std::string out;
  GEMMSERVE_RETURN_IF_ERROR(CatchAllocationFailure("the decompressed body", [&] {
    out.resize(static_cast<size_t>(size));
    return absl::OkStatus();
  }));
  if (size == 0) {
    // Nothing to fill: the stream must still be an empty one.
    if (!RunInflate(in, coding, 0, {}).ok()) {
      return absl::InternalError("the body inflated differently the second time");
    }
    return out;
  }
  GEMMSERVE_ASSIGN_OR_RETURN(int64_t produced,
                             RunInflate(in, coding, size, absl::MakeSpan(out.data(), out.size())));
  if (produced != size) return absl::InternalError("the body inflated differently the second time");
  return out;
}

absl::StatusOr<std::string> Inflate(absl::string_view in, ContentCoding coding, int64_t max_bytes) {
  GEMMSERVE_ASSIGN_OR_RETURN(int64_t size, InflatedSize(in, coding, max_bytes));
  return InflateExactly(in, coding, size);
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
