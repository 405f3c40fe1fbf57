#include "client/cpp/npy.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gemmserve::client {
namespace {

using ::testing::HasSubstr;

struct DatatypeCase {
  std::string datatype;
  std::string descr;
  int64_t size;
};

const DatatypeCase kCases[] = {
    {"FP16", "<f2", 2},  {"FP32", "<f4", 4},   {"FP64", "<f8", 8},   {"INT32", "<i4", 4},
    {"INT64", "<i8", 8}, {"UINT32", "<u4", 4}, {"UINT64", "<u8", 8}, {"BF16", "<u2", 2},
};

// A .npy file with a hand-written header, for the malformed cases.
std::string RawNpy(absl::string_view header, absl::string_view data, int major = 1) {
  std::string out = "\x93NUMPY";
  out.push_back(static_cast<char>(major));
  out.push_back(0);
  const int width = major == 1 ? 2 : 4;
  for (int i = 0; i < width; ++i)
    out.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  return absl::StrCat(out, header, data);
}

std::string Header(absl::string_view descr, absl::string_view shape,
                   absl::string_view order = "False") {
  return absl::StrCat("{'descr': '", descr, "', 'fortran_order': ", order, ", 'shape': ", shape,
                      ", }\n");
}

std::string Pattern(int64_t n) {
  std::string bytes(n, '\0');
  for (int64_t i = 0; i < n; ++i) bytes[i] = static_cast<char>(i * 37 + 11);
  return bytes;
}

void ExpectInvalid(absl::string_view file, absl::string_view fragment) {
  absl::StatusOr<HostTensor> tensor = ParseNpy(file);
  ASSERT_FALSE(tensor.ok()) << "accepted: " << fragment;
  EXPECT_EQ(tensor.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(tensor.status().message()), HasSubstr(fragment));
}

TEST(NpyTest, RoundTripsEveryDatatypeAndShape) {
  const std::vector<std::vector<int64_t>> shapes = {{},     {0},       {1},         {7},
                                                    {2, 3}, {2, 0, 3}, {3, 1, 2, 2}};
  for (const DatatypeCase& c : kCases) {
    for (const std::vector<int64_t>& shape : shapes) {
      int64_t count = 1;
      for (int64_t d : shape) count *= d;
      HostTensor in{"x", c.datatype, shape, Pattern(count * c.size)};
      absl::StatusOr<std::string> file = EncodeNpy(in);
      ASSERT_TRUE(file.ok()) << file.status();
      // numpy's layout: the data starts on a 64-byte boundary.
      EXPECT_EQ((file->size() - in.bytes.size()) % 64, 0u);
      EXPECT_THAT(*file, HasSubstr(absl::StrCat("'descr': '", c.descr, "'")));

      absl::StatusOr<HostTensor> out = ParseNpy(*file);
      ASSERT_TRUE(out.ok()) << out.status();
      EXPECT_EQ(out->datatype, c.datatype);
      EXPECT_EQ(out->shape, shape);
      EXPECT_EQ(out->bytes, in.bytes);
    }
  }
}

TEST(NpyTest, EncodesLikeNumpySave) {
  // np.save(f, np.zeros((3, 4), np.float32)) with numpy 1.24.
  HostTensor t{"", "FP32", {3, 4}, std::string(48, '\0')};
  absl::StatusOr<std::string> file = EncodeNpy(t);
  ASSERT_TRUE(file.ok()) << file.status();
  const std::string header =
      "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }" + std::string(58, ' ') + "\n";
  EXPECT_EQ(*file, RawNpy(header, std::string(48, '\0')));
}

TEST(NpyTest, EncodesOneDimensionalShapeAsTuple) {
  absl::StatusOr<std::string> file = EncodeNpy({"", "INT32", {5}, std::string(20, '\0')});
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_THAT(*file, HasSubstr("'shape': (5,), }"));
}

TEST(NpyTest, ReadsU2AsBF16UnlessTold) {
  const std::string file = RawNpy(Header("<u2", "(2,)"), std::string("\x80\x3f\x00\x40", 4));
  absl::StatusOr<HostTensor> bf16 = ParseNpy(file);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_EQ(bf16->datatype, "BF16");
  absl::StatusOr<HostTensor> fp16 = ParseNpy(file, "FP16");
  ASSERT_TRUE(fp16.ok()) << fp16.status();
  EXPECT_EQ(fp16->datatype, "FP16");
  EXPECT_EQ(fp16->bytes, bf16->bytes);
}

TEST(NpyTest, RejectsU2OverrideThatIsNotHalf) {
  absl::StatusOr<HostTensor> t = ParseNpy(RawNpy(Header("<u2", "(1,)"), "ab"), "INT32");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(NpyTest, AcceptsOtherWritersHeaderSpelling) {
  // Double quotes, any key order, no trailing commas, no padding or newline.
  const std::string header = "{\"shape\": (2, 1), \"fortran_order\": False, \"descr\": \"<i8\"}";
  absl::StatusOr<HostTensor> t = ParseNpy(RawNpy(header, Pattern(16)));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->datatype, "INT64");
  EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 1}));
}

