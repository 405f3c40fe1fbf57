// Fuzzes GroupedMatMul's index handling: small shapes (M, K, N, G, S each at
// most 8) with group_indices of any value, INT32 or INT64. ValidateGroupIndices
// must accept exactly when every index lies in [0, G) (never wrapping, never
// truncating an INT64 to 32 bits); when it accepts, RunGroupedMatMul must
// agree with a double-precision loop written here, and it must never read
// outside the weights, which ASan would see.
//
// Input, front to back (fuzz/make_seeds.py writes examples):
//   5 bytes   M K N G S, each mod 9
//   1 byte    flags: bit 0 INT64 indices (else INT32), bit 1 bias, bits 2-3 value
//             type (FP32 FP64 FP16 BF16), bit 4 two threads, bit 5 raw value bits
//   M*S       indices, one tag byte each (then 4 or 8 raw bytes for tag >= 0xf0):
//             < 0xc0 in range (tag mod G), else an edge case (G, -1, 2^32 + 1...)
//   values    input, weights, bias: one byte each, the signed byte / 16 (exact in
//             every type, so the kernels' sums are exact too); with bit 5 the
//             elements' raw bits instead (NaN, Inf, subnormals), and no compare.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "fuzz/fuzz_support.h"
#include "server/ops/grouped_matmul.h"
#include "server/tensor/datatype.h"
#include "server/tensor/half.h"
#include "server/tensor/shape.h"
#include "server/tensor/tensor.h"

