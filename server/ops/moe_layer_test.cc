// The fused mixture-of-experts layer against a plain float64 evaluation of
// the layer's formula, over every form (gate/up fused or separate, SiLU or
// GELU, routing given or computed three ways, a shared expert, biases), each
// value type, weights row-major, packed and quantized, and shapes with
// zeros, ones, primes and more pairs than one wave holds.
#include "server/ops/moe_layer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "server/ops/kernels/gemm_testing.h"
#include "server/ops/packed_weights.h"
#include "server/ops/quantized_weights.h"

namespace gemmserve {
namespace {

using ops_testing::FillRandom;
using ops_testing::SetValue;
using ops_testing::ValueAt;

enum class Storage { kRowMajor, kPanels, kQuantized };

struct Form {
  DataType type = DataType::kFP32;
  int64_t m = 5, k = 16, i = 8, g = 4, s = 2;
  bool fused = true;
  MoeActivation activation = MoeActivation::kSilu;
  MoeRouting routing = MoeRouting::kGiven;
  bool normalise = false;
  bool shared = false;
  bool bias = false;
  Storage storage = Storage::kRowMajor;

  std::string Name() const {
    return absl::StrCat(DataTypeName(type), " m", m, " k", k, " i", i, " g", g, " s", s,
                        fused ? " fused " : " separate ", MoeActivationName(activation), " ",
                        MoeRoutingName(routing), normalise ? " normalised" : "",
                        shared ? " shared" : "", bias ? " bias" : "", " storage ",
                        static_cast<int>(storage));
  }
};

// One projection: its values as doubles (what the reference reads), and the
// storage the layer reads.
struct Projection {
  std::vector<double> values;  // [groups, k, n]
  std::vector<double> bias;    // [groups, n] or empty
  Tensor dense, bias_tensor;
  std::optional<PackedWeights> packed;
  std::optional<QuantizedWeights> quantized;
  int64_t groups = 0, k = 0, n = 0;

  MoeProjection View() const {
    MoeProjection p{quantized ? GroupedWeights(*quantized)
                    : packed  ? GroupedWeights(*packed)
                              : GroupedWeights(dense)};
    if (!bias.empty()) p.bias = &bias_tensor;
    return p;
  }
};

// Weights of `type`, uniform in [-scale, scale]; quantized: INT8 per
// column with an FP32... scale of `type`, the reference reading the
// dequantized values.
Projection MakeProjection(const Form& f, int64_t groups, int64_t k, int64_t n, bool two_d,
                          std::mt19937_64& rng) {
  Projection p;
  p.groups = groups;
  p.k = k;
  p.n = n;
  const Shape shape = two_d ? Shape{k, n} : Shape{groups, k, n};
  const double scale = 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(k, 1)));
  const int64_t count = groups * k * n;
  p.values.resize(static_cast<size_t>(count));
  if (f.storage == Storage::kQuantized) {
    QuantizedWeights::Layout layout;
    layout.type = QuantizedType::kInt8;
    layout.shape = shape;
    layout.axis = static_cast<int64_t>(shape.size()) - 1;  // per output column
    layout.scale_shape = {n};
    layout.value_type = f.type;
    std::vector<float> scales(static_cast<size_t>(n));
    std::uniform_real_distribution<double> dist(0.5, 1.5);
    for (auto& sc : scales) sc = static_cast<float>(dist(rng) * scale / 127);
    // The scale as the value type holds it (what the kernel multiplies by).
    Tensor scale_t = *Tensor::Allocate(f.type, {n});
    for (int64_t j = 0; j < n; ++j) SetValue(f.type, scale_t.raw_data(), j, scales[j]);
    for (int64_t j = 0; j < n; ++j)
      scales[j] = static_cast<float>(ValueAt(f.type, scale_t.raw_data(), j));
    AlignedBuffer data = *AlignedBuffer::Allocate(count);
    auto* q = static_cast<int8_t*>(data.data());
    std::uniform_int_distribution<int> ints(-128, 127);
    for (int64_t x = 0; x < count; ++x) {
      q[x] = static_cast<int8_t>(ints(rng));
      p.values[x] = q[x] * static_cast<double>(scales[x % n]);
    }
    absl::StatusOr<QuantizedWeights> w =
        QuantizedWeights::Make(layout, std::move(data), std::move(scales), {});
    EXPECT_TRUE(w.ok()) << w.status();
    p.quantized = std::move(*w);
  } else {
    p.dense = *Tensor::Allocate(f.type, shape);
    FillRandom(f.type, p.dense.raw_data(), count, rng);
    for (int64_t x = 0; x < count; ++x) {
      SetValue(f.type, p.dense.raw_data(), x, ValueAt(f.type, p.dense.raw_data(), x) * scale);
      p.values[x] = ValueAt(f.type, p.dense.raw_data(), x);
    }
    if (f.storage == Storage::kPanels && PackedWeights::Supports(f.type)) {
      p.packed = *PackedWeights::Pack(p.dense);
    }
  }
  if (f.bias) {
    p.bias_tensor = *Tensor::Allocate(f.type, two_d ? Shape{n} : Shape{groups, n});
    FillRandom(f.type, p.bias_tensor.raw_data(), groups * n, rng);
    for (int64_t x = 0; x < groups * n; ++x) {
      p.bias.push_back(ValueAt(f.type, p.bias_tensor.raw_data(), x));
    }
  }
  return p;
}

