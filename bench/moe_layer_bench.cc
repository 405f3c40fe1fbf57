#include "bench/moe_layer_bench.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "bench/bench_harness.h"
#include "bench/bench_inputs.h"
#include "server/common/status_macros.h"
#include "server/ops/grouped_matmul.h"
#include "server/ops/moe_layer.h"
#include "server/ops/packed_weights.h"
#include "server/tensor/half.h"

namespace gemmserve {
namespace {

struct LayerShape {
  const char* name;
  int64_t k, i, g, s;
};
constexpr LayerShape kLayerShapes[] = {
    {"olmoe-layer", 2048, 1024, 64, 8},
    {"mixtral-small-layer", 1024, 3584, 8, 2},
};
constexpr int64_t kLayerTokens[] = {1, 4, 16, 64, 256, 1024};
constexpr int64_t kColdMaxTokens = 64;

// One projection as a resident model holds it: panels where the type packs
// at load, else row-major.
struct Projection {
  Tensor dense;
  std::optional<PackedWeights> packed;
  int64_t k = 0, n = 0;

  GroupedWeights weights() const {
    return packed ? GroupedWeights(*packed) : GroupedWeights(dense);
  }
  const void* group(int64_t g) const {
    return packed ? packed->group(g)
                  : static_cast<const uint8_t*>(dense.raw_data()) +
                        g * k * n * DataTypeSize(dense.type());
  }
  int64_t group_bytes() const {
    return packed ? packed->bytes() / packed->groups() : k * n * DataTypeSize(dense.type());
  }
};

absl::StatusOr<Projection> MakeProjection(DataType type, int64_t g, int64_t k, int64_t n,
                                          uint64_t seed) {
  Projection p;
  p.k = k;
  p.n = n;
  GEMMSERVE_ASSIGN_OR_RETURN(p.dense, RandomTensor(type, {g, k, n}, seed));
  if (PackedWeights::PackedAtLoad(type)) {
    GEMMSERVE_ASSIGN_OR_RETURN(PackedWeights packed, PackedWeights::Pack(p.dense));
    p.packed = std::move(packed);
    p.dense = Tensor();
  }
  return p;
}

// Not movable: `layer` views the projections in place.
struct LayerWeights {
  LayerWeights() = default;
  LayerWeights(const LayerWeights&) = delete;
  LayerWeights& operator=(const LayerWeights&) = delete;
  Projection gate_up, down;  // [G, K, 2I], [G, I, K]
  MoeLayer layer;
};

struct LayerCase {
  Tensor x, ids, out;
  std::vector<float> w;
  std::vector<int64_t> used;
  std::optional<Tensor> other;  // the other implementation's output, for the check
};

float Load(DataType type, const void* p, int64_t j) {
  return type == DataType::kFP32 ? static_cast<const float*>(p)[j]
                                 : BFloat16ToFloat(static_cast<const uint16_t*>(p)[j]);
}
void Store(DataType type, void* p, int64_t j, float v) {
  if (type == DataType::kFP32) {
    static_cast<float*>(p)[j] = v;
  } else {
    static_cast<uint16_t*>(p)[j] = FloatToBFloat16(v);
  }
}

// The composed layer: GroupedMatMul to [M, S, 2I], SiLU(g) * u to [M*S, I],
// GroupedMatMul to [M*S, 1, K], the weighted sum over S.
absl::Status RunComposed(const LayerWeights& lw, LayerCase& c) {
  const MoeLayer& l = lw.layer;
  const int64_t m = c.x.shape()[0], s = l.s, i = l.i, k = l.k;
  GEMMSERVE_ASSIGN_OR_RETURN(GroupedMatMulPlan up_plan,
                             PlanGroupedMatMul({m, k}, {l.g, k, 2 * i}, {m, s}, nullptr));
  GEMMSERVE_ASSIGN_OR_RETURN(Tensor gu, Tensor::Allocate(l.type, up_plan.output_shape));
  GEMMSERVE_RETURN_IF_ERROR(
      RunGroupedMatMul(up_plan, c.x, lw.gate_up.weights(), c.ids, nullptr, &gu, bench::Threads()));
  GEMMSERVE_ASSIGN_OR_RETURN(Tensor a, Tensor::Allocate(l.type, {m * s, i}));
  for (int64_t r = 0; r < m * s; ++r) {
    for (int64_t j = 0; j < i; ++j) {
      const float g = Load(l.type, gu.raw_data(), r * 2 * i + j);
      const float u = Load(l.type, gu.raw_data(), r * 2 * i + i + j);
      Store(l.type, a.raw_data(), r * i + j, g / (1.0f + std::exp(-g)) * u);
    }
  }
  GEMMSERVE_ASSIGN_OR_RETURN(Tensor ids2, Tensor::Allocate(DataType::kINT64, {m * s, 1}));
  std::copy_n(c.ids.data<int64_t>(), m * s, ids2.data<int64_t>());
  GEMMSERVE_ASSIGN_OR_RETURN(GroupedMatMulPlan down_plan,
                             PlanGroupedMatMul({m * s, i}, {l.g, i, k}, {m * s, 1}, nullptr));
  GEMMSERVE_ASSIGN_OR_RETURN(Tensor y, Tensor::Allocate(l.type, down_plan.output_shape));
  GEMMSERVE_RETURN_IF_ERROR(
      RunGroupedMatMul(down_plan, a, lw.down.weights(), ids2, nullptr, &y, bench::Threads()));
  std::vector<float> acc(static_cast<size_t>(k));
  for (int64_t t = 0; t < m; ++t) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t slot = 0; slot < s; ++slot) {
      const float weight = c.w[t * s + slot];
      for (int64_t j = 0; j < k; ++j)
        acc[j] += weight * Load(l.type, y.raw_data(), (t * s + slot) * k + j);
    }
    for (int64_t j = 0; j < k; ++j) Store(l.type, c.out.raw_data(), t * k + j, acc[j]);
  }
  return absl::OkStatus();
}

