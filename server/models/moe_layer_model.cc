#include "server/models/moe_layer_model.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/common/allocation.h"
#include "server/common/status_macros.h"
#include "server/models/resident_common.h"
#include "server/ops/grouped_matmul.h"
#include "server/ops/kernels/gemm.h"
#include "server/tensor/half.h"

namespace gemmserve {
namespace {

// One projection as held: its weights packed at load where panels serve
// (the row-major tensor then dropped), else as loaded.
class HeldProjection {
 public:
  // Level 4: quantized weights also repacked for 8-bit activations.
  static absl::StatusOr<HeldProjection> Hold(MoeWeightsSpec spec, int accuracy_level) {
    HeldProjection h;
    if (spec.quantized && accuracy_level == 4) {
      GEMMSERVE_RETURN_IF_ERROR(spec.quantized->PackForInt8Activations().status());
    }
    if (!spec.quantized) {
      GEMMSERVE_ASSIGN_OR_RETURN(h.packed_, PackAtLoad(spec.dense));
      if (h.packed_) spec.dense = Tensor();
    }
    h.spec_ = std::move(spec);
    return h;
  }
  MoeProjection View() const {
    MoeProjection p{spec_.quantized ? GroupedWeights(*spec_.quantized)
                    : packed_       ? GroupedWeights(*packed_)
                                    : GroupedWeights(spec_.dense)};
    if (spec_.bias) p.bias = &*spec_.bias;
    return p;
  }
  const char* layout() const {
    return spec_.quantized ? "quantized" : packed_ ? "panels" : "row_major";
  }
  int64_t bytes() const {
    const int64_t bias = spec_.bias ? spec_.bias->byte_size() : 0;
    return bias + (spec_.quantized ? spec_.quantized->bytes()
                   : packed_       ? packed_->bytes()
                                   : spec_.dense.byte_size());
  }
  const std::optional<QuantizedWeights>& quantized() const { return spec_.quantized; }
  bool has_bias() const { return spec_.bias.has_value(); }
  void Touch() const {
    TouchMemory(spec_.dense.raw_data(), spec_.dense.byte_size());
    if (packed_) TouchMemory(packed_->data(), packed_->bytes());
    if (spec_.quantized) {
      TouchMemory(spec_.quantized->data().data(), spec_.quantized->data().size());
    }
    if (spec_.bias) TouchMemory(spec_.bias->raw_data(), spec_.bias->byte_size());
  }

 private:
  MoeWeightsSpec spec_;
  std::optional<PackedWeights> packed_;
};

// A request: its bound inputs, and the layer's shape (a copy: the sizes are
// asked for until the request is answered).
class PreparedMoeLayer final : public PreparedInference {
 public:
  // `remote_bytes`: what a router's call on its shards holds for these rows.
  PreparedMoeLayer(const MoeLayer& layer, std::string output_name, BoundInput x,
                   std::optional<BoundInput> ids, std::optional<BoundInput> w, int64_t remote_bytes)
      : layer_(layer),
        remote_bytes_(remote_bytes),
        output_name_(std::move(output_name)),
        x_(std::move(x)),
        ids_(std::move(ids)),
        w_(std::move(w)) {}
  int64_t m() const { return x_.shape[0]; }
  int64_t output_bytes() const override {  // [M, K] of T, as x; of FP32 from a shard
    return layer_.fp32_out ? SaturatingMul(SaturatingMul(m(), layer_.k), 4) : x_.byte_size;
  }
  std::vector<std::pair<std::string, Shape>> output_shapes() const override {
    return {{output_name_, x_.shape}};
  }
  int64_t flops() const override { return MoeLayerFlops(layer_, m()); }
  bool may_run_inline() const override { return remote_bytes_ == 0; }  // a router waits on shards
  int64_t rows() const override { return m(); }
  int64_t held_bytes(int threads) const override {
    // Its rows of the batch's x, int64 ids and float weights, its output
    // twice, and its share of the layer's scratch (MoeLayerWorkBytes grows
    // no faster than linearly, so shares add up).
    // A router also holds an FP32 sum and its shards' requests and answers.
    const int64_t routing = SaturatingMul(SaturatingMul(m(), layer_.s), 12);
    int64_t work = MoeLayerWorkBytes(layer_, m(), threads);
    if (remote_bytes_ > 0) {
      work = SaturatingAdd(
          work, SaturatingAdd(remote_bytes_, SaturatingMul(SaturatingMul(m(), 4), layer_.k)));
    }
    return ResidentHeldBytes(SaturatingAdd(x_.byte_size, routing), output_bytes(), work);
  }
  const BoundInput& x() const { return x_; }
  const std::optional<BoundInput>& ids() const { return ids_; }
  const std::optional<BoundInput>& w() const { return w_; }