double Act(MoeActivation a, double g) {
  switch (a) {
    case MoeActivation::kSilu: return g / (1 + std::exp(-g));
    case MoeActivation::kGelu: return 0.5 * g * (1 + std::erf(g / std::sqrt(2.0)));
    case MoeActivation::kGeluTanh:
      return 0.5 * g * (1 + std::tanh(std::sqrt(2 / M_PI) * (g + 0.044715 * g * g * g)));
  }
  return g;
}

// x[t] @ proj[group] (+ bias), in double.
std::vector<double> Project(const Projection& p, int64_t group, const std::vector<double>& x) {
  std::vector<double> out(static_cast<size_t>(p.n), 0.0);
  for (int64_t j = 0; j < p.n; ++j) {
    double acc = p.bias.empty() ? 0.0 : p.bias[group * p.n + j];
    for (int64_t q = 0; q < p.k; ++q) acc += x[q] * p.values[(group * p.k + q) * p.n + j];
    out[j] = acc;
  }
  return out;
}

struct Layer {
  Form form;
  std::optional<Projection> gate_up, gate, up, down, sg, su, sd;
  Tensor router;
  std::vector<double> router_values;  // [K, G]
  MoeLayer view;

  explicit Layer(const Form& f) : form(f) {
    std::mt19937_64 rng(f.m * 131 + f.k * 7 + f.i + static_cast<int>(f.type));
    if (f.fused) {
      gate_up = MakeProjection(f, f.g, f.k, 2 * f.i, false, rng);
    } else {
      gate = MakeProjection(f, f.g, f.k, f.i, false, rng);
      up = MakeProjection(f, f.g, f.k, f.i, false, rng);
    }
    down = MakeProjection(f, f.g, f.i, f.k, false, rng);
    if (f.shared) {
      sg = MakeProjection(f, 1, f.k, f.i + 3, true, rng);
      su = MakeProjection(f, 1, f.k, f.i + 3, true, rng);
      sd = MakeProjection(f, 1, f.i + 3, f.k, true, rng);
    }
    view.type = f.type;
    view.k = f.k;
    view.i = f.i;
    view.g = f.g;
    view.s = f.s;
    view.activation = f.activation;
    view.routing = f.routing;
    view.normalise = f.normalise;
    if (gate_up) view.gate_up = gate_up->View();
    if (gate) view.gate = gate->View();
    if (up) view.up = up->View();
    view.down = down->View();
    if (f.shared) {
      view.shared_gate = sg->View();
      view.shared_up = su->View();
      view.shared_down = sd->View();
      view.shared_i = f.i + 3;
    }
    if (f.routing != MoeRouting::kGiven) {
      router = *Tensor::Allocate(DataType::kFP32, {f.k, f.g});
      FillRandom(DataType::kFP32, router.raw_data(), f.k * f.g, rng);
      router_values.assign(router.data<float>(), router.data<float>() + f.k * f.g);
      view.router = &router;
    }
  }
};

