// HTTP content codings of request and response bodies, on zlib: gzip and
// deflate (the zlib format, as RFC 9110 defines "deflate").
//
//   absl::StatusOr<std::string> body = Inflate(compressed, ContentCoding::kGzip, max_bytes);
#ifndef GEMMSERVE_SERVER_HTTP_COMPRESSION_H_
#define GEMMSERVE_SERVER_HTTP_COMPRESSION_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gemmserve {

enum class ContentCoding { kIdentity, kGzip, kDeflate };

// "gzip", "x-gzip", "deflate", "identity" or empty, case-insensitive;
// INVALID_ARGUMENT (answered 415) for any other coding or a list of them.
absl::StatusOr<ContentCoding> ParseContentEncoding(absl::string_view header);

// The coding to answer with for an Accept-Encoding header: gzip, else
// deflate, when the client accepts it (q > 0), else identity.
ContentCoding NegotiateContentCoding(absl::string_view accept_encoding);

// Decompresses `in`, growing the output a chunk at a time: RESOURCE_EXHAUSTED
// as soon as it would pass `max_bytes` (so a small bomb never allocates more
// than the limit), INVALID_ARGUMENT for data that is not a whole stream of
// the coding.
absl::StatusOr<std::string> Inflate(absl::string_view in, ContentCoding coding, int64_t max_bytes);

// Compresses with zlib's fastest level. RESOURCE_EXHAUSTED if zlib fails.
absl::StatusOr<std::string> Deflate(absl::string_view in, ContentCoding coding);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_HTTP_COMPRESSION_H_
