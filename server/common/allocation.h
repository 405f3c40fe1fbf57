// The request path reports errors as values (absl::Status), but the standard
// containers it uses throw when memory runs out. CatchAllocationFailure runs
// a piece of such code and turns std::bad_alloc (and std::length_error, a
// container asked for more than it can address) into RESOURCE_EXHAUSTED, so
// that one request's allocation failure fails that request and nothing else.
//
//   absl::StatusOr<Work> work = CatchAllocationFailure(
//       "the problem list", [&]() -> absl::StatusOr<Work> { return BuildWork(...); });
#ifndef GEMMSERVE_SERVER_COMMON_ALLOCATION_H_
#define GEMMSERVE_SERVER_COMMON_ALLOCATION_H_

#include <new>
#include <stdexcept>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace gemmserve {

inline absl::Status AllocationFailure(absl::string_view what) {
  return absl::ResourceExhaustedError(absl::StrCat("out of memory for ", what));
}

// `f` returns absl::Status or absl::StatusOr<T>; so does this.
template <typename F>
auto CatchAllocationFailure(absl::string_view what, F&& f) -> decltype(f()) {
  try {
    return std::forward<F>(f)();
  } catch (const std::bad_alloc&) {
    return AllocationFailure(what);
  } catch (const std::length_error&) {
    return AllocationFailure(what);
  }
}

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_COMMON_ALLOCATION_H_
