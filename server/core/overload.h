// Refusals that say "retry later" (UNAVAILABLE) and what they are, as status
// payloads, so that no layer reads another's message text:
//   QueueFullError    the server is full: the model's queue holds
//                     max_queue_size requests, or accepted requests hold
//                     --max_inflight_bytes; Serving counts it as
//                     gemmserve_rejected_total{reason="queue_full"};
//   ModelClosedError  the model's queue was closed because the model was
//                     replaced or removed; the engine submits the request again.
// Payloads never reach the client.
#ifndef GEMMSERVE_SERVER_CORE_OVERLOAD_H_
#define GEMMSERVE_SERVER_CORE_OVERLOAD_H_

#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/string_view.h"

namespace gemmserve {

inline constexpr std::string_view kOverloadPayloadUrl = "type.gemmserve/overload";

inline absl::Status QueueFullError(std::string_view message) {
  absl::Status status = absl::UnavailableError(absl::string_view(message.data(), message.size()));
  status.SetPayload(absl::string_view(kOverloadPayloadUrl.data(), kOverloadPayloadUrl.size()),
                    absl::Cord("queue_full"));
  return status;
}

// A batcher that was closed because its model was replaced (a reload) or
// removed: the caller looks the model up again and submits to what is served
// now, so a reload never turns a request away.
inline constexpr std::string_view kModelClosedPayloadUrl = "type.gemmserve/model_closed";

inline absl::Status ModelClosedError() {
  absl::Status status = absl::UnavailableError("model is unloading; retry later");
  status.SetPayload(absl::string_view(kModelClosedPayloadUrl.data(), kModelClosedPayloadUrl.size()),
                    absl::Cord("closed"));
  return status;
}

inline bool IsModelClosed(const absl::Status& status) {
  return status.code() == absl::StatusCode::kUnavailable &&
         status
             .GetPayload(
                 absl::string_view(kModelClosedPayloadUrl.data(), kModelClosedPayloadUrl.size()))
             .has_value();
}

inline bool IsQueueFull(const absl::Status& status) {
  return status.code() == absl::StatusCode::kUnavailable &&
         status
             .GetPayload(absl::string_view(kOverloadPayloadUrl.data(), kOverloadPayloadUrl.size()))
             .has_value();
}

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_CORE_OVERLOAD_H_
