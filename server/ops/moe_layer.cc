#include "server/ops/moe_layer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "server/common/allocation.h"
#include "server/common/status_macros.h"
#include "server/ops/kernels/gemm.h"

namespace gemmserve {
namespace {

// The shared expert's rows are sorted after every routed expert's.
constexpr int64_t kSharedExpert = -1;

// Consecutive sorted rows of one expert (or of the shared expert).
struct Segment {
  int64_t expert = 0;
  int64_t begin = 0, rows = 0;
};

// The (token, slot) pairs sorted by expert: their tokens and weights, and
// each expert's segment; the shared expert's rows (every token, weight 1)
// last.
struct SortedPairs {
  std::vector<int64_t> token;
  std::vector<float> weight;
  std::vector<Segment> segments;
};

// The expert a pair's id names among those the layer holds, or -1 when it
// is held elsewhere (another shard's, or every routed expert of a router).
int64_t HeldExpert(const MoeLayer& layer, int64_t id) {
  const int64_t local = id - layer.first_expert;
  return layer.experts_elsewhere || local < 0 || local >= layer.g ? -1 : local;
}

SortedPairs SortPairs(const MoeLayer& layer, int64_t m, const int64_t* ids, const float* w) {
  const int64_t pairs = m * layer.s;
  std::vector<int64_t> start(static_cast<size_t>(layer.g + 1), 0);
  int64_t held = 0;
  for (int64_t p = 0; p < pairs; ++p) {
    const int64_t e = HeldExpert(layer, ids[p]);
    if (e < 0) continue;
    ++start[e + 1];
    ++held;
  }
  for (int64_t e = 0; e < layer.g; ++e) start[e + 1] += start[e];
  SortedPairs sorted;
  const int64_t shared = layer.shared_down ? m : 0;
  sorted.token.resize(static_cast<size_t>(held + shared));
  sorted.weight.resize(static_cast<size_t>(held + shared));
  for (int64_t e = 0; e < layer.g; ++e) {
    if (start[e + 1] > start[e]) sorted.segments.push_back({e, start[e], start[e + 1] - start[e]});
  }
  for (int64_t p = 0; p < pairs; ++p) {  // stable: a token's slots in order
    const int64_t e = HeldExpert(layer, ids[p]);
    if (e < 0) continue;
    const int64_t at = start[e]++;
    sorted.token[at] = p / layer.s;
    sorted.weight[at] = w[p];
  }
  for (int64_t t = 0; t < shared; ++t) {
    sorted.token[held + t] = t;
    sorted.weight[held + t] = 1.0f;
  }
  if (shared > 0) sorted.segments.push_back({kSharedExpert, held, shared});
  return sorted;
}

// The tile's row stride (elements): gate and up side by side, for the
// widest expert.
int64_t TileWidth(const MoeLayer& layer) { return 2 * std::max(layer.i, layer.shared_i); }

// Half-type values are widened and narrowed in chunks of this many.
constexpr int64_t kChunk = 256;

float Activate(MoeActivation act, float g) {
  switch (act) {
    case MoeActivation::kSilu: return g / (1.0f + std::exp(-g));
    case MoeActivation::kGelu: return 0.5f * g * (1.0f + std::erf(g * 0.70710678118654752f));
    case MoeActivation::kGeluTanh:
      return 0.5f * g * (1.0f + std::tanh(0.79788456080286536f * (g + 0.044715f * g * g * g)));
  }
  return g;
}

// Element work below which the epilogues run on the calling thread: waking
// the workers costs more than a decode step's few rows.
constexpr int64_t kParallelElements = int64_t{1} << 16;

// a = act(g) * u in one tile row of width 2n: a replaces g. Half types are
// widened a chunk at a time and rounded back once, as the graph rounds a.
void ActivateRow(DataType type, MoeActivation act, void* row, int64_t n) {
  if (type == DataType::kFP32) {
    float* v = static_cast<float*>(row);
    for (int64_t j = 0; j < n; ++j) v[j] = Activate(act, v[j]) * v[n + j];
    return;
  }
  auto* h = static_cast<uint16_t*>(row);
  float g[kChunk], u[kChunk];
  for (int64_t j0 = 0; j0 < n; j0 += kChunk) {
    const int64_t count = std::min(kChunk, n - j0);
    HalfToFloatBlock(type, h + j0, g, count);
    HalfToFloatBlock(type, h + n + j0, u, count);
    for (int64_t j = 0; j < count; ++j) g[j] = Activate(act, g[j]) * u[j];
    FloatToHalfBlock(type, g, h + j0, count);
  }
}

// A wave: segments cut to at most the wave's rows, placed one after another
// in the tiles.
struct WavePart {
  Segment segment;
  int64_t tile_row = 0;
};

// The projections an expert's part uses.
struct ExpertWeights {
  const MoeProjection* gate_up = nullptr;  // fused
  const MoeProjection* gate = nullptr;     // or separate
  const MoeProjection* up = nullptr;
  const MoeProjection* down = nullptr;
  int64_t group = 0, i = 0;
  MoeActivation activation = MoeActivation::kSilu;
};

ExpertWeights WeightsOf(const MoeLayer& layer, int64_t expert) {
  ExpertWeights w;
  if (expert == kSharedExpert) {
    w.gate = &*layer.shared_gate;
    w.up = &*layer.shared_up;
    w.down = &*layer.shared_down;
    w.i = layer.shared_i;
    return w;  // the shared expert is SiLU's, group 0
  }
  w.gate_up = layer.gate_up ? &*layer.gate_up : nullptr;
  w.gate = layer.gate ? &*layer.gate : nullptr;
  w.up = layer.up ? &*layer.up : nullptr;
  w.down = &*layer.down;
  w.group = expert;
  w.i = layer.i;
  w.activation = layer.activation;
  return w;
}

// A problem of `rows` rows against group `group` of a projection [.., k, n]
// whose bias (if any) is added in the epilogue.
GemmProblem ProjectionProblem(DataType type, const MoeProjection& proj, int64_t group, int64_t rows,
                              int64_t k, int64_t n, bool int8_activations) {
  GemmProblem p;
  p.type = type;
  p.m = rows;
  p.k = k;
  p.n = n;
  SetGroupWeights(proj.weights, group, &p);
  p.int8_activations = int8_activations && p.b_quantized != nullptr;
  if (proj.bias != nullptr) {
    p.bias = static_cast<const uint8_t*>(proj.bias->raw_data()) + group * n * DataTypeSize(type);
  }
  return p;
}

struct WaveBuffers {
  AlignedBuffer tile;    // [wave rows, TileWidth] of T
  AlignedBuffer down;    // [wave rows, K] of T
  float* acc = nullptr;  // [M, K]
};

// Every part's gate/up problems: x's gathered rows into the tile, gate in
// its first I columns and up in the next I.
std::vector<GemmProblem> GateUpProblems(const MoeLayer& layer, const MoeLayerCall& call,
                                        const SortedPairs& sorted,
                                        const std::vector<WavePart>& parts, void* tile) {
  const DataType type = layer.type;
  const int64_t es = DataTypeSize(type), k = layer.k, ld = TileWidth(layer);
  std::vector<GemmProblem> problems;
  for (const WavePart& part : parts) {
    const ExpertWeights w = WeightsOf(layer, part.segment.expert);
    std::vector<std::pair<const MoeProjection*, int64_t>> projections;  // (weights, column)
    if (w.gate_up != nullptr) {
      projections.push_back({w.gate_up, 0});
    } else {
      projections.push_back({w.gate, 0});
      projections.push_back({w.up, w.i});
    }
    for (const auto& [proj, column] : projections) {
      const int64_t n = w.gate_up != nullptr ? 2 * w.i : w.i;
      GemmProblem p =
          ProjectionProblem(type, *proj, w.group, part.segment.rows, k, n, layer.int8_activations);
      p.a = call.x;
      p.lda = k;
      p.a_rows = sorted.token.data() + part.segment.begin;
      p.c = static_cast<uint8_t*>(tile) + (part.tile_row * ld + column) * es;
      p.ldc = ld;
      problems.push_back(p);
    }
  }
  return problems;
}

// The activation on every row of the wave's tile, rows shared among threads.
void ActivateWave(const MoeLayer& layer, const std::vector<WavePart>& parts, void* tile,
                  int threads) {
  const int64_t es = DataTypeSize(layer.type), ld = TileWidth(layer);
  std::vector<std::pair<int64_t, const WavePart*>> rows;  // (tile row, its part)
  int64_t elements = 0;
  for (const WavePart& part : parts) {
    for (int64_t r = 0; r < part.segment.rows; ++r) rows.emplace_back(part.tile_row + r, &part);
    elements += part.segment.rows * ld;
  }
  const int64_t count = static_cast<int64_t>(rows.size());
#pragma omp parallel for num_threads(threads) schedule(static) if (elements >= kParallelElements)
  for (int64_t r = 0; r < count; ++r) {
    const ExpertWeights w = WeightsOf(layer, rows[r].second->segment.expert);
    ActivateRow(layer.type, w.activation, static_cast<uint8_t*>(tile) + rows[r].first * ld * es,
                w.i);
  }
}

// Every part's down problem: the activations in the tile into `down`.
std::vector<GemmProblem> DownProblems(const MoeLayer& layer, const std::vector<WavePart>& parts,
                                      void* tile, void* down) {
  const int64_t es = DataTypeSize(layer.type), k = layer.k, ld = TileWidth(layer);
  std::vector<GemmProblem> problems;
  for (const WavePart& part : parts) {
    const ExpertWeights w = WeightsOf(layer, part.segment.expert);
    GemmProblem p = ProjectionProblem(layer.type, *w.down, w.group, part.segment.rows, w.i, k,
                                      layer.int8_activations);
    p.a = static_cast<uint8_t*>(tile) + part.tile_row * ld * es;
    p.lda = ld;
    p.c = static_cast<uint8_t*>(down) + part.tile_row * k * es;
    p.ldc = k;
    problems.push_back(p);
  }
  return problems;
}

// Each down row times its routing weight into its token's accumulator row.
// Rows of one token meet in a wave, so threads share the columns, not rows.
void AccumulateWave(const MoeLayer& layer, const SortedPairs& sorted,
                    const std::vector<WavePart>& parts, const void* down, float* acc, int threads) {
  constexpr int64_t kColumns = kChunk;
  const DataType type = layer.type;
  const int64_t es = DataTypeSize(type), k = layer.k;
  int64_t rows = 0;
  for (const WavePart& part : parts) rows += part.segment.rows;
  const int64_t chunks = (k + kColumns - 1) / kColumns;
#pragma omp parallel for num_threads(threads) schedule(static) if (rows * k >= kParallelElements)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t j0 = c * kColumns, j1 = std::min(k, j0 + kColumns);
    for (const WavePart& part : parts) {
      for (int64_t r = 0; r < part.segment.rows; ++r) {
        const int64_t sorted_row = part.segment.begin + r;
        const float weight = sorted.weight[sorted_row];
        float* out = acc + sorted.token[sorted_row] * k;
        const void* y = static_cast<const uint8_t*>(down) + (part.tile_row + r) * k * es;
        const float* yf = static_cast<const float*>(y) + j0;
        float widened[kColumns];
        if (type != DataType::kFP32) {
          HalfToFloatBlock(type, static_cast<const uint16_t*>(y) + j0, widened, j1 - j0);
          yf = widened;
        }
        for (int64_t j = j0; j < j1; ++j) out[j] += weight * yf[j - j0];
      }
    }
  }
}

absl::Status RunWave(const MoeLayer& layer, const MoeLayerCall& call, const SortedPairs& sorted,
                     const std::vector<WavePart>& parts, WaveBuffers* buf, int threads) {
  GEMMSERVE_RETURN_IF_ERROR(
      RunGemmProblems(GateUpProblems(layer, call, sorted, parts, buf->tile.data()), threads));
  ActivateWave(layer, parts, buf->tile.data(), threads);
  GEMMSERVE_RETURN_IF_ERROR(
      RunGemmProblems(DownProblems(layer, parts, buf->tile.data(), buf->down.data()), threads));
  AccumulateWave(layer, sorted, parts, buf->down.data(), buf->acc, threads);
  return absl::OkStatus();
}

// Cuts the sorted segments into waves of at most `cap` rows and runs them.
absl::Status RunWaves(const MoeLayer& layer, const MoeLayerCall& call, const SortedPairs& sorted,
                      WaveBuffers* buf, int threads) {
  const int64_t cap = MoeWaveRows(layer);
  std::vector<WavePart> parts;
  int64_t used = 0;
  for (const Segment& whole : sorted.segments) {
    for (int64_t at = 0; at < whole.rows;) {
      if (used == cap) {
        GEMMSERVE_RETURN_IF_ERROR(RunWave(layer, call, sorted, parts, buf, threads));
        parts.clear();
        used = 0;
      }
      const int64_t rows = std::min(whole.rows - at, cap - used);
      parts.push_back({{whole.expert, whole.begin + at, rows}, used});
      used += rows;
      at += rows;
    }
  }
  if (parts.empty()) return absl::OkStatus();
  return RunWave(layer, call, sorted, parts, buf, threads);
}

bool Consistent(const MoeLayer& layer) {
  const bool fused = layer.gate_up.has_value();
  const bool separate = layer.gate.has_value() && layer.up.has_value();
  const bool shared = layer.shared_gate && layer.shared_up && layer.shared_down;
  const bool no_shared = !layer.shared_gate && !layer.shared_up && !layer.shared_down;
  const bool experts = layer.experts_elsewhere ? !fused && !layer.gate && !layer.up && !layer.down
                                               : fused != separate && layer.down.has_value();
  return experts && (shared || no_shared) && layer.k > 0 && layer.first_expert >= 0 &&
         layer.i > 0 && layer.s > 0 &&
         (layer.s <= layer.g || layer.routing == MoeRouting::kGiven) &&
         (layer.routing == MoeRouting::kGiven) == (layer.router == nullptr) &&
         (layer.type == DataType::kFP32 || layer.type == DataType::kFP16 ||
          layer.type == DataType::kBF16);
}

}  // namespace

