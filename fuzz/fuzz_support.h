// What the fuzz targets share: a reader that turns the fuzzer's bytes into
// dimensions and values front to back (so a seed can be written by hand, see
// fuzz/make_seeds.py), and a check that aborts, which libFuzzer reports as a
// crash and saves the input that caused it.
//
//   ByteReader in(data, size);
//   const int64_t m = in.Small(8);          // 0..8
//   const int64_t d = in.Dimension();        // small, special (INT64_MIN, 2^62...) or raw
//   FUZZ_CHECK(plan.ok() == expected.has_value(), "PlanMatMul disagrees with the oracle");
#ifndef GEMMSERVE_FUZZ_FUZZ_SUPPORT_H_
#define GEMMSERVE_FUZZ_FUZZ_SUPPORT_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#define FUZZ_CHECK(cond, ...)                                                            \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                                 \
      std::fprintf(stderr, "\n");                                                        \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)

namespace gemmserve {
namespace fuzz {

// Reads the input front to back; past the end every read yields zero bytes,
// so any input, even an empty one, is a complete case.
class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  uint8_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }

  // Little-endian, the bytes missing at the end read as zero.
  template <typename T>
  T Raw() {
    unsigned char bytes[sizeof(T)] = {};
    for (size_t i = 0; i < sizeof(T); ++i) bytes[i] = Byte();
    T v;
    std::memcpy(&v, bytes, sizeof v);
    return v;
  }

  // 0..max, from one byte.
  int64_t Small(int64_t max) { return Byte() % (max + 1); }

  // A dimension from one tag byte:
  //   0x00..0x3f  that value (0..63)
  //   0x40..0x7f  one of the values that break naive arithmetic (kSpecial)
  //   0x80..0xff  the next 8 bytes as a raw int64
  int64_t Dimension() {
    const uint8_t tag = Byte();
    if (tag < 0x40) return tag;
    if (tag < 0x80) return kSpecial[(tag - 0x40) % kSpecialCount];
    return Raw<int64_t>();
  }

  bool empty() const { return pos_ >= size_; }

  static constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  static constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  // Edges of int32 and int64, square roots of INT64_MAX (products of two or
  // three of them sit right at the overflow boundary), powers of two.
  static constexpr int64_t kSpecial[] = {0,
                                         1,
                                         2,
                                         3,
                                         -1,
                                         -2,
                                         kMin,
                                         kMax,
                                         kMax - 1,
                                         kMin + 1,
                                         int64_t{1} << 31,
                                         (int64_t{1} << 31) - 1,
                                         -(int64_t{1} << 31),
                                         int64_t{1} << 32,
                                         (int64_t{1} << 32) + 1,
                                         (int64_t{1} << 32) - 1,
                                         int64_t{1} << 62,
                                         int64_t{1} << 61,
                                         int64_t{1} << 60,
                                         int64_t{1} << 40,
                                         int64_t{1} << 21,
                                         (int64_t{1} << 21) - 1,
                                         3037000499,
                                         3037000500,
                                         2097152,
                                         2097151,
                                         1000000,
                                         65536,
                                         65535,
                                         4096,
                                         1024,
                                         7};
  static constexpr size_t kSpecialCount = sizeof(kSpecial) / sizeof(kSpecial[0]);

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace fuzz
}  // namespace gemmserve

#endif  // GEMMSERVE_FUZZ_FUZZ_SUPPORT_H_
