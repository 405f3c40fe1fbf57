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
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace gemmserve {

// RESOURCE_EXHAUSTED is both "the request passes a limit" and "the server
// could not get the memory": the second carries this payload, so callers
// tell them apart by it (HTTP: 429 rather than 413), never by the message.
// Payloads never reach the client.
inline constexpr absl::string_view kOutOfMemoryPayloadUrl = "gemmserve.dev/out_of_memory";

// RESOURCE_EXHAUSTED with `message`, marked as memory the server lacked.
inline absl::Status OutOfMemoryError(absl::string_view message) {
  absl::Status status = absl::ResourceExhaustedError(message);
  status.SetPayload(kOutOfMemoryPayloadUrl, absl::Cord("1"));
  return status;
}

// True for a status made by OutOfMemoryError (or AllocationFailure).
inline bool IsOutOfMemory(const absl::Status& status) {
  return status.code() == absl::StatusCode::kResourceExhausted &&
         status.GetPayload(kOutOfMemoryPayloadUrl).has_value();
}

inline absl::Status AllocationFailure(absl::string_view what) {
  return OutOfMemoryError(absl::StrCat("out of memory for ", what));
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
