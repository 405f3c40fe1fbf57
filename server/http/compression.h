// HTTP content codings of request and response bodies, on zlib: gzip and
// deflate (the zlib format, as RFC 9110 defines "deflate").
//
//   GEMMSERVE_ASSIGN_OR_RETURN(int64_t size, InflatedSize(body, coding, max_bytes));
//   ... count `size` bytes against the server's limits ...
//   GEMMSERVE_ASSIGN_OR_RETURN(std::string inflated, InflateExactly(body, coding, size));
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

// Decompression in two passes, so that nothing is allocated for the output
// before its size is known and counted: InflatedSize reads `in` through once
// into a fixed 64 KiB scratch chunk and returns the decompressed size,
// RESOURCE_EXHAUSTED as soon as it passes `max_bytes` (a bomb costs CPU up to
// the limit, never memory), INVALID_ARGUMENT for data that is not one whole
// stream of the coding. InflateExactly then decompresses into one buffer of
// exactly that size. Inflate is both, for callers with nothing to count.
absl::StatusOr<int64_t> InflatedSize(absl::string_view in, ContentCoding coding, int64_t max_bytes);
absl::StatusOr<std::string> InflateExactly(absl::string_view in, ContentCoding coding,
                                           int64_t size);
absl::StatusOr<std::string> Inflate(absl::string_view in, ContentCoding coding, int64_t max_bytes);

// Compresses with zlib's fastest level. RESOURCE_EXHAUSTED if zlib fails.
absl::StatusOr<std::string> Deflate(absl::string_view in, ContentCoding coding);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_HTTP_COMPRESSION_H_