 private:
  const MoeLayer layer_;
  const int64_t remote_bytes_;
  std::string output_name_;
  BoundInput x_;
  std::optional<BoundInput> ids_, w_;
};

// The routing weights of a request ([M, S] of T on the wire) as floats.
void WidenWeights(const BoundInput& w, int64_t count, float* dst) {
  const auto* src = static_cast<const uint8_t*>(w.view->data);
  for (int64_t j = 0; j < count; ++j) {
    if (w.type == DataType::kFP32) {
      std::memcpy(dst + j, src + j * 4, 4);
      continue;
    }
    uint16_t h;
    std::memcpy(&h, src + j * 2, 2);
    dst[j] = w.type == DataType::kFP16 ? HalfToFloat(h) : BFloat16ToFloat(h);
  }
}

class MoeLayerModel final : public Model {
 public:
  static absl::StatusOr<std::unique_ptr<Model>> Make(MoeLayerSpec spec);

  const ModelMetadata& metadata() const override { return metadata_; }
  std::vector<std::pair<std::string, std::string>> parameters() const override;
  absl::StatusOr<std::unique_ptr<PreparedInference>> Prepare(
      const BoundInputs& inputs) const override;
  std::vector<InferOutputs> RunBatch(absl::Span<PreparedInference* const> batch,
                                     int threads) const override {
    return RunRowsTogether(batch.size(), [&](std::vector<InferOutputs>* results) {
      return RunTogether(batch, threads, results);
    });
  }
  void TouchResident() const override {
    for (const HeldProjection* p : Projections()) p->Touch();
    TouchMemory(router_.raw_data(), router_.byte_size());
  }
  absl::Status Available() const override {
    return spec_.remote ? spec_.remote->Available() : absl::OkStatus();
  }

 private:
  MoeLayerModel() = default;
  std::vector<const HeldProjection*> Projections() const {
    std::vector<const HeldProjection*> all;
    for (const auto* p :
         {&gate_up_, &gate_, &up_, &down_, &shared_gate_, &shared_up_, &shared_down_}) {
      if (p->has_value()) all.push_back(&**p);
    }
    return all;
  }
  absl::Status RunTogether(absl::Span<PreparedInference* const> batch, int threads,
                           std::vector<InferOutputs>* results) const;
  // The router's call: routing, the shared expert here and the routed pairs
  // on the shards, summed in FP32 and rounded to T once into `out`.
  absl::Status RunSharded(const MoeLayerCall& call, absl::Time deadline, int threads) const;
  // A request's ids (widened into `dst`) against the layer's G, or for a
  // shard against 0.
  absl::Status CheckIds(const PreparedMoeLayer& r, int64_t* dst) const;

