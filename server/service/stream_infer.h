// ModelStreamInfer: Triton's bidirectional inference stream on gRPC's
// callback API. A client writes ModelInferRequests and reads one
// ModelStreamInferResponse per request, in the order they complete (not
// necessarily the order sent; `id` is echoed, as Triton does). Each request
// goes through Serving::Infer like a unary ModelInfer, so it is batched with
// unary calls and other streams' requests, counted against the limits and in
// the metrics and statistics alike. An error for one request comes back as
// that response's `error_message` (with its `id`) and the stream goes on.
//
//   * The token is checked once, from the stream's metadata.
//   * At most `max_inflight` requests of a stream are between read and
//     written answer; beyond, the stream stops reading (HTTP/2 flow control
//     then holds the client back): a stream cannot queue without bound.
//   * A client that cancels the stream cancels its requests: those still
//     queued are never computed.
//   * StreamRegistry::DrainAll (SIGTERM): a stream reads no more, answers
//     what it had accepted, then ends with UNAVAILABLE.
//   * A message that is not a ModelInferRequest (truncated, garbage, a
//     string that is not UTF-8): nothing after it is read, the requests
//     before it are answered, then the stream ends with INVALID_ARGUMENT
//     naming it (its 1-based number); never OK with requests lost.
#ifndef GEMMSERVE_SERVER_SERVICE_STREAM_INFER_H_
#define GEMMSERVE_SERVER_SERVICE_STREAM_INFER_H_

#include <set>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpc_service.pb.h"
#include "server/serving/serving.h"

namespace gemmserve {

class StreamInferReactor;

// The open streams of a service, so that shutdown can end them.
class StreamRegistry {
 public:
  // From now on new streams end at once with UNAVAILABLE, and each open one
  // drains: it reads no more requests, answers those it accepted, then ends
  // with UNAVAILABLE.
  void DrainAll();
  bool draining() const;

  void Add(StreamInferReactor* stream);
  void Remove(StreamInferReactor* stream);

 private:
  mutable absl::Mutex mu_;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  std::set<StreamInferReactor*> streams_ ABSL_GUARDED_BY(mu_);
};

// Raw messages: the reactor parses each request itself, so that one that
// does not parse is told from the client closing its side (gRPC's typed
// reads report both as a failed read).
using StreamReactorBase = grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>;

// Starts serving one stream; gRPC owns the reactor, which deletes itself
// when the stream is done. `serving` and `registry` must outlive it.
// `max_inflight` >= 1.
StreamReactorBase* StartStreamInfer(Serving* serving, StreamRegistry* registry,
                                    grpc::CallbackServerContext* context, int max_inflight);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_SERVICE_STREAM_INFER_H_
