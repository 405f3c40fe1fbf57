#include "server/models/resident_common.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/common/allocation.h"
#include "server/common/logging.h"
#include "server/common/status_macros.h"
#include "server/ops/kernels/int8_dot.h"

namespace gemmserve {

absl::Status SplitRows(Tensor all, int64_t row_bytes,
                       const std::vector<std::pair<int64_t, Shape>>& parts,
                       const std::string& output_name, std::vector<InferOutputs>* results) {
  if (parts.size() == 1) {
    GEMMSERVE_RETURN_IF_ERROR(all.Reshape(parts[0].second));
    std::vector<NamedTensor> outputs;
    outputs.push_back({output_name, std::move(all)});
    (*results)[0] = std::move(outputs);
    return absl::OkStatus();
  }
  int64_t at = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    GEMMSERVE_ASSIGN_OR_RETURN(Tensor out, Tensor::Allocate(all.type(), parts[i].second));
    if (out.byte_size() != SaturatingMul(parts[i].first, row_bytes) ||
        out.byte_size() > all.byte_size() - at) {
      return absl::InternalError("resident model: a request's rows differ from its plan");
    }
    if (out.byte_size() > 0) {
      std::memcpy(out.raw_data(), static_cast<const uint8_t*>(all.raw_data()) + at,
                  static_cast<size_t>(out.byte_size()));
    }
    at += out.byte_size();
    std::vector<NamedTensor> outputs;
    outputs.push_back({output_name, std::move(out)});
    (*results)[i] = std::move(outputs);
  }
  return absl::OkStatus();
}

std::vector<InferOutputs> RunRowsTogether(
    size_t batch_size, const std::function<absl::Status(std::vector<InferOutputs>*)>& together) {
  // What a request holds until `together` answers it: told apart from the
  // errors `together` gives requests of their own.
  const absl::Status unanswered(absl::StatusCode::kUnknown, "resident model: not answered");
  std::vector<InferOutputs> results;  // (outputs hold tensors: moved, never copied)
  for (size_t i = 0; i < batch_size; ++i) results.emplace_back(unanswered);
  absl::Status status =
      CatchAllocationFailure("the batch's rows", [&] { return together(&results); });
  if (status.ok()) status = absl::InternalError("resident model: a request was not answered");
  for (InferOutputs& r : results) {
    if (!r.ok() && r.status() == unanswered) r = status;
  }
  return results;
}

int64_t ResidentHeldBytes(int64_t input_bytes, int64_t output_bytes, int64_t work_bytes) {
  return SaturatingAdd(SaturatingAdd(input_bytes, SaturatingMul(output_bytes, 2)), work_bytes);
}

void WidenIndices(const BoundInput& indices, int64_t count, int64_t* dst) {
  if (indices.type == DataType::kINT64) {
    indices.CopyTo(dst);
    return;
  }
  const auto* src = static_cast<const uint8_t*>(indices.view->data);
  for (int64_t i = 0; i < count; ++i) {
    int32_t v;
    std::memcpy(&v, src + i * sizeof v, sizeof v);
    dst[i] = v;
  }
}

void AddQuantizationParameters(const QuantizedWeights& q,
                               std::vector<std::pair<std::string, std::string>>* p) {
  p->emplace_back("quantization", QuantizedTypeName(q.type()));
  p->emplace_back("bits", absl::StrCat(QuantizedBits(q.type())));
  p->emplace_back("block_size", absl::StrCat(q.layout().block_size));
  p->emplace_back("granularity", q.granularity());
  p->emplace_back("zero_point", q.has_zero_point() ? "true" : "false");
  p->emplace_back("weight_bytes_per_group", absl::StrCat(q.group_bytes()));
}

absl::Status CheckAccuracyLevel(int level, const QuantizedWeights* quantized, const char* what) {
  if (level == 0) return absl::OkStatus();
  if (level != 4) {
    return absl::InvalidArgumentError(absl::StrCat("accuracy_level ", level, " is not served"));
  }
  if (quantized == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "accuracy_level 4 (8-bit activations) applies to quantized weights (DequantizeLinear); ",
        what, " are not quantized"));
  }
  if (quantized->layout().block_size > kInt8MaxBlock) {
    return absl::InvalidArgumentError(absl::StrCat(
        "accuracy_level 4: ", what, " are quantized in blocks of ", quantized->layout().block_size,
        " rows; integer sums take blocks of at most ", kInt8MaxBlock));
  }
  return absl::OkStatus();
}

std::pair<std::string, std::string> AccuracyLevelParameter(int level) {
  return {"accuracy_level", absl::StrCat(level)};
}

namespace {

// Panels pad N to whole panels (and BF16 K to pairs): weights much narrower
// than a panel would grow many times over (N = 1 in 32-column panels: 32x),
// which a model file must not be able to ask for, and gain little from
// panels. Packed only when the panels hold at most half as much again as the
// row-major tensor.
bool PackingCostsLittle(DataType type, const Shape& shape, int64_t dense_bytes) {
  absl::StatusOr<int64_t> packed = PackedWeights::BytesFor(type, shape);
  return packed.ok() && *packed <= dense_bytes + dense_bytes / 2 + 4096;
}

}  // namespace

absl::StatusOr<std::optional<PackedWeights>> PackAtLoad(const Tensor& weights) {
  std::optional<PackedWeights> packed;
  const absl::Time start = absl::Now();
  if (PackedWeights::PackedAtLoad(weights.type()) &&
      PackingCostsLittle(weights.type(), weights.shape(), weights.byte_size())) {
    GEMMSERVE_ASSIGN_OR_RETURN(PackedWeights p, PackedWeights::Pack(weights));
    packed = std::move(p);
    GEMMSERVE_LOG(INFO) << "packed weights of shape " << ShapeToString(weights.shape())
                        << " into panels in "
                        << absl::StrFormat("%.1f", absl::ToDoubleMilliseconds(absl::Now() - start))
                        << " ms";
  }
  return packed;
}

}  // namespace gemmserve