namespace gemmserve {
namespace fuzz {
namespace {

constexpr int64_t kMaxDim = 8;
constexpr DataType kValueTypes[] = {DataType::kFP32, DataType::kFP64, DataType::kFP16,
                                    DataType::kBF16};

int64_t ReadIndex(ByteReader& in, int64_t g, bool int64_indices) {
  const uint8_t tag = in.Byte();
  if (tag < 0xc0) return g > 0 ? tag % g : 0;
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr int64_t k32 = int64_t{1} << 32;
  // Values that a wrap, a truncation to 32 bits or a sign slip would turn
  // into a valid index.
  const int64_t edge[] = {g,       g + 1,   -1,      -g,       kMin,      kMax,
                          k32,     k32 + 1, -k32,    -k32 + 1, INT32_MIN, INT32_MAX,
                          k32 - 1, g - k32, g + k32, kMin + 1};
  if (tag < 0xf0) return edge[(tag - 0xc0) % std::size(edge)];
  return int64_indices ? in.Raw<int64_t>() : in.Raw<int32_t>();
}

double ToDouble(DataType type, const void* base, int64_t i) {
  switch (type) {
    case DataType::kFP32: return static_cast<const float*>(base)[i];
    case DataType::kFP64: return static_cast<const double*>(base)[i];
    case DataType::kFP16: return HalfToFloat(static_cast<const uint16_t*>(base)[i]);
    case DataType::kBF16: return BFloat16ToFloat(static_cast<const uint16_t*>(base)[i]);
    default: return 0;
  }
}

void Store(DataType type, void* base, int64_t i, float v) {
  switch (type) {
    case DataType::kFP32: static_cast<float*>(base)[i] = v; break;
    case DataType::kFP64: static_cast<double*>(base)[i] = v; break;
    case DataType::kFP16: static_cast<uint16_t*>(base)[i] = FloatToHalf(v); break;
    case DataType::kBF16: static_cast<uint16_t*>(base)[i] = FloatToBFloat16(v); break;
    default: break;
  }
}

// Unit roundoff of each value type: the kernels round once to it.
double Epsilon(DataType type) {
  switch (type) {
    case DataType::kFP16: return 0x1p-11;
    case DataType::kBF16: return 0x1p-8;
    case DataType::kFP32: return 0x1p-24;
    default: return 0x1p-53;
  }
}

void Fill(ByteReader& in, Tensor& t, bool raw_bits) {
  auto* bytes = static_cast<uint8_t*>(t.raw_data());
  if (raw_bits) {
    for (int64_t i = 0; i < t.byte_size(); ++i) bytes[i] = in.Byte();
    return;
  }
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    Store(t.type(), t.raw_data(), i, static_cast<float>(static_cast<int8_t>(in.Byte())) / 16);
  }
}

Tensor MustAllocate(DataType type, Shape shape) {
  absl::StatusOr<Tensor> t = Tensor::Allocate(type, std::move(shape));
  FUZZ_CHECK(t.ok(), "Tensor::Allocate: %s", t.status().ToString().c_str());
  return *std::move(t);
}

}  // namespace
}  // namespace fuzz
}  // namespace gemmserve

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gemmserve;
  using namespace gemmserve::fuzz;
  ByteReader in(data, size);
  const int64_t m = in.Small(kMaxDim), k = in.Small(kMaxDim), n = in.Small(kMaxDim),
                g = in.Small(kMaxDim), s = in.Small(kMaxDim);
  const uint8_t flags = in.Byte();
  const bool int64_indices = flags & 1, has_bias = flags & 2, raw_bits = flags & 32;
  const DataType type = kValueTypes[(flags >> 2) & 3];
  const DataType index_type = int64_indices ? DataType::kINT64 : DataType::kINT32;
  const int threads = flags & 16 ? 2 : 1;

  // Indices as the fuzzer chose them, and as the tensor holds them (an INT32
  // tensor keeps the low 32 bits, as a client would have sent).
  Tensor indices = MustAllocate(index_type, {m, s});
  std::vector<int64_t> held(static_cast<size_t>(m * s));
  for (int64_t p = 0; p < m * s; ++p) {
    const int64_t v = ReadIndex(in, g, int64_indices);
    if (int64_indices) {
      indices.data<int64_t>()[p] = v;
      held[p] = v;
    } else {
      indices.data<int32_t>()[p] = static_cast<int32_t>(v);
      held[p] = static_cast<int32_t>(v);
    }
  }
  bool all_in_range = true;
  for (int64_t v : held) all_in_range &= v >= 0 && v < g;

  const Shape bias_shape = {g, n};
  const absl::StatusOr<GroupedMatMulPlan> plan =
      PlanGroupedMatMul({m, k}, {g, k, n}, {m, s}, has_bias ? &bias_shape : nullptr);
  // Every shape here is valid except G = 0 with something to select.
  FUZZ_CHECK(plan.ok() == (g > 0 || m * s == 0),
             "PlanGroupedMatMul M=%lld K=%lld N=%lld G=%lld "
             "S=%lld: %s",
             static_cast<long long>(m), static_cast<long long>(k), static_cast<long long>(n),
             static_cast<long long>(g), static_cast<long long>(s),
             plan.status().ToString().c_str());

  const absl::Status valid = ValidateGroupIndices(indices, g);
  FUZZ_CHECK(valid.ok() == all_in_range, "ValidateGroupIndices(G=%lld, %s): %s",
             static_cast<long long>(g), std::string(DataTypeName(index_type)).c_str(),
             valid.ToString().c_str());
  if (!valid.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(valid), "code %s", valid.ToString().c_str());
    return 0;
  }
  if (!plan.ok()) return 0;

  Tensor input = MustAllocate(type, {m, k});
  Tensor weights = MustAllocate(type, {g, k, n});
  Tensor bias = MustAllocate(type, bias_shape);
  Fill(in, input, raw_bits);
  Fill(in, weights, raw_bits);
  Fill(in, bias, raw_bits);
  Tensor output = MustAllocate(type, plan->output_shape);
  const absl::Status run = RunGroupedMatMul(*plan, input, weights, indices,
                                            has_bias ? &bias : nullptr, &output, threads);
  FUZZ_CHECK(run.ok(), "RunGroupedMatMul: %s", run.ToString().c_str());
  if (raw_bits) return 0;

  const double eps = Epsilon(type);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < s; ++j) {
      const int64_t group = held[i * s + j];
      for (int64_t c = 0; c < n; ++c) {
        double want = 0, magnitude = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double term = ToDouble(type, input.raw_data(), i * k + p) *
                              ToDouble(type, weights.raw_data(), (group * k + p) * n + c);
          want += term;
          magnitude += std::fabs(term);
        }
        if (has_bias) {
          const double b = ToDouble(type, bias.raw_data(), group * n + c);
          want += b;
          magnitude += std::fabs(b);
        }
        const double got = ToDouble(type, output.raw_data(), (i * s + j) * n + c);
        FUZZ_CHECK(std::fabs(got - want) <= 2 * eps * magnitude,
                   "output[%lld,%lld,%lld] = %.17g, reference %.17g (group %lld, %s, "
                   "M=%lld K=%lld N=%lld G=%lld S=%lld, bias %d, threads %d)",
                   static_cast<long long>(i), static_cast<long long>(j), static_cast<long long>(c),
                   got, want, static_cast<long long>(group),
                   std::string(DataTypeName(type)).c_str(), static_cast<long long>(m),
                   static_cast<long long>(k), static_cast<long long>(n), static_cast<long long>(g),
                   static_cast<long long>(s), has_bias, threads);
      }
    }
  }
  return 0;
}