absl::Status RunFused(const LayerWeights& lw, LayerCase& c) {
  MoeLayerCall call;
  call.m = c.x.shape()[0];
  call.x = c.x.raw_data();
  call.ids = c.ids.data<int64_t>();
  call.w = c.w.data();
  call.out = c.out.raw_data();
  return RunMoeLayer(lw.layer, call, bench::Threads());
}

// The layer's bound (issue 41) between the two implementations' outputs.
absl::Status SameLayer(const Tensor& got, const Tensor& want) {
  double max_ref = 0, max_err = 0;
  for (int64_t j = 0; j < want.num_elements(); ++j) {
    const double a = Load(got.type(), got.raw_data(), j), b = Load(want.type(), want.raw_data(), j);
    max_ref = std::max(max_ref, std::fabs(b));
    max_err = std::max(max_err, std::fabs(a - b));
  }
  const double bound = got.type() == DataType::kFP32 ? 1e-4 : 3e-2;
  if (!(max_err <= bound * max_ref)) {
    return absl::InternalError(absl::StrCat("max |fused - composed| ", max_err, " over max ",
                                            max_ref, " (bound ", bound, ")"));
  }
  return absl::OkStatus();
}

struct LayerCache {
  std::string weights_key, case_key;
  std::optional<LayerWeights> weights;
  std::optional<LayerCase> data;
};

LayerCache& TheLayerCache() {
  static LayerCache* cache = new LayerCache;
  return *cache;
}

// Fills `lw` in place: the layer's views point into it.
absl::Status MakeWeights(DataType type, const LayerShape& shape, LayerWeights& lw) {
  GEMMSERVE_ASSIGN_OR_RETURN(lw.gate_up, MakeProjection(type, shape.g, shape.k, 2 * shape.i, 11));
  GEMMSERVE_ASSIGN_OR_RETURN(lw.down, MakeProjection(type, shape.g, shape.i, shape.k, 12));
  MoeLayer& l = lw.layer;
  l.type = type;
  l.k = shape.k;
  l.i = shape.i;
  l.g = shape.g;
  l.s = shape.s;
  l.gate_up = MoeProjection{lw.gate_up.weights()};
  l.down = MoeProjection{lw.down.weights()};
  return absl::OkStatus();
}

