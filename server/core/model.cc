#include "server/core/model.h"

#include <cstring>

#include "server/common/status_macros.h"

namespace gemmserve {

absl::StatusOr<Tensor> BoundInput::Materialize() const {
  GEMMSERVE_ASSIGN_OR_RETURN(Tensor t, Tensor::Allocate(type, shape));
  if (byte_size > 0) std::memcpy(t.raw_data(), view->data, static_cast<size_t>(byte_size));
  return t;
}

void BoundInput::CopyTo(void* dst) const {
  if (byte_size > 0) std::memcpy(dst, view->data, static_cast<size_t>(byte_size));
}

}  // namespace gemmserve