// The top-S of a row in double, ties to the lower index, with the gap
// between the S-th and the next (how far a rounding is from flipping them).
void ReferenceRoute(const Layer& l, const std::vector<double>& x, int64_t* ids, double* w,
                    double* gap) {
  const Form& f = l.form;
  std::vector<double> v(static_cast<size_t>(f.g), 0.0);
  for (int64_t e = 0; e < f.g; ++e)
    for (int64_t q = 0; q < f.k; ++q) v[e] += x[q] * l.router_values[q * f.g + e];
  std::vector<int64_t> order(static_cast<size_t>(f.g));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return v[a] > v[b]; });
  *gap = f.s < f.g ? v[order[f.s - 1]] - v[order[f.s]] : 1.0;
  auto softmax = [](std::vector<double>* xs) {
    const double top = *std::max_element(xs->begin(), xs->end());
    double sum = 0;
    for (double& e : *xs) sum += (e = std::exp(e - top));
    for (double& e : *xs) e /= sum;
  };
  std::vector<double> p = v;
  if (f.routing == MoeRouting::kSoftmaxTopK) softmax(&p);
  std::vector<double> chosen;
  for (int64_t j = 0; j < f.s; ++j) {
    ids[j] = order[j];
    chosen.push_back(p[order[j]]);
  }
  if (f.routing == MoeRouting::kTopKSoftmax) softmax(&chosen);
  double sum = std::accumulate(chosen.begin(), chosen.end(), 0.0);
  for (int64_t j = 0; j < f.s; ++j) w[j] = f.normalise ? chosen[j] / sum : chosen[j];
}

// out[t] in double for token t with its ids and weights.
std::vector<double> ReferenceToken(const Layer& l, const std::vector<double>& x, const int64_t* ids,
                                   const double* w) {
  const Form& f = l.form;
  std::vector<double> out(static_cast<size_t>(f.k), 0.0);
  auto ffn = [&](const Projection* gu, const Projection* g, const Projection* u,
                 const Projection& d, int64_t e, MoeActivation act, double weight) {
    std::vector<double> gv, uv;
    if (gu != nullptr) {
      const std::vector<double> both = Project(*gu, e, x);
      gv.assign(both.begin(), both.begin() + gu->n / 2);
      uv.assign(both.begin() + gu->n / 2, both.end());
    } else {
      gv = Project(*g, e, x);
      uv = Project(*u, e, x);
    }
    for (size_t j = 0; j < gv.size(); ++j) gv[j] = Act(act, gv[j]) * uv[j];
    const std::vector<double> y = Project(d, e, gv);
    for (int64_t j = 0; j < f.k; ++j) out[j] += weight * y[j];
  };
  for (int64_t j = 0; j < f.s; ++j) {
    ffn(l.gate_up ? &*l.gate_up : nullptr, l.gate ? &*l.gate : nullptr, l.up ? &*l.up : nullptr,
        *l.down, ids[j], f.activation, w[j]);
  }
  if (f.shared) ffn(nullptr, &*l.sg, &*l.su, *l.sd, 0, MoeActivation::kSilu, 1.0);
  return out;
}

double Tolerance(DataType type) {
  return type == DataType::kFP32 ? 1e-4 : type == DataType::kFP16 ? 5e-3 : 3e-2;
}