  MoeLayerSpec spec_;  // names and shapes; the weights moved into the held projections
  std::optional<HeldProjection> gate_up_, gate_, up_, down_, shared_gate_, shared_up_, shared_down_;
  Tensor router_;  // FP32 [K, G]
  int accuracy_level_ = 0;
  MoeLayer layer_;
  MoeLayer local_;  // a router's: the shared expert alone, on given routing, into FP32
  ModelMetadata metadata_;
};

std::vector<std::pair<std::string, std::string>> MoeLayerModel::parameters() const {
  int64_t bytes = router_.byte_size();
  for (const HeldProjection* p : Projections()) bytes += p->bytes();
  std::vector<std::pair<std::string, std::string>> p = {
      {"layer", "moe_ffn"},
      {"activation", MoeActivationName(layer_.activation)},
      {"routing", MoeRoutingName(layer_.routing)},
      {"normalised", layer_.normalise ? "true" : "false"},
      {"shared_expert", shared_down_ ? "true" : "false"},
      {"groups", absl::StrCat(layer_.g)},
      {"k", absl::StrCat(layer_.k)},
      {"i", absl::StrCat(layer_.i)},
      {"s", absl::StrCat(layer_.s)},
      {"weights_bytes", absl::StrCat(bytes)},
      {"wave_rows", absl::StrCat(MoeWaveRows(layer_))}};
  if (shared_down_) p.emplace_back("shared_i", absl::StrCat(layer_.shared_i));
  if (spec_.remote) {  // a router: its experts' facts are its shards'
    p.emplace_back(kShardsParameter, spec_.shards);
    return p;
  }
  const HeldProjection& down = *down_;
  p.emplace_back("gate_up", gate_up_ ? "fused" : "separate");
  p.emplace_back("bias", down.has_bias() || (gate_up_ ? gate_up_->has_bias() : gate_->has_bias())
                             ? "true"
                             : "false");
  p.emplace_back("weights_layout", down.layout());
  if (spec_.expert_range) {
    p.emplace_back(kExpertRangeParameter, ExpertRangeText(*spec_.expert_range));
    p.emplace_back("partial_sum", "FP32");
  }
  if (down.quantized()) {
    AddQuantizationParameters(*down.quantized(), &p);
    p.push_back(AccuracyLevelParameter(accuracy_level_));
  }
  return p;
}

absl::StatusOr<std::unique_ptr<PreparedInference>> MoeLayerModel::Prepare(
    const BoundInputs& inputs) const {
  const BoundInput& x = inputs[0];
  // BindInputs held the inputs to the signature; the batch's buffers are
  // sized from K and S, so those are checked here again.
  if (x.type != layer_.type || x.shape.size() != 2 || x.shape[1] != layer_.k) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input '", spec_.x.name, "': expected ", DataTypeName(layer_.type), " of shape [M, ",
        layer_.k, "], got ", DataTypeName(x.type), " ", ShapeToString(x.shape)));
  }
  std::optional<BoundInput> ids, w;
  if (spec_.ids) {
    ids = inputs[1];
    w = inputs[2];
    for (const auto& [bound, spec] : {std::make_pair(&*ids, &*spec_.ids), {&*w, &*spec_.w}}) {
      if (bound->shape != Shape{x.shape[0], layer_.s}) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input '", spec->name, "': expected shape [M, S] = [", x.shape[0], ",", layer_.s,
            "] (M from '", spec_.x.name, "'), got ", ShapeToString(bound->shape)));
      }
    }
    const bool shard_fp32 = spec_.expert_range && w->type == DataType::kFP32;
    if (w->type != layer_.type && !shard_fp32) {
      return absl::InvalidArgumentError(absl::StrCat("input '", spec_.w->name, "': expected ",
                                                     DataTypeName(layer_.type), ", got ",
                                                     DataTypeName(w->type)));
    }
  }
  const int64_t remote_bytes = spec_.remote ? spec_.remote->WorkBytes(x.shape[0]) : 0;
  return std::make_unique<PreparedMoeLayer>(layer_, spec_.output_name, x, std::move(ids),
                                            std::move(w), remote_bytes);
}

absl::Status MoeLayerModel::CheckIds(const PreparedMoeLayer& r, int64_t* dst) const {
  const int64_t count = r.m() * layer_.s;
  WidenIndices(*r.ids(), count, dst);
  if (spec_.expert_range) {  // the whole layer's ids: only negative ones are wrong here
    for (int64_t j = 0; j < count; ++j) {
      if (dst[j] < 0) {
        return absl::InvalidArgumentError(absl::StrCat("input '", spec_.ids->name, "': index ",
                                                       dst[j], " at [", j / layer_.s, ",",
                                                       j % layer_.s, "] is negative"));
      }
    }
    return absl::OkStatus();
  }
  absl::Status valid = ValidateGroupIndices(absl::MakeConstSpan(dst, count), layer_.s, layer_.g);
  if (valid.ok()) return valid;
  return absl::InvalidArgumentError(absl::StrCat(
      "input '", spec_.ids->name, "'", valid.message().substr(valid.message().find(':'))));
}

