#include "bench/bench_inputs.h"

#include <algorithm>
#include <numeric>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"
#include "server/tensor/half.h"

namespace gemmserve {
namespace {

// SplitMix64: fast enough to fill a gigabyte of weights in a fraction of a
// second, which std::mt19937 with a distribution is not.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1), 24 random bits: exact in FP32.
  float NextSigned() { return static_cast<float>(Next() >> 40) * 0x1p-23f - 1.0f; }
  // Uniform in [0, bound).
  int64_t Below(int64_t bound) {
    return static_cast<int64_t>(Next() % static_cast<uint64_t>(bound));
  }

 private:
  uint64_t state_;
};

template <typename T, typename Make>
void Fill(Tensor* t, Make make) {
  T* data = t->data<T>();
  for (int64_t i = 0; i < t->num_elements(); ++i) data[i] = make();
}

}  // namespace

absl::StatusOr<Tensor> RandomTensor(DataType type, Shape shape, uint64_t seed) {
  GEMMSERVE_ASSIGN_OR_RETURN(Tensor t, Tensor::Allocate(type, std::move(shape)));
  SplitMix64 rng(seed);
  auto small_signed = [&rng] { return rng.Below(17) - 8; };
  auto small_unsigned = [&rng] { return rng.Below(17); };
  switch (type) {
    case DataType::kFP32: Fill<float>(&t, [&rng] { return rng.NextSigned(); }); break;
    case DataType::kFP64:
      Fill<double>(&t, [&rng] { return static_cast<double>(rng.Next() >> 11) * 0x1p-52 - 1.0; });
      break;
    case DataType::kFP16:
      Fill<uint16_t>(&t, [&rng] { return FloatToHalf(rng.NextSigned()); });
      break;
    case DataType::kBF16:
      Fill<uint16_t>(&t, [&rng] { return FloatToBFloat16(rng.NextSigned()); });
      break;
    case DataType::kINT32: Fill<int32_t>(&t, small_signed); break;
    case DataType::kINT64: Fill<int64_t>(&t, small_signed); break;
    case DataType::kUINT32: Fill<uint32_t>(&t, small_unsigned); break;
    case DataType::kUINT64: Fill<uint64_t>(&t, small_unsigned); break;
  }
  return t;
}

absl::StatusOr<Tensor> MakeRouting(int64_t m, int64_t s, int64_t g, Routing routing,
                                   uint64_t seed) {
  if (s > g) {
    return absl::InvalidArgumentError(
        absl::StrCat("routing: top-", s, " without repeats needs S <= G, got G=", g));
  }
  GEMMSERVE_ASSIGN_OR_RETURN(Tensor indices, Tensor::Allocate(DataType::kINT64, {m, s}));
  SplitMix64 rng(seed);
  std::vector<int64_t> groups(g);
  int64_t* out = indices.data<int64_t>();
  for (int64_t token = 0; token < m; ++token) {
    std::iota(groups.begin(), groups.end(), int64_t{0});
    // Partial Fisher-Yates: slots [0, first) are fixed, the rest drawn from
    // what remains.
    int64_t first = 0;
    if (routing == Routing::kSkewed && token % 2 == 0 && s > 0) first = 1;  // group 0 first
    for (int64_t slot = first; slot < s; ++slot) {
      std::swap(groups[slot], groups[slot + rng.Below(g - slot)]);
    }
    std::copy(groups.begin(), groups.begin() + s, out + token * s);
  }
  return indices;
}

int64_t CountDistinctGroups(const Tensor& indices, int64_t g) {
  std::vector<bool> used(g, false);
  for (int64_t p = 0; p < indices.num_elements(); ++p) {
    used[indices.type() == DataType::kINT32 ? int64_t{indices.data<int32_t>()[p]}
                                            : indices.data<int64_t>()[p]] = true;
  }
  return std::count(used.begin(), used.end(), true);
}

}  // namespace gemmserve