void CheckForm(const Form& f) {
  SCOPED_TRACE(f.Name());
  Layer l(f);
  std::mt19937_64 rng(99 + f.m);
  Tensor x = *Tensor::Allocate(f.type, {f.m, f.k});
  FillRandom(f.type, x.raw_data(), f.m * f.k, rng);
  std::vector<int64_t> ids(static_cast<size_t>(f.m * f.s));
  std::vector<float> w(ids.size());
  std::vector<double> w_ref(ids.size());
  std::uniform_int_distribution<int64_t> expert(0, f.g - 1);
  std::uniform_real_distribution<double> weight(0.0, 1.0);
  std::vector<std::vector<double>> xs(static_cast<size_t>(f.m));
  for (int64_t t = 0; t < f.m; ++t) {
    for (int64_t q = 0; q < f.k; ++q) xs[t].push_back(ValueAt(f.type, x.raw_data(), t * f.k + q));
    if (f.routing == MoeRouting::kGiven) {
      for (int64_t j = 0; j < f.s; ++j) {  // repeats allowed: the op does not forbid them
        ids[t * f.s + j] = expert(rng);
        w[t * f.s + j] = static_cast<float>(weight(rng));
        w_ref[t * f.s + j] = w[t * f.s + j];
      }
    } else {
      double gap;
      ReferenceRoute(l, xs[t], &ids[t * f.s], &w_ref[t * f.s], &gap);
      ASSERT_GT(gap, 1e-4) << "token " << t << ": a near tie; pick another seed";
    }
  }
  if (f.routing != MoeRouting::kGiven) {  // the layer's own routing agrees
    std::vector<int64_t> got_ids(ids.size());
    std::vector<float> got_w(ids.size());
    ASSERT_TRUE(RouteMoeLayer(l.view, f.m, x.raw_data(), got_ids.data(), got_w.data(), 2).ok());
    EXPECT_EQ(got_ids, ids);
    // FP32 logits: a few ulps of their K-term sums, through the softmax.
    for (size_t p = 0; p < ids.size(); ++p) EXPECT_NEAR(got_w[p], w_ref[p], 2e-5);
  }
  Tensor out = *Tensor::Allocate(f.type, {f.m, f.k});
  MoeLayerCall call;
  call.m = f.m;
  call.x = x.raw_data();
  if (f.routing == MoeRouting::kGiven) {
    call.ids = ids.data();
    call.w = w.data();
  }
  call.out = out.raw_data();
  ASSERT_TRUE(RunMoeLayer(l.view, call, 2).ok());
  double max_ref = 0, max_err = 0;
  for (int64_t t = 0; t < f.m; ++t) {
    const std::vector<double> ref = ReferenceToken(l, xs[t], &ids[t * f.s], &w_ref[t * f.s]);
    for (int64_t j = 0; j < f.k; ++j) {
      max_ref = std::max(max_ref, std::fabs(ref[j]));
      max_err = std::max(max_err, std::fabs(ValueAt(f.type, out.raw_data(), t * f.k + j) - ref[j]));
    }
  }
  if (f.m == 0 || f.k == 0) return;
  EXPECT_LE(max_err, Tolerance(f.type) * std::max(max_ref, 1e-30)) << max_err << " of " << max_ref;
}

TEST(MoeLayerTest, EveryFormMatchesTheFormula) {
  for (DataType type : {DataType::kFP32, DataType::kFP16, DataType::kBF16}) {
    for (Storage storage : {Storage::kRowMajor, Storage::kPanels, Storage::kQuantized}) {
      for (bool fused : {true, false}) {
        for (MoeRouting routing :
             {MoeRouting::kGiven, MoeRouting::kSoftmaxTopK, MoeRouting::kTopKSoftmax}) {
          Form f;
          f.type = type;
          f.storage = storage;
          f.fused = fused;
          f.routing = routing;
          f.normalise = routing == MoeRouting::kSoftmaxTopK && fused;
          f.shared = !fused;
          f.bias = fused && routing == MoeRouting::kGiven;
          f.activation = fused ? MoeActivation::kSilu : MoeActivation::kGelu;
          CheckForm(f);
        }
      }
    }
  }
}

TEST(MoeLayerTest, ShapesWithZerosOnesPrimesAndManyWaves) {
  struct Dims {
    int64_t m, k, i, g, s;
  };
  for (const Dims& d : std::vector<Dims>{{0, 16, 8, 4, 2},
                                         {1, 1, 1, 1, 1},
                                         {7, 13, 5, 3, 3},
                                         {1, 67, 31, 11, 2},
                                         {300, 24, 17, 5, 2},  // 600 pairs: two waves
                                         {33, 64, 48, 64, 8},
                                         {3, 520, 260, 4, 2},
                                         {300, 256, 160, 8, 2}}) {  // epilogues on threads
    for (DataType type : {DataType::kFP32, DataType::kBF16}) {
      Form f;
      f.type = type;
      f.m = d.m;
      f.k = d.k;
      f.i = d.i;
      f.g = d.g;
      f.s = d.s;
      f.storage = Storage::kPanels;
      f.activation = MoeActivation::kGeluTanh;
      f.shared = d.m == 300;
      CheckForm(f);
      f.routing = MoeRouting::kTopKSoftmax;
      f.storage = Storage::kRowMajor;
      CheckForm(f);
    }
  }
}

