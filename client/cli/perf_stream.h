// perf over one ModelStreamInfer stream (`gemmserve-cli perf --streaming`, as
// perf_analyzer's flag): the same closed and open loops as RunLoad, with
// every request written to one bidirectional stream. Closed loop keeps
// `concurrency` requests of the stream unanswered (each answer sends the
// next); open loop writes each arrival unless `concurrency` are unanswered
// (a drop). Each request carries an id of its own (appended to its
// serialized bytes, so nothing is serialized during the run); an answer's id
// is read from its bytes without parsing the rest, and its latency runs from
// the request's turn to write to its answer. A request the server fails
// comes back on the stream with an error message: counted under "STREAM" in
// the errors; the stream itself failing ends the run, counted by its code.
#ifndef GEMMSERVE_CLIENT_CLI_PERF_STREAM_H_
#define GEMMSERVE_CLIENT_CLI_PERF_STREAM_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/channel.h>
#include <grpcpp/support/byte_buffer.h>

#include "absl/status/statusor.h"
#include "client/cli/perf.h"

namespace gemmserve::client {

// What RunStreamLoad reads of a serialized ModelStreamInferResponse: the
// answer's id and its error message (empty when it succeeded); nullopt when
// the bytes are not such a message.
struct StreamAnswerHead {
  std::string id;
  std::string error_message;
};
std::optional<StreamAnswerHead> ReadStreamAnswerHead(const grpc::ByteBuffer& response);

// The serialized ModelInferRequest `request` with its id set to `id` (a
// field appended: the last one wins), sharing `request`'s slices.
grpc::ByteBuffer WithRequestId(const grpc::ByteBuffer& request, const std::string& id);

// Runs the load (options.streaming) with `requests` (serialized
// ModelInferRequests) taken in turn. The result's latencies and counts are
// as RunLoad's.
PerfResult RunStreamLoad(std::shared_ptr<grpc::Channel> channel,
                         std::vector<grpc::ByteBuffer> requests, const PerfOptions& options);

}  // namespace gemmserve::client

#endif  // GEMMSERVE_CLIENT_CLI_PERF_STREAM_H_
