#include "server/http/compression.h"

#include <string>

#include "gtest/gtest.h"

namespace gemmserve {
namespace {

TEST(Compression, RoundTripsBothCodings) {
  std::string text;
  for (int i = 0; i < 100000; ++i) text += static_cast<char>('a' + i % 7);
  for (ContentCoding c : {ContentCoding::kGzip, ContentCoding::kDeflate}) {
    absl::StatusOr<std::string> z = Deflate(text, c);
    ASSERT_TRUE(z.ok());
    EXPECT_LT(z->size(), text.size() / 10);
    absl::StatusOr<std::string> back = Inflate(*z, c, text.size());
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, text);
  }
}

TEST(Compression, BombIsRefusedAtTheLimitWithoutInflatingIt) {
  const std::string zeros(64 << 20, '\0');
  absl::StatusOr<std::string> z = Deflate(zeros, ContentCoding::kGzip);
  ASSERT_TRUE(z.ok());
  ASSERT_LT(z->size(), 1 << 20);
  absl::StatusOr<std::string> out = Inflate(*z, ContentCoding::kGzip, 1 << 20);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(out.status().message().find("--max_message_bytes"), std::string::npos);
  // Exactly the limit passes.
  absl::StatusOr<std::string> small = Deflate(std::string(1000, 'x'), ContentCoding::kGzip);
  EXPECT_TRUE(Inflate(*small, ContentCoding::kGzip, 1000).ok());
  EXPECT_EQ(Inflate(*small, ContentCoding::kGzip, 999).status().code(),
            absl::StatusCode::kResourceExhausted);
}

// The two passes agree on every size around the 64 KiB scratch chunk, and
// the second allocates exactly the size the first counted.
TEST(Compression, SizeThenExactInflateAgreeAtChunkEdges) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{65535}, size_t{65536}, size_t{65537},
                   size_t{3 * 65536}, size_t{200003}}) {
    std::string text(n, '\0');
    for (size_t i = 0; i < n; ++i) text[i] = static_cast<char>((i * 2654435761u) >> 13);
    for (ContentCoding c : {ContentCoding::kGzip, ContentCoding::kDeflate}) {
      absl::StatusOr<std::string> z = Deflate(text, c);
      ASSERT_TRUE(z.ok());
      absl::StatusOr<int64_t> size = InflatedSize(*z, c, static_cast<int64_t>(n));
      ASSERT_TRUE(size.ok()) << n << ": " << size.status();
      EXPECT_EQ(*size, static_cast<int64_t>(n));
      absl::StatusOr<std::string> back = InflateExactly(*z, c, *size);
      ASSERT_TRUE(back.ok()) << n << ": " << back.status();
      EXPECT_EQ(*back, text);
      EXPECT_EQ(back->capacity() < n + 64, true) << "one allocation of the size";
      if (n > 0) {
        EXPECT_EQ(InflatedSize(*z, c, static_cast<int64_t>(n) - 1).status().code(),
                  absl::StatusCode::kResourceExhausted);
        // A size the stream does not have is a fault, never an overrun.
        EXPECT_FALSE(InflateExactly(*z, c, static_cast<int64_t>(n) - 1).ok());
        EXPECT_FALSE(InflateExactly(*z, c, static_cast<int64_t>(n) + 1).ok());
      }
    }
  }
}

TEST(Compression, CorruptCutAndTrailingDataAreInvalid) {
  absl::StatusOr<std::string> z = Deflate(std::string(5000, 'y'), ContentCoding::kGzip);
  ASSERT_TRUE(z.ok());
  EXPECT_EQ(Inflate("not gzip at all", ContentCoding::kGzip, 1 << 20).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Inflate(z->substr(0, z->size() / 2), ContentCoding::kGzip, 1 << 20).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Inflate(*z + "junk", ContentCoding::kGzip, 1 << 20).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Inflate("", ContentCoding::kGzip, 1 << 20).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Compression, HeadersParse) {
  EXPECT_EQ(*ParseContentEncoding(""), ContentCoding::kIdentity);
  EXPECT_EQ(*ParseContentEncoding(" GZIP "), ContentCoding::kGzip);
  EXPECT_EQ(*ParseContentEncoding("deflate"), ContentCoding::kDeflate);
  EXPECT_FALSE(ParseContentEncoding("br").ok());
  EXPECT_FALSE(ParseContentEncoding("gzip, gzip").ok());
  EXPECT_EQ(NegotiateContentCoding(""), ContentCoding::kIdentity);
  EXPECT_EQ(NegotiateContentCoding("deflate, gzip;q=0.5"), ContentCoding::kGzip);
  EXPECT_EQ(NegotiateContentCoding("gzip;q=0, deflate"), ContentCoding::kDeflate);
  EXPECT_EQ(NegotiateContentCoding("br"), ContentCoding::kIdentity);
}

}  // namespace
}  // namespace gemmserve