absl::StatusOr<LayerCase> MakeCase(DataType type, const LayerShape& shape, int64_t m) {
  LayerCase c;
  GEMMSERVE_ASSIGN_OR_RETURN(c.x, RandomTensor(type, {m, shape.k}, 13));
  GEMMSERVE_ASSIGN_OR_RETURN(c.ids, MakeRouting(m, shape.s, shape.g, Routing::kUniform, 14));
  GEMMSERVE_ASSIGN_OR_RETURN(c.out, Tensor::Allocate(type, {m, shape.k}));
  for (int64_t p = 0; p < m * shape.s; ++p) c.w.push_back(1.0f / static_cast<float>(1 + p % 3));
  std::vector<bool> used(static_cast<size_t>(shape.g), false);
  for (int64_t p = 0; p < m * shape.s; ++p) used[c.ids.data<int64_t>()[p]] = true;
  for (int64_t e = 0; e < shape.g; ++e) {
    if (used[e]) c.used.push_back(e);
  }
  return c;
}

void BenchLayer(benchmark::State& state, const std::string& name, bool fused, DataType type,
                const LayerShape& shape, int64_t m) {
  bench::EnterOwnFamily();
  LayerCache& cache = TheLayerCache();
  const std::string weights_key = absl::StrCat(DataTypeName(type), "/", shape.name);
  if (cache.weights_key != weights_key) {
    cache.data.reset();
    cache.weights.reset();
    cache.weights.emplace();
    absl::Status made = MakeWeights(type, shape, *cache.weights);
    if (!made.ok()) {
      cache.weights.reset();
      return bench::FailCase(state, made.ToString());
    }
    cache.weights_key = weights_key;
  }
  const std::string case_key = absl::StrCat(weights_key, "/", m);
  if (cache.case_key != case_key) {
    absl::StatusOr<LayerCase> c = MakeCase(type, shape, m);
    if (!c.ok()) return bench::FailCase(state, c.status().ToString());
    cache.data = std::move(*c);
    cache.case_key = case_key;
  }
  const LayerWeights& lw = *cache.weights;
  LayerCase& c = *cache.data;
  auto run = [&lw, &c](bool f) { return f ? RunFused(lw, c) : RunComposed(lw, c); };
  auto check = [&]() -> absl::Status {
    Tensor mine = std::move(c.out);
    GEMMSERVE_ASSIGN_OR_RETURN(c.out, Tensor::Allocate(type, mine.shape()));
    absl::Status other = run(!fused);
    std::swap(mine, c.out);
    GEMMSERVE_RETURN_IF_ERROR(other);
    return SameLayer(c.out, mine);
  };
  std::function<void()> evict;
  if (m <= kColdMaxTokens) {
    evict = [&] {
      for (int64_t e : c.used) {
        bench::EvictFromCaches(lw.gate_up.group(e), lw.gate_up.group_bytes());
        bench::EvictFromCaches(lw.down.group(e), lw.down.group_bytes());
      }
    };
  }
  const std::optional<double> seconds = bench::CheckAndTime(
      state, name, &c.out, [&] { return run(fused); }, check, evict);
  if (!seconds) return;
  const double bytes = static_cast<double>(c.used.size()) *
                       static_cast<double>(lw.gate_up.group_bytes() + lw.down.group_bytes());
  bench::SetRate(state, "GFLOPS", 1e-9 * static_cast<double>(MoeLayerFlops(lw.layer, m)), *seconds);
  state.counters["bytes_touched"] = bytes;
  bench::SetRate(state, "GBps_effective", bytes / 1e9, *seconds);
  state.counters["distinct_groups"] = static_cast<double>(c.used.size());
  state.counters["panels"] = lw.gate_up.packed ? 1 : 0;
}

}  // namespace

void RegisterMoeLayerCases() {
  for (const LayerShape& shape : kLayerShapes) {
    for (DataType type : {DataType::kFP32, DataType::kBF16}) {
      for (int64_t m : kLayerTokens) {
        for (bool fused : {true, false}) {
          const std::string name =
              absl::StrCat("MoeLayer/", fused ? "fused" : "composed", "/",
                           absl::AsciiStrToLower(DataTypeName(type)), "/", shape.name, "/", m);
          bench::Register(name, [=](benchmark::State& state) {
            BenchLayer(state, name, fused, type, shape, m);
          });
        }
      }
      bench::EndGroup();
    }
  }
}

void ReleaseMoeLayerCases() {
  LayerCache& cache = TheLayerCache();
  cache.data.reset();
  cache.weights.reset();
  cache.weights_key.clear();
  cache.case_key.clear();
}

}  // namespace gemmserve
