#include "server/core/input_binding.h"

#include <algorithm>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/common/client_text.h"
#include "server/common/status_macros.h"

namespace gemmserve {
namespace {

// The typed field that carries `type`, or kNone where the protocol has none
// (FP16 and BF16 travel only as raw bytes).
ContentsKind TypedKindFor(DataType type) {
  switch (type) {
    case DataType::kFP32: return ContentsKind::kFp32;
    case DataType::kFP64: return ContentsKind::kFp64;
    case DataType::kINT32: return ContentsKind::kInt32;
    case DataType::kINT64: return ContentsKind::kInt64;
    case DataType::kUINT32: return ContentsKind::kUint32;
    case DataType::kUINT64: return ContentsKind::kUint64;
    case DataType::kFP16:
    case DataType::kBF16: return ContentsKind::kNone;
  }
  return ContentsKind::kNone;
}

std::string InputNames(const ModelMetadata& metadata) {
  std::vector<std::string> names;
  for (const TensorSpec& spec : metadata.inputs) {
    names.push_back(spec.optional ? spec.name + " (optional)" : spec.name);
  }
  return absl::StrJoin(names, ", ");
}

std::string TypeNames(const std::vector<DataType>& types) {
  std::vector<absl::string_view> names;
  for (DataType t : types) names.push_back(DataTypeName(t));
  return absl::StrJoin(names, ", ");
}

// The shape against the model's signature: the rank, unless the model takes
// any rank, and every dimension the model fixes. A resident model sizes its
// buffers from its own signature, so a request must match it exactly.
absl::Status CheckSignature(const TensorSpec& spec, absl::string_view name,
                            absl::Span<const int64_t> shape) {
  if (spec.variable_rank) return absl::OkStatus();
  if (shape.size() != spec.shape.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", name, "': expected rank ", spec.shape.size(), " (shape ",
                     ShapeToString(spec.shape), "), got ", ShapeToString(shape)));
  }
  for (size_t d = 0; d < shape.size(); ++d) {
    if (spec.shape[d] >= 0 && shape[d] != spec.shape[d]) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", name, "': expected dimension ", d, " to be ", spec.shape[d],
                       " (shape ", ShapeToString(spec.shape), "), got ", ShapeToString(shape)));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckContents(const InferRequestView& request, const BoundInput& bound,
                           int64_t elements) {
  auto name = [&](ContentsKind kind) { return ContentsName(request, kind); };
  const InputTensorView& view = *bound.view;
  const absl::string_view type_name = DataTypeName(bound.type);
  const std::string where = absl::StrCat("input '", view.name, "': ");
  const std::string what =
      absl::StrCat("(shape ", ShapeToString(bound.shape), ", ", type_name, ")");
  const ContentsKind typed = TypedKindFor(bound.type);
  switch (view.contents) {
    case ContentsKind::kNone:
      if (elements == 0) return absl::OkStatus();
      return absl::InvalidArgumentError(absl::StrCat(
          where, "no data: expected ", bound.byte_size, " bytes ", what, " in ",
          name(ContentsKind::kRaw),
          typed == ContentsKind::kNone ? "" : absl::StrCat(" or ", name(typed))));
    case ContentsKind::kRaw:
      if (view.count != bound.byte_size) {
        return absl::InvalidArgumentError(absl::StrCat(where, "expected ", bound.byte_size,
                                                       " bytes ", what, ", got ", view.count));
      }
      return absl::OkStatus();
    default:
      if (view.contents != typed) {
        if (typed == ContentsKind::kNone) {
          return absl::InvalidArgumentError(absl::StrCat(
              where, type_name, " has no typed contents field; send it in ",
              name(ContentsKind::kRaw), ", got ", name(view.contents)));
        }
        return absl::InvalidArgumentError(absl::StrCat(where, type_name, " data belongs in ",
                                                       name(typed), ", got ",
                                                       name(view.contents)));
      }
      if (view.count != elements) {
        return absl::InvalidArgumentError(absl::StrCat(where, "expected ", elements, " elements ",
                                                       what, " in ", name(typed),
                                                       ", got ", view.count));
      }
      return absl::OkStatus();
  }
}

}  // namespace

absl::StatusOr<BoundInputs> BindInputs(const ModelMetadata& metadata,
                                       const InferRequestView& request) {
  BoundInputs bound(metadata.inputs.size());
  for (const InputTensorView& view : request.inputs) {
    auto it = std::find_if(metadata.inputs.begin(), metadata.inputs.end(),
                           [&](const TensorSpec& s) { return s.name == view.name; });
    if (it == metadata.inputs.end()) {
      return absl::InvalidArgumentError(absl::StrCat("unknown input '", ClientText(view.name),
                                                     "' for model '", metadata.name, "'; it takes ",
                                                     InputNames(metadata)));
    }
    BoundInput& slot = bound[it - metadata.inputs.begin()];
    if (slot.spec != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", it->name, "' is given more than once"));
    }
    slot.spec = &*it;
    slot.view = &view;
    absl::StatusOr<DataType> type = ParseDataType(view.datatype);
    if (!type.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", view.name, "': ", type.status().message()));
    }
    if (std::find(it->datatypes.begin(), it->datatypes.end(), *type) == it->datatypes.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", view.name, "': datatype ", DataTypeName(*type),
                       " is not accepted; expected ", TypeNames(it->datatypes)));
    }
    slot.type = *type;
    absl::StatusOr<int64_t> elements = ElementCount(view.shape);
    absl::StatusOr<int64_t> bytes = ByteSize(view.shape, slot.type);
    if (!elements.ok() || !bytes.ok()) {
      const absl::Status& error = elements.ok() ? bytes.status() : elements.status();
      return absl::InvalidArgumentError(absl::StrCat("input '", view.name, "': ", error.message()));
    }
    GEMMSERVE_RETURN_IF_ERROR(CheckSignature(*it, it->name, view.shape));
    slot.shape.assign(view.shape.begin(), view.shape.end());
    slot.byte_size = *bytes;
    GEMMSERVE_RETURN_IF_ERROR(CheckContents(request, slot, *elements));
  }
  for (size_t i = 0; i < bound.size(); ++i) {
    if (bound[i].spec == nullptr && !metadata.inputs[i].optional) {
      return absl::InvalidArgumentError(absl::StrCat("missing required input '",
                                                     metadata.inputs[i].name, "' for model '",
                                                     metadata.name, "'"));
    }
  }
  return bound;
}

}  // namespace gemmserve