int64_t MoeWaveRows(const MoeLayer& layer) {
  const int64_t row_bytes = (TileWidth(layer) + layer.k) * DataTypeSize(layer.type);
  return std::clamp<int64_t>(kMoeWaveBytes / std::max<int64_t>(row_bytes, 1), 64, 2048);
}

int64_t MoeLayerFlops(const MoeLayer& layer, int64_t m) {
  // A router's routed experts are computed (and counted) by its shards.
  int64_t per_token =
      layer.experts_elsewhere ? 0
                              : SaturatingMul(SaturatingMul(layer.s, 3), SaturatingMul(layer.k, layer.i));
  per_token = SaturatingAdd(per_token, SaturatingMul(3, SaturatingMul(layer.k, layer.shared_i)));
  if (layer.router != nullptr)
    per_token = SaturatingAdd(per_token, SaturatingMul(layer.k, layer.g));
  return SaturatingMul(SaturatingMul(m, per_token), 2);
}

int64_t MoeLayerWorkBytes(const MoeLayer& layer, int64_t m, int threads) {
  const int64_t es = DataTypeSize(layer.type);
  const int64_t pairs = SaturatingMul(m, layer.s);
  const int64_t rows = SaturatingAdd(pairs, layer.shared_down ? m : 0);
  const int64_t wave = std::min(MoeWaveRows(layer), std::max<int64_t>(rows, 1));
  int64_t bytes = SaturatingMul(SaturatingMul(wave, SaturatingAdd(TileWidth(layer), layer.k)), es);
  bytes = SaturatingAdd(bytes, SaturatingMul(rows, sizeof(int64_t) + sizeof(float)));  // sorted
  bytes = SaturatingAdd(bytes, SaturatingMul(SaturatingAdd(layer.g, 1), 2 * sizeof(int64_t)));
  if (layer.type != DataType::kFP32) {
    bytes = SaturatingAdd(bytes, SaturatingMul(SaturatingMul(m, layer.k), 4));  // accumulator
  }
  if (layer.routing != MoeRouting::kGiven) {  // ids and weights of the routing
    bytes = SaturatingAdd(bytes, SaturatingMul(pairs, sizeof(int64_t) + sizeof(float)));
  }
  // One wave's problems (two per part at most, one more part per expert
  // cut) and the scheduler's scratch for the wider of its two GEMM phases;
  // the routing runs before the waves and holds its own.
  const int64_t parts = std::min(SaturatingAdd(layer.g, 2), wave);
  GemmWorkShape work;
  work.type = layer.type;
  work.problems = SaturatingMul(parts, 2);
  work.rows = SaturatingMul(wave, 2);  // separate gate and up: each row twice
  work.min_rows = 1;
  work.max_rows = wave;
  work.gathered = true;
  work.panels = true;
  work.k = std::max(layer.k, std::max(layer.i, layer.shared_i));
  work.n = std::max(layer.k, TileWidth(layer));
  int64_t gemm = GemmWorkBytes(work, threads);
  work.panels = false;
  gemm = std::max(gemm, GemmWorkBytes(work, threads));
  work.quantized = true;
  gemm = std::max(gemm, GemmWorkBytes(work, threads));
  work.int8_activations = true;
  gemm = std::max(gemm, GemmWorkBytes(work, threads));
  gemm = std::max(gemm, MoeRoutingWorkBytes(layer, m, threads));
  return SaturatingAdd(bytes, gemm);
}