absl::Status MoeLayerModel::RunSharded(const MoeLayerCall& call, absl::Time deadline,
                                       int threads) const {
  const int64_t m = call.m, k = layer_.k, s = layer_.s;
  const absl::Time began = absl::Now();
  std::vector<int64_t> routed_ids;
  std::vector<float> routed_w;
  const int64_t* ids = call.ids;
  const float* w = call.w;
  if (ids == nullptr) {  // routed here, as the unsharded layer routes
    routed_ids.resize(static_cast<size_t>(m * s));
    routed_w.resize(routed_ids.size());
    GEMMSERVE_RETURN_IF_ERROR(
        RouteMoeLayer(layer_, m, call.x, routed_ids.data(), routed_w.data(), threads));
    ids = routed_ids.data();
    w = routed_w.data();
  }
  std::vector<float> acc(static_cast<size_t>(m * k), 0.0f);
  if (local_.shared_down) {
    MoeLayerCall shared{m, call.x, ids, w, acc.data()};
    GEMMSERVE_RETURN_IF_ERROR(RunMoeLayer(local_, shared, threads));
  }
  RemoteExpertsCall remote;
  remote.m = m;
  remote.k = k;
  remote.s = s;
  remote.type = layer_.type;
  remote.x = call.x;
  remote.ids = ids;
  remote.w = w;
  remote.deadline = deadline;
  remote.began = began;
  GEMMSERVE_RETURN_IF_ERROR(spec_.remote->AddRoutedExperts(remote, acc.data()));
  if (layer_.type == DataType::kFP32) {
    std::memcpy(call.out, acc.data(), acc.size() * sizeof(float));
  } else {  // the one rounding to T
    FloatToHalfBlock(layer_.type, acc.data(), static_cast<uint16_t*>(call.out), m * k);
  }
  return absl::OkStatus();
}

// Every request's rows concatenated along M: one layer call. Given ids are
// checked in the batch's own copy, so what is checked is what is used; a
// request whose ids are out of range fails alone.
absl::Status MoeLayerModel::RunTogether(absl::Span<PreparedInference* const> batch, int threads,
                                        std::vector<InferOutputs>* results) const {
  const int64_t k = layer_.k, s = layer_.s, es = DataTypeSize(layer_.type);
  const int64_t out_es = layer_.fp32_out ? 4 : es;
  const bool given = spec_.ids.has_value();
  int64_t capacity = 0;
  // The shards get the latest of the callers' deadlines: a caller with little
  // time left does not fail the others (its own answer is dropped as late).
  absl::Time deadline = absl::InfinitePast();
  for (PreparedInference* p : batch) {
    const auto* r = static_cast<const PreparedMoeLayer*>(p);
    if (r->x().byte_size != SaturatingMul(SaturatingMul(r->m(), k), es)) {
      return absl::InternalError("mixture-of-experts layer: a request differs from its plan");
    }
    GEMMSERVE_ASSIGN_OR_RETURN(capacity, CheckedAdd(capacity, r->m()));
    deadline = std::max(deadline, p->deadline());
  }
  GEMMSERVE_ASSIGN_OR_RETURN(Tensor x, Tensor::Allocate(layer_.type, {capacity, k}));
  std::vector<int64_t> ids(given ? static_cast<size_t>(capacity * s) : 0);
  std::vector<float> w(ids.size());
  std::vector<size_t> ran;
  std::vector<std::pair<int64_t, Shape>> parts;
  int64_t rows = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const auto* r = static_cast<const PreparedMoeLayer*>(batch[i]);
    const int64_t m = r->m();
    if (given) {
      if (absl::Status valid = CheckIds(*r, ids.data() + rows * s); !valid.ok()) {
        (*results)[i] = valid;
        continue;
      }
      WidenWeights(*r->w(), m * s, w.data() + rows * s);
    }
    r->x().CopyTo(static_cast<uint8_t*>(x.raw_data()) + rows * k * es);
    rows += m;
    ran.push_back(i);
    parts.emplace_back(m, Shape{m, k});
  }
  if (ran.empty()) return absl::OkStatus();
  GEMMSERVE_ASSIGN_OR_RETURN(
      Tensor out, Tensor::Allocate(layer_.fp32_out ? DataType::kFP32 : layer_.type, {rows, k}));
  MoeLayerCall call;
  call.m = rows;
  call.x = x.raw_data();
  call.ids = given ? ids.data() : nullptr;
  call.w = given ? w.data() : nullptr;
  call.out = out.raw_data();
  int64_t weight_bytes = 0;
  if (spec_.remote) {
    GEMMSERVE_RETURN_IF_ERROR(RunSharded(call, deadline, threads));
  } else {
    GEMMSERVE_RETURN_IF_ERROR(RunMoeLayer(layer_, call, threads, &weight_bytes));
  }
  batch[ran[0]]->set_weight_bytes_read(weight_bytes);
  std::vector<InferOutputs> computed(ran.size());
  GEMMSERVE_RETURN_IF_ERROR(
      SplitRows(std::move(out), k * out_es, parts, spec_.output_name, &computed));
  for (size_t j = 0; j < ran.size(); ++j) (*results)[ran[j]] = std::move(computed[j]);
  return absl::OkStatus();
}