TEST(MoeLayerTest, WorkBytesBoundsWhatTheWavesHold) {
  Form f;
  f.k = 2048;
  f.i = 1024;
  f.g = 64;
  f.s = 8;
  f.routing = MoeRouting::kSoftmaxTopK;
  Layer l(Form{DataType::kFP32, 1, 8, 4, 4, 2});  // a view to size: the weights are unused
  MoeLayer view = l.view;
  view.k = f.k;
  view.i = f.i;
  view.g = f.g;
  view.s = f.s;
  const int64_t wave = MoeWaveRows(view);
  EXPECT_GE(wave, 64);
  EXPECT_LE(wave, 2048);
  EXPECT_LE(wave * (2 * f.i + f.k) * 4, kMoeWaveBytes);
  const int64_t one = MoeLayerWorkBytes(view, 1, 2);
  const int64_t many = MoeLayerWorkBytes(view, 1024, 2);
  EXPECT_GE(one, f.s * (2 * f.i + f.k) * 4);    // one token's tiles at least
  EXPECT_GE(many, wave * (2 * f.i + f.k) * 4);  // a whole wave's
  EXPECT_GT(many, one);
  // Requests batched together hold at most the sum of their own bounds.
  for (int64_t a : {1, 3, 40, 100}) {
    for (int64_t b : {1, 7, 64, 900}) {
      EXPECT_LE(MoeLayerWorkBytes(view, a + b, 2),
                MoeLayerWorkBytes(view, a, 2) + MoeLayerWorkBytes(view, b, 2))
          << a << " + " << b;
    }
  }
  EXPECT_EQ(MoeLayerFlops(view, 3), 2 * 3 * (8 * 3 * f.k * f.i));
}

TEST(MoeLayerTest, NanLogitsStillChooseValidExperts) {
  Form f;
  f.routing = MoeRouting::kSoftmaxTopK;
  Layer l(f);
  Tensor x = *Tensor::Allocate(DataType::kFP32, {2, f.k});
  for (int64_t j = 0; j < 2 * f.k; ++j) x.data<float>()[j] = std::nanf("");
  std::vector<int64_t> ids(4, -1);
  std::vector<float> w(4);
  ASSERT_TRUE(RouteMoeLayer(l.view, 2, x.raw_data(), ids.data(), w.data(), 1).ok());
  for (int64_t id : ids) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, f.g);
  }
  Tensor out = *Tensor::Allocate(DataType::kFP32, {2, f.k});
  MoeLayerCall call{2, x.raw_data(), nullptr, nullptr, out.raw_data()};
  EXPECT_TRUE(RunMoeLayer(l.view, call, 2).ok());
}

// A projection's groups [first, first + count) as a projection of their own
// (a shard's file holds only its experts), in the same storage.
Projection SliceGroups(const Form& f, const Projection& whole, int64_t first, int64_t count) {
  Projection p;
  p.groups = count;
  p.k = whole.k;
  p.n = whole.n;
  const int64_t per = whole.k * whole.n, es = DataTypeSize(f.type);
  p.values.assign(whole.values.begin() + first * per, whole.values.begin() + (first + count) * per);
  p.dense = *Tensor::Allocate(f.type, {count, whole.k, whole.n});
  std::memcpy(p.dense.raw_data(),
              static_cast<const uint8_t*>(whole.dense.raw_data()) + first * per * es,
              static_cast<size_t>(count * per * es));
  if (f.storage == Storage::kPanels && PackedWeights::Supports(f.type)) {
    p.packed = *PackedWeights::Pack(p.dense);
  }
  if (!whole.bias.empty()) {
    p.bias.assign(whole.bias.begin() + first * whole.n,
                  whole.bias.begin() + (first + count) * whole.n);
    p.bias_tensor = *Tensor::Allocate(f.type, {count, whole.n});
    std::memcpy(p.bias_tensor.raw_data(),
                static_cast<const uint8_t*>(whole.bias_tensor.raw_data()) + first * whole.n * es,
                static_cast<size_t>(count * whole.n * es));
  }
  return p;
}