namespace {

// Bytes of weights the segments' experts use, each expert once.
int64_t WeightBytesRead(const MoeLayer& layer, const SortedPairs& sorted) {
  int64_t bytes = 0;
  for (const Segment& segment : sorted.segments) {
    const ExpertWeights w = WeightsOf(layer, segment.expert);
    for (const MoeProjection* proj : {w.gate_up, w.gate, w.up}) {
      if (proj == nullptr) continue;
      const int64_t n = w.gate_up != nullptr ? 2 * w.i : w.i;
      bytes = SaturatingAdd(
          bytes,
          GemmWeightBytes({ProjectionProblem(layer.type, *proj, w.group, 1, layer.k, n, false)}));
    }
    bytes = SaturatingAdd(
        bytes,
        GemmWeightBytes({ProjectionProblem(layer.type, *w.down, w.group, 1, w.i, layer.k, false)}));
  }
  if (layer.router != nullptr) bytes = SaturatingAdd(bytes, layer.router->byte_size());
  return bytes;
}

}  // namespace

absl::Status RunMoeLayer(const MoeLayer& layer, const MoeLayerCall& call, int threads,
                         int64_t* weight_bytes_read) {
  if (call.m == 0) return absl::OkStatus();
  if (!Consistent(layer) || (layer.routing == MoeRouting::kGiven) != (call.ids != nullptr)) {
    return absl::InternalError("mixture-of-experts layer: the call differs from the layer");
  }
  const int64_t m = call.m, k = layer.k, es = DataTypeSize(layer.type);
  return CatchAllocationFailure("the layer's scratch", [&]() -> absl::Status {
    std::vector<int64_t> routed_ids;
    std::vector<float> routed_w;
    const int64_t* ids = call.ids;
    const float* w = call.w;
    if (ids == nullptr) {
      routed_ids.resize(static_cast<size_t>(m * layer.s));
      routed_w.resize(static_cast<size_t>(m * layer.s));
      GEMMSERVE_RETURN_IF_ERROR(
          RouteMoeLayer(layer, m, call.x, routed_ids.data(), routed_w.data(), threads));
      ids = routed_ids.data();
      w = routed_w.data();
    }
    const SortedPairs sorted = SortPairs(layer, m, ids, w);
    if (weight_bytes_read != nullptr) *weight_bytes_read = WeightBytesRead(layer, sorted);
    // Tiles for the rows a wave holds at most, or for all of them when fewer
    // (decode: a few rows, not megabytes mapped and unmapped per call).
    const int64_t wave = std::min(MoeWaveRows(layer), static_cast<int64_t>(sorted.token.size()));
    WaveBuffers buf;
    GEMMSERVE_ASSIGN_OR_RETURN(buf.tile, AlignedBuffer::Allocate(wave * TileWidth(layer) * es));
    GEMMSERVE_ASSIGN_OR_RETURN(buf.down, AlignedBuffer::Allocate(wave * k * es));
    std::vector<float> acc;
    const bool fp32_out = layer.type == DataType::kFP32 || layer.fp32_out;
    if (fp32_out) {
      buf.acc = static_cast<float*>(call.out);
    } else {
      acc.resize(static_cast<size_t>(m * k));
      buf.acc = acc.data();
    }
    std::fill(buf.acc, buf.acc + m * k, 0.0f);
    GEMMSERVE_RETURN_IF_ERROR(RunWaves(layer, call, sorted, &buf, threads));
    if (!fp32_out) {  // the one rounding to T
      const int64_t count = m * k;
      const int64_t chunks = (count + kChunk - 1) / kChunk;
#pragma omp parallel for num_threads(threads) schedule(static) if (count >= kParallelElements)
      for (int64_t c = 0; c < chunks; ++c) {
        const int64_t j0 = c * kChunk;
        FloatToHalfBlock(layer.type, buf.acc + j0, static_cast<uint16_t*>(call.out) + j0,
                         std::min(kChunk, count - j0));
      }
    }
    return absl::OkStatus();
  });
}

}  // namespace gemmserve