absl::Status Invalid(absl::string_view what) { return absl::InvalidArgumentError(what); }

// A projection's type and shape against the layer's.
absl::Status CheckWeights(const MoeWeightsSpec& w, const char* role, DataType type,
                          const Shape& want) {
  if (w.type() != type) {
    return Invalid(absl::StrCat("initializer ", role, ": ", DataTypeName(w.type()),
                                ", the layer's input x is ", DataTypeName(type)));
  }
  if (w.shape() != want) {
    return Invalid(absl::StrCat("initializer ", role, ": expected shape ", ShapeToString(want),
                                ", got ", ShapeToString(w.shape())));
  }
  if (w.bias) {
    const Shape bias = want.size() == 3 ? Shape{want[0], want[2]} : Shape{want[1]};
    if (w.bias->type() != type || w.bias->shape() != bias) {
      return Invalid(absl::StrCat("bias of ", role, ": expected ", DataTypeName(type), " ",
                                  ShapeToString(bias), ", got ", DataTypeName(w.bias->type()), " ",
                                  ShapeToString(w.bias->shape())));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckRoutingInputs(const MoeLayerSpec& spec, DataType type) {
  const bool given = spec.routing == MoeRouting::kGiven;
  if (given != (spec.ids && spec.w) || given == spec.router.has_value()) {
    return Invalid(
        "routing: given routing has inputs ids and w and no router; computed "
        "routing has a router and neither input");
  }
  if (!given) {
    if (spec.router->type() != type || spec.router->shape() != Shape{spec.k, spec.g}) {
      return Invalid(absl::StrCat("router: expected ", DataTypeName(type), " [K, G] = [", spec.k,
                                  ",", spec.g, "], got ", DataTypeName(spec.router->type()), " ",
                                  ShapeToString(spec.router->shape())));
    }
    return absl::OkStatus();
  }
  for (const TensorSpec* t : {&*spec.ids, &*spec.w}) {
    if (t->shape.size() != 2 || (t->shape[1] != -1 && t->shape[1] != spec.s)) {
      return Invalid(absl::StrCat("input '", t->name, "': expected [M, S] with S=", spec.s,
                                  ", got ", ShapeToString(t->shape)));
    }
  }
  for (DataType t : spec.ids->datatypes) {
    if (t != DataType::kINT32 && t != DataType::kINT64) {
      return Invalid(absl::StrCat("input '", spec.ids->name, "': expected INT32 or INT64, got ",
                                  DataTypeName(t)));
    }
  }
  if (spec.w->datatypes != std::vector<DataType>{type}) {
    return Invalid(
        absl::StrCat("input '", spec.w->name, "': expected ", DataTypeName(type), " like x"));
  }
  return absl::OkStatus();
}

// A shard: caller-routed, no shared expert (its router computes it), its
// range as wide as its weights. A router: no expert weights of its own.
absl::Status CheckSharding(const MoeLayerSpec& spec) {
  if (spec.expert_range && spec.remote) return Invalid("a layer is a shard or a router, not both");
  if (spec.expert_range) {
    if (spec.routing != MoeRouting::kGiven) {
      return Invalid(absl::StrCat(kExpertRangeParameter,
                                  ": a shard takes the caller-routed form (inputs x, ids, w); "
                                  "this graph routes"));
    }
    if (spec.shared_gate || spec.shared_up || spec.shared_down) {
      return Invalid(absl::StrCat(kExpertRangeParameter,
                                  ": a shard has no shared expert (its router computes it)"));
    }
    if (spec.expert_range->count() != spec.g) {
      return Invalid(absl::StrCat(kExpertRangeParameter, " '", ExpertRangeText(*spec.expert_range),
                                  "' holds ", spec.expert_range->count(),
                                  " experts; the model file holds ", spec.g));
    }
  }
  if (spec.remote && (spec.gate_up || spec.gate || spec.up || !spec.down.dense.shape().empty() ||
                      spec.down.quantized)) {
    return Invalid("a sharded layer's router holds no experts' weights");
  }
  return absl::OkStatus();
}

absl::Status CheckSpec(const MoeLayerSpec& spec) {
  if (spec.x.datatypes.size() != 1) return Invalid("input x: expected one datatype");
  const DataType t = spec.x.datatypes[0];
  if (t != DataType::kFP32 && t != DataType::kFP16 && t != DataType::kBF16) {
    return Invalid(absl::StrCat("input '", spec.x.name,
                                "': the layer serves FP32, FP16 or BF16, got ", DataTypeName(t)));
  }
  // A shard holds a few of the layer's experts; a token's S may exceed them.
  if (spec.k < 1 || spec.i < 1 || spec.g < 1 || spec.s < 1 ||
      (spec.s > spec.g && !spec.expert_range)) {
    return Invalid(absl::StrCat("expected K, I, G >= 1 and 1 <= S <= G, got K=", spec.k,
                                " I=", spec.i, " G=", spec.g, " S=", spec.s));
  }
  if (spec.x.shape.size() != 2 || (spec.x.shape[1] != -1 && spec.x.shape[1] != spec.k)) {
    return Invalid(absl::StrCat("input '", spec.x.name, "': expected [M, K] with K=", spec.k,
                                ", got ", ShapeToString(spec.x.shape)));
  }
  GEMMSERVE_RETURN_IF_ERROR(CheckSharding(spec));
  const int64_t g = spec.g, k = spec.k, i = spec.i;
  if (!spec.remote) {  // a router's experts are on its shards
    if (spec.gate_up.has_value() == (spec.gate || spec.up) ||
        (spec.gate.has_value() != spec.up.has_value())) {
      return Invalid("gate/up: expected one fused projection or both gate and up");
    }
    if (spec.gate_up)
      GEMMSERVE_RETURN_IF_ERROR(CheckWeights(*spec.gate_up, "gate_up", t, {g, k, 2 * i}));
    if (spec.gate) GEMMSERVE_RETURN_IF_ERROR(CheckWeights(*spec.gate, "gate", t, {g, k, i}));
    if (spec.up) GEMMSERVE_RETURN_IF_ERROR(CheckWeights(*spec.up, "up", t, {g, k, i}));
    GEMMSERVE_RETURN_IF_ERROR(CheckWeights(spec.down, "down", t, {g, i, k}));
  }
  const int shared =
      spec.shared_gate.has_value() + spec.shared_up.has_value() + spec.shared_down.has_value();
  if (shared != 0 && shared != 3) return Invalid("shared expert: expected gate, up and down");
  if (shared == 3) {
    const int64_t is = spec.shared_gate->shape().size() == 2 ? spec.shared_gate->shape()[1] : -1;
    if (is < 1) return Invalid("shared expert gate: expected [K, I_s]");
    GEMMSERVE_RETURN_IF_ERROR(CheckWeights(*spec.shared_gate, "shared gate", t, {k, is}));
    GEMMSERVE_RETURN_IF_ERROR(CheckWeights(*spec.shared_up, "shared up", t, {k, is}));
    GEMMSERVE_RETURN_IF_ERROR(CheckWeights(*spec.shared_down, "shared down", t, {is, k}));
  }
  GEMMSERVE_RETURN_IF_ERROR(CheckRoutingInputs(spec, t));
  if (spec.accuracy_level != 0) {  // every projection quantized
    const std::pair<const std::optional<MoeWeightsSpec>*, const char*> all[] = {
        {&spec.gate_up, "the gate/up weights"},
        {&spec.gate, "the gate weights"},
        {&spec.up, "the up weights"},
        {&spec.shared_gate, "the shared gate weights"},
        {&spec.shared_up, "the shared up weights"},
        {&spec.shared_down, "the shared down weights"}};
    for (const auto& [w, what] : all) {
      if (!w->has_value()) continue;
      GEMMSERVE_RETURN_IF_ERROR(CheckAccuracyLevel(
          spec.accuracy_level, (*w)->quantized ? &*(*w)->quantized : nullptr, what));
    }
    if (!spec.remote) {
      GEMMSERVE_RETURN_IF_ERROR(CheckAccuracyLevel(
          spec.accuracy_level, spec.down.quantized ? &*spec.down.quantized : nullptr,
          "the down weights"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> RouterInFp32(const Tensor& router) {
  GEMMSERVE_ASSIGN_OR_RETURN(Tensor f, Tensor::Allocate(DataType::kFP32, router.shape()));
  if (router.type() == DataType::kFP32) {
    std::memcpy(f.raw_data(), router.raw_data(), static_cast<size_t>(router.byte_size()));
  } else {
    HalfToFloatBlock(router.type(), router.data<uint16_t>(), f.data<float>(),
                     router.num_elements());
  }
  return f;
}

absl::StatusOr<std::unique_ptr<Model>> MoeLayerModel::Make(MoeLayerSpec spec) {
  GEMMSERVE_RETURN_IF_ERROR(CheckSpec(spec));
  std::unique_ptr<MoeLayerModel> m(new MoeLayerModel());
  auto hold = [&](std::optional<MoeWeightsSpec>* from,
                  std::optional<HeldProjection>* to) -> absl::Status {
    if (!from->has_value()) return absl::OkStatus();
    GEMMSERVE_ASSIGN_OR_RETURN(*to, HeldProjection::Hold(std::move(**from), spec.accuracy_level));
    from->reset();
    return absl::OkStatus();
  };
  std::optional<MoeWeightsSpec> down(std::move(spec.down));
  GEMMSERVE_RETURN_IF_ERROR(hold(&spec.gate_up, &m->gate_up_));
  GEMMSERVE_RETURN_IF_ERROR(hold(&spec.gate, &m->gate_));
  GEMMSERVE_RETURN_IF_ERROR(hold(&spec.up, &m->up_));
  if (!spec.remote) GEMMSERVE_RETURN_IF_ERROR(hold(&down, &m->down_));
  GEMMSERVE_RETURN_IF_ERROR(hold(&spec.shared_gate, &m->shared_gate_));
  GEMMSERVE_RETURN_IF_ERROR(hold(&spec.shared_up, &m->shared_up_));
  GEMMSERVE_RETURN_IF_ERROR(hold(&spec.shared_down, &m->shared_down_));
  MoeLayer& l = m->layer_;
  if (spec.router) {
    GEMMSERVE_ASSIGN_OR_RETURN(m->router_, RouterInFp32(*spec.router));
    spec.router.reset();
    l.router = &m->router_;
  }
  static_cast<MoeLayerForm&>(l) = spec;
  l.type = spec.x.datatypes[0];
  l.int8_activations = spec.accuracy_level == 4;
  m->accuracy_level_ = spec.accuracy_level;
  if (m->gate_up_) l.gate_up = m->gate_up_->View();
  if (m->gate_) l.gate = m->gate_->View();
  if (m->up_) l.up = m->up_->View();
  if (m->down_) l.down = m->down_->View();
  l.experts_elsewhere = spec.remote != nullptr;
  if (spec.expert_range) {
    l.first_expert = spec.expert_range->first;
    l.fp32_out = true;
  }
  if (m->shared_down_) {
    l.shared_gate = m->shared_gate_->View();
    l.shared_up = m->shared_up_->View();
    l.shared_down = m->shared_down_->View();
    l.shared_i = m->shared_down_->View().weights.shape()[0];
  }
  if (spec.remote) {  // the shared expert alone, on the routing computed or given
    m->local_ = l;
    m->local_.routing = MoeRouting::kGiven;
    m->local_.router = nullptr;
    m->local_.fp32_out = true;
  }
  spec.x.shape[1] = spec.k;
  ModelMetadata& md = m->metadata_;
  md.name = spec.name;
  md.versions = {spec.version};
  md.platform = kResidentPlatform;
  md.inputs = {spec.x};
  if (spec.ids) md.inputs.insert(md.inputs.end(), {*spec.ids, *spec.w});
  for (size_t j = 1; j < md.inputs.size(); ++j) md.inputs[j].shape[1] = spec.s;
  md.outputs = {{spec.output_name, spec.x.datatypes, spec.x.shape, false, false}};
  if (spec.expert_range) {  // the FP32 partial sum; routing weights of T or FP32
    md.outputs[0].datatypes = {DataType::kFP32};
    if (l.type != DataType::kFP32) md.inputs[2].datatypes.push_back(DataType::kFP32);
  }
  m->spec_ = std::move(spec);
  return std::unique_ptr<Model>(std::move(m));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> MakeMoeLayerModel(MoeLayerSpec spec) {
  return MoeLayerModel::Make(std::move(spec));
}

}  // namespace gemmserve
