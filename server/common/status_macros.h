// Status propagation macros.
//
// Bookworm's Abseil (20220623) has neither absl/log nor RETURN_IF_ERROR, so the
// project defines its two macros here, once:
//
//   absl::Status Validate(const Request& r) {
//     GEMMSERVE_RETURN_IF_ERROR(CheckShape(r.shape));
//     GEMMSERVE_ASSIGN_OR_RETURN(int64_t n, ElementCount(r.shape));
//     ...
//   }
#ifndef GEMMSERVE_SERVER_COMMON_STATUS_MACROS_H_
#define GEMMSERVE_SERVER_COMMON_STATUS_MACROS_H_

#include "absl/base/optimization.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define GEMMSERVE_RETURN_IF_ERROR(expr)                                        \
  do {                                                                         \
    ::absl::Status gemmserve_status_ = (expr);                                 \
    if (ABSL_PREDICT_FALSE(!gemmserve_status_.ok())) return gemmserve_status_; \
  } while (0)

#define GEMMSERVE_STATUS_CONCAT_INNER_(a, b) a##b
#define GEMMSERVE_STATUS_CONCAT_(a, b) GEMMSERVE_STATUS_CONCAT_INNER_(a, b)

// `lhs` may be a declaration (`auto x`) or an existing lvalue.
#define GEMMSERVE_ASSIGN_OR_RETURN(lhs, expr)                                                    \
  GEMMSERVE_ASSIGN_OR_RETURN_IMPL_(GEMMSERVE_STATUS_CONCAT_(gemmserve_statusor_, __LINE__), lhs, \
                                   expr)

#define GEMMSERVE_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr)                  \
  auto statusor = (expr);                                                      \
  if (ABSL_PREDICT_FALSE(!statusor.ok())) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()

#endif  // GEMMSERVE_SERVER_COMMON_STATUS_MACROS_H_