// A sharded layer: each shard's partial FP32 sum over its own experts (ids
// of the whole layer; other shards' ids add nothing), plus the router's
// shared expert, add up to the whole layer's answer.
TEST(MoeLayerTest, ShardsPartialSumsAddUpToTheWholeLayer) {
  for (DataType type : {DataType::kFP32, DataType::kBF16}) {
    for (Storage storage : {Storage::kRowMajor, Storage::kPanels}) {
      Form f;
      f.type = type;
      f.storage = storage;
      f.m = 37;
      f.k = 24;
      f.i = 16;
      f.g = 7;
      f.s = 3;
      f.fused = storage == Storage::kPanels;
      f.shared = true;
      f.bias = true;
      SCOPED_TRACE(f.Name());
      Layer l(f);
      std::mt19937_64 rng(5);
      Tensor x = *Tensor::Allocate(type, {f.m, f.k});
      FillRandom(type, x.raw_data(), f.m * f.k, rng);
      std::vector<int64_t> ids(static_cast<size_t>(f.m * f.s));
      std::vector<float> w(ids.size());
      std::uniform_int_distribution<int64_t> expert(0, f.g - 1);
      for (size_t p = 0; p < ids.size(); ++p) {
        ids[p] = expert(rng);
        w[p] = 0.25f + 0.125f * static_cast<float>(p % 5);
      }
      std::vector<float> sum(static_cast<size_t>(f.m * f.k), 0.0f);
      auto add = [&](const MoeLayer& view) {
        Tensor part = *Tensor::Allocate(DataType::kFP32, {f.m, f.k});
        MoeLayerCall call{f.m, x.raw_data(), ids.data(), w.data(), part.raw_data()};
        ASSERT_TRUE(RunMoeLayer(view, call, 2).ok());
        for (size_t j = 0; j < sum.size(); ++j) sum[j] += part.data<float>()[j];
      };
      MoeLayer router = l.view;  // the shared expert alone
      router.gate_up.reset();
      router.gate.reset();
      router.up.reset();
      router.down.reset();
      router.experts_elsewhere = true;
      router.fp32_out = true;
      add(router);
      for (const auto& [first, last] : {std::make_pair<int64_t>(0, 3), {3, 4}, {4, 7}}) {
        std::optional<Projection> gate_up, gate, up, down;
        MoeLayer shard = l.view;
        shard.shared_gate.reset();
        shard.shared_up.reset();
        shard.shared_down.reset();
        shard.shared_i = 0;
        shard.g = last - first;
        shard.first_expert = first;
        shard.fp32_out = true;
        if (l.gate_up)
          shard.gate_up = (gate_up = SliceGroups(f, *l.gate_up, first, shard.g))->View();
        if (l.gate) shard.gate = (gate = SliceGroups(f, *l.gate, first, shard.g))->View();
        if (l.up) shard.up = (up = SliceGroups(f, *l.up, first, shard.g))->View();
        shard.down = (down = SliceGroups(f, *l.down, first, shard.g))->View();
        add(shard);
      }
      double max_ref = 0, max_err = 0;
      std::vector<double> w_ref(w.begin(), w.end());
      for (int64_t t = 0; t < f.m; ++t) {
        std::vector<double> xt;
        for (int64_t q = 0; q < f.k; ++q) xt.push_back(ValueAt(type, x.raw_data(), t * f.k + q));
        const std::vector<double> ref = ReferenceToken(l, xt, &ids[t * f.s], &w_ref[t * f.s]);
        for (int64_t j = 0; j < f.k; ++j) {
          max_ref = std::max(max_ref, std::fabs(ref[j]));
          max_err = std::max(max_err, std::fabs(sum[t * f.k + j] - ref[j]));
        }
      }
      EXPECT_LE(max_err, Tolerance(type) * max_ref) << max_err << " of " << max_ref;
    }
  }
}

}  // namespace
}  // namespace gemmserve
