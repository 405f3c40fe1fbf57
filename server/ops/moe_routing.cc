// The routing of a mixture-of-experts layer computed in the layer
// (moe_layer.h): FP32 logits of the router, then softmax and top-S, or top-S
// and softmax, in double.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "absl/status/status.h"
#include "server/common/allocation.h"
#include "server/common/status_macros.h"
#include "server/ops/moe_layer.h"
#include "server/ops/kernels/gemm.h"

namespace gemmserve {

const char* MoeActivationName(MoeActivation a) {
  switch (a) {
    case MoeActivation::kSilu: return "silu";
    case MoeActivation::kGelu: return "gelu";
    case MoeActivation::kGeluTanh: return "gelu_tanh";
  }
  return "unknown";
}

const char* MoeRoutingName(MoeRouting r) {
  switch (r) {
    case MoeRouting::kGiven: return "given";
    case MoeRouting::kSoftmaxTopK: return "softmax_topk";
    case MoeRouting::kTopKSoftmax: return "topk_softmax";
  }
  return "unknown";
}

namespace {

// Rows of x routed per router GEMM: the widened rows and their logits stay
// small however many tokens a call has.
constexpr int64_t kRouterRows = 256;

// Row r of `x` (T) as floats.
void WidenRow(DataType type, const void* x, int64_t k, float* dst) {
  if (type == DataType::kFP32) {
    std::memcpy(dst, x, static_cast<size_t>(k) * sizeof(float));
  } else {
    HalfToFloatBlock(type, static_cast<const uint16_t*>(x), dst, k);
  }
}

// The S largest of `v` in order, ties to the lower index as ONNX's TopK;
// NaN ranks below every number, so a row of NaN still gives S valid ids.
void TopS(const double* v, int64_t g, int64_t s, std::vector<int64_t>* order) {
  order->resize(static_cast<size_t>(g));
  std::iota(order->begin(), order->end(), int64_t{0});
  auto key = [&](int64_t e) {
    return std::isnan(v[e]) ? -std::numeric_limits<double>::infinity() : v[e];
  };
  std::partial_sort(order->begin(), order->begin() + s, order->end(), [&](int64_t a, int64_t b) {
    const double ka = key(a), kb = key(b);
    return ka > kb || (ka == kb && a < b);
  });
}

// softmax over v[0..n) in place.
void Softmax(double* v, int64_t n) {
  double top = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < n; ++j) top = std::max(top, v[j]);
  double sum = 0;
  for (int64_t j = 0; j < n; ++j) sum += (v[j] = std::exp(v[j] - top));
  for (int64_t j = 0; j < n; ++j) v[j] /= sum;
}

// One token's experts and weights from its logits.
void SelectExperts(const MoeLayer& layer, const float* logits, std::vector<double>* scratch,
                   std::vector<int64_t>* order, int64_t* ids, float* w) {
  const int64_t g = layer.g, s = layer.s;
  scratch->assign(logits, logits + g);
  scratch->resize(static_cast<size_t>(g + s));
  double* v = scratch->data();
  double* chosen = v + g;
  if (layer.routing == MoeRouting::kSoftmaxTopK) Softmax(v, g);
  TopS(v, g, s, order);
  for (int64_t j = 0; j < s; ++j) {
    ids[j] = (*order)[j];
    chosen[j] = v[(*order)[j]];
  }
  if (layer.routing == MoeRouting::kTopKSoftmax) Softmax(chosen, s);
  double sum = 0;
  for (int64_t j = 0; j < s; ++j) sum += chosen[j];
  for (int64_t j = 0; j < s; ++j) {
    w[j] = static_cast<float>(layer.normalise ? chosen[j] / sum : chosen[j]);
  }
}

}  // namespace

absl::Status RouteMoeLayer(const MoeLayer& layer, int64_t m, const void* x, int64_t* ids, float* w,
                           int threads) {
  if (layer.router == nullptr || layer.router->type() != DataType::kFP32 ||
      layer.router->shape() != Shape{layer.k, layer.g} || layer.s > layer.g) {
    return absl::InternalError("mixture-of-experts layer: the router differs from the layer");
  }
  const int64_t k = layer.k, g = layer.g;
  const int64_t es = DataTypeSize(layer.type);
  return CatchAllocationFailure("the layer's routing", [&]() -> absl::Status {
    std::vector<float> widened(static_cast<size_t>(std::min(m, kRouterRows) * k));
    std::vector<float> logits(static_cast<size_t>(std::min(m, kRouterRows) * g));
    std::vector<double> scratch;
    std::vector<int64_t> order;
    for (int64_t begin = 0; begin < m; begin += kRouterRows) {
      const int64_t rows = std::min(kRouterRows, m - begin);
      const auto* rows_x = static_cast<const uint8_t*>(x) + begin * k * es;
      for (int64_t r = 0; r < rows; ++r) {
        WidenRow(layer.type, rows_x + r * k * es, k, widened.data() + r * k);
      }
      GemmProblem p;
      p.m = rows;
      p.n = g;
      p.k = k;
      p.a = widened.data();
      p.lda = k;
      p.b = layer.router->raw_data();
      p.ldb = g;
      p.c = logits.data();
      p.ldc = g;
      GEMMSERVE_RETURN_IF_ERROR(RunGemmProblems({p}, threads));
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t t = begin + r;
        SelectExperts(layer, logits.data() + r * g, &scratch, &order, ids + t * layer.s,
                      w + t * layer.s);
      }
    }
    return absl::OkStatus();
  });
}

// Bytes RouteMoeLayer holds for m tokens beyond ids and w.
int64_t MoeRoutingWorkBytes(const MoeLayer& layer, int64_t m, int threads) {
  if (layer.routing == MoeRouting::kGiven) return 0;
  const int64_t rows = std::min(m, kRouterRows);
  GemmWorkShape work;
  work.problems = 1;
  work.rows = work.min_rows = work.max_rows = rows;
  work.k = layer.k;
  work.n = layer.g;
  const int64_t buffers = SaturatingMul(SaturatingMul(rows, SaturatingAdd(layer.k, layer.g)), 4);
  // The per-token scratch: logits in double and the order of the experts.
  const int64_t per_token = SaturatingMul(SaturatingAdd(layer.g, layer.s), 16);
  return SaturatingAdd(SaturatingAdd(buffers, per_token), GemmWorkBytes(work, threads));
}

}  // namespace gemmserve
