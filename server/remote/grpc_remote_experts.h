// The router's side of a sharded mixture-of-experts layer (issue 53): its
// shards reached over KServe v2 gRPC with gRPC's own client machinery.
//
// Each replica address of a shard is one channel (a "host:port", or any gRPC
// target such as "dns:///shard-0.moe:8001", whose addresses gRPC resolves
// and spreads calls over with round_robin: a Kubernetes headless Service is
// a shard's address). A call sends each shard one ModelInfer of the model of
// the router's own name, holding only the tokens routed to it (x of T, ids
// INT64, w FP32, binary), all shards at once on a completion queue the waiting
// thread polls; it gets the latest of the batch's callers' deadlines (or
// `default_timeout`), and the router's own model version. A shard whose call
// fails with UNAVAILABLE, or whose answer is malformed, is asked once more on
// another replica, or on its one address again (layer calls are pure). The answer is checked (FP32
// [m, K], every byte) before it is added. Errors name the shard, its experts
// and the replica: never a partial sum.
//
// A prober asks every replica for the model's metadata and config every
// `probe_interval` (and at once at start): a replica is ready while its last
// probe succeeded, its metadata is a shard's (three inputs, one FP32 output,
// K and S as the router's) and its expert_range is this shard's. The router is available while
// every shard has a ready replica; its status names the shards that have none.
//
//   RemoteExpertsFactory f = GrpcRemoteExpertsFactory(options);  // the root
//   ModelRepository repository(root, engine, builtin, f);
#ifndef GEMMSERVE_SERVER_REMOTE_GRPC_REMOTE_EXPERTS_H_
#define GEMMSERVE_SERVER_REMOTE_GRPC_REMOTE_EXPERTS_H_

#include <cstdint>

#include "absl/time/time.h"
#include "server/models/sharded_layer.h"

namespace gemmserve {

struct ShardClientOptions {
  // The largest answer a shard may send (the server's own message limit).
  int64_t max_message_bytes = int64_t{64} << 20;
  absl::Duration probe_interval = absl::Seconds(1);
  // A call's deadline when its callers set none.
  absl::Duration default_timeout = absl::Seconds(30);
};

// A factory the root hands the model repository.
RemoteExpertsFactory GrpcRemoteExpertsFactory(ShardClientOptions options);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_REMOTE_GRPC_REMOTE_EXPERTS_H_