TEST(NpyTest, ReadsVersion2) {
  absl::StatusOr<HostTensor> t = ParseNpy(RawNpy(Header("<f8", "(1,)"), Pattern(8), 2));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->datatype, "FP64");
}

TEST(NpyTest, RejectsBadMagicAndTruncation) {
  ExpectInvalid("", "not a .npy file");
  ExpectInvalid("\x93NUMP", "not a .npy file");
  ExpectInvalid(std::string("\x93NUMPZ\x01\x00\x00\x00", 10), "not a .npy file");
  ExpectInvalid(std::string("\x93NUMPY\x02\x00\x00", 9), "not a .npy file");
  ExpectInvalid(std::string("\x93NUMPY\x02\x00\x00\x00\x00", 11), "truncated .npy header");
  const std::string full = RawNpy(Header("<f4", "(2,)"), Pattern(8));
  ExpectInvalid(full.substr(0, 20), "truncated .npy header");
  ExpectInvalid(full.substr(0, full.size() - 1), "expected 8 bytes, got 7");
}

TEST(NpyTest, RejectsUnsupportedVersions) {
  ExpectInvalid(RawNpy(Header("<f4", "()"), Pattern(4), 3), "version 3.0");
  std::string v11 = RawNpy(Header("<f4", "()"), Pattern(4));
  v11[7] = 1;
  ExpectInvalid(v11, "version 1.1");
}

TEST(NpyTest, RejectsFortranOrder) {
  ExpectInvalid(RawNpy(Header("<f4", "(2, 2)", "True"), Pattern(16)), "Fortran");
}

TEST(NpyTest, RejectsBigEndianAndUnknownDtypes) {
  ExpectInvalid(RawNpy(Header(">f4", "(1,)"), Pattern(4)), "unsupported .npy dtype '>f4'");
  ExpectInvalid(RawNpy(Header("|b1", "(1,)"), Pattern(1)), "unsupported .npy dtype");
  ExpectInvalid(RawNpy(Header("<c8", "(1,)"), Pattern(8)), "unsupported .npy dtype");
  ExpectInvalid(RawNpy(Header("float32", "(1,)"), Pattern(4)), "unsupported .npy dtype");
}

TEST(NpyTest, RejectsByteCountMismatch) {
  ExpectInvalid(RawNpy(Header("<f4", "(2, 3)"), Pattern(20)), "expected 24 bytes, got 20");
  ExpectInvalid(RawNpy(Header("<f4", "(2, 3)"), Pattern(28)), "expected 24 bytes, got 28");
  ExpectInvalid(RawNpy(Header("<f4", "(0,)"), Pattern(1)), "expected 0 bytes, got 1");
}

TEST(NpyTest, RejectsMalformedDicts) {
  const std::string data = Pattern(4);
  ExpectInvalid(RawNpy("", data), "expected '{'");
  ExpectInvalid(RawNpy("{'descr': '<f4', 'fortran_order': False}", data), "are all required");
  ExpectInvalid(RawNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", data),
                "unexpected key 'x'");
  ExpectInvalid(
      RawNpy("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}", data),
      "duplicate key 'descr'");
  ExpectInvalid(RawNpy(Header("<f4", "(1,)") + "x", data), "trailing characters");
  ExpectInvalid(RawNpy("{'descr': '<f4' 'fortran_order': False, 'shape': (1,)}", data),
                "expected ',' or '}'");
  ExpectInvalid(RawNpy("{'descr: '<f4', 'fortran_order': False, 'shape': (1,)}", data),
                "expected ':'");
  ExpectInvalid(RawNpy("{'descr': '<f4", data), "unterminated string");
  ExpectInvalid(RawNpy("{'descr': '<f4', 'fortran_order': 0, 'shape': (1,)}", data),
                "True or False");
  ExpectInvalid(RawNpy("{'descr': '<f4', 'fortran_order': False, 'shape': [1]}", data),
                "must be a tuple");
  ExpectInvalid(RawNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,", data),
                "expected a non-negative integer");
}

TEST(NpyTest, RejectsBadShapes) {
  const std::string data = Pattern(4);
  ExpectInvalid(RawNpy(Header("<f4", "(1)"), data), "trailing comma");
  ExpectInvalid(RawNpy(Header("<f4", "(-1,)"), data), "non-negative integer");
  ExpectInvalid(RawNpy(Header("<f4", "(1.0,)"), data), "expected ',' or ')'");
  ExpectInvalid(RawNpy(Header("<f4", "(1 2)"), data), "expected ',' or ')'");
  ExpectInvalid(RawNpy(Header("<f4", "(,)"), data), "non-negative integer");
  std::string rank33 = "(";
  for (int i = 0; i < 33; ++i) rank33 += "1, ";
  ExpectInvalid(RawNpy(Header("<f4", rank33 + ")"), data), "rank exceeds 32");
}

TEST(NpyTest, RejectsSizeOverflow) {
  const std::string data = Pattern(4);
  ExpectInvalid(RawNpy(Header("<f4", "(9223372036854775808,)"), data), "overflows int64");
  ExpectInvalid(RawNpy(Header("<f4", "(4294967296, 4294967296)"), data), "overflows int64");
  // 2^61 elements fit in int64, their 2^64 bytes do not.
  ExpectInvalid(RawNpy(Header("<f8", "(2305843009213693952,)"), data), "overflows int64");
}

TEST(NpyTest, EncodeRejectsInconsistentTensors) {
  EXPECT_EQ(EncodeNpy({"x", "FP32", {2, 3}, Pattern(20)}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeNpy({"x", "BYTES", {1}, "a"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeNpy({"x", "FP32", {-1}, ""}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeNpy({"x", "FP32", {int64_t{1} << 62, 4}, ""}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(NpyTest, FilesRoundTripAndMissingFileIsNotFound) {
  const std::string path = ::testing::TempDir() + "/npy_test_roundtrip.npy";
  HostTensor in{"x", "UINT64", {3}, Pattern(24)};
  ASSERT_TRUE(WriteNpy(path, in).ok());
  absl::StatusOr<HostTensor> out = ReadNpy(path);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->bytes, in.bytes);

  absl::StatusOr<HostTensor> missing = ReadNpy(::testing::TempDir() + "/no_such_file.npy");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("no_such_file.npy"));
}

TEST(NpyTest, ReadErrorsNameThePath) {
  const std::string path = ::testing::TempDir() + "/npy_test_named.npy";
  HostTensor in{"x", "FP32", {1}, Pattern(4)};
  ASSERT_TRUE(WriteNpy(path, in).ok());
  absl::StatusOr<HostTensor> out = ReadNpy(path, "UINT8");
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(out.status().message()), HasSubstr(path));
}

}  // namespace
}  // namespace gemmserve::client
