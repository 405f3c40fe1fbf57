// A mixture-of-experts layer sharded by expert across servers (issue 53).
//
// A layer's output is a sum over its experts, so it splits by expert: a
// shard holds experts [first, last) of the layer's G and answers the
// weighted partial sum of the routed pairs whose expert it holds (FP32
// [M, K]); a router computes the routing (or takes the caller's), sends each
// shard the tokens routed to it, adds the partial sums and its own shared
// expert, and answers the layer's output. Both are MoeLayerModel
// (moe_layer_model.h), told so by their config:
//
//   shard:   parameters { key: "expert_range" value { string_value: "32:64" } }
//   router:  parameters { key: "shards" value { string_value: "0:32=ADDR|ADDR;32:64=ADDR" } }
//
// This file holds what needs no network: the two parameters' grammar, checked
// against the layer, and the interface through which a router reaches its
// shards (RemoteExperts). server/remote implements it over gRPC; the root
// hands the repository a factory for it, so nothing below the front ends
// links gRPC.
//
//   GEMMSERVE_ASSIGN_OR_RETURN(ExpertRange r, ParseExpertRange("32:64"));
//   GEMMSERVE_ASSIGN_OR_RETURN(std::vector<ShardSpec> s, ParseShards(text, /*g=*/64));
#ifndef GEMMSERVE_SERVER_MODELS_SHARDED_LAYER_H_
#define GEMMSERVE_SERVER_MODELS_SHARDED_LAYER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/tensor/datatype.h"

namespace gemmserve {

class Metrics;

inline constexpr char kExpertRangeParameter[] = "expert_range";
inline constexpr char kShardsParameter[] = "shards";
// Limits on what a config may list: shards of a layer, replicas of a shard,
// characters of an address, and of the whole "shards" value.
inline constexpr int kMaxShards = 256;
inline constexpr int kMaxReplicas = 16;
inline constexpr int kMaxAddressLength = 253;
inline constexpr int kMaxShardsTextLength = 64 * 1024;
// Experts of a sharded layer at most (DeepSeek-V3 has 256): a router reads G
// from its graph's dimensions alone, and keeps a metric series per expert.
inline constexpr int64_t kMaxShardedExperts = 4096;

// Experts [first, last) of a layer, 0 <= first < last.
struct ExpertRange {
  int64_t first = 0, last = 0;
  int64_t count() const { return last - first; }
  bool operator==(const ExpertRange& o) const { return first == o.first && last == o.last; }
};

// "first:last" (decimal, first < last <= kMaxShardedExperts); INVALID_ARGUMENT
// saying the form.
absl::StatusOr<ExpertRange> ParseExpertRange(absl::string_view text);
std::string ExpertRangeText(const ExpertRange& r);

// One shard of a router's layer: its experts and its replicas' gRPC targets
// ("host:port", "[v6]:port", or a target such as "dns:///name:8001").
struct ShardSpec {
  ExpertRange range;
  std::vector<std::string> addresses;
};

// "RANGE=ADDR|ADDR;RANGE=ADDR...": ranges in order that cover [0, g) exactly
// (none empty, none overlapping), each with 1..kMaxReplicas addresses of
// printable characters without spaces, ';', '|' or '='. INVALID_ARGUMENT
// naming the entry that breaks a rule.
absl::StatusOr<std::vector<ShardSpec>> ParseShards(absl::string_view text, int64_t g);

// One router call on its shards: m tokens' x ([M, K] of `type`) and their
// routing (ids [M, S] in [0, G), weights as floats).
struct RemoteExpertsCall {
  int64_t m = 0, k = 0, s = 0;
  DataType type = DataType::kFP32;
  const void* x = nullptr;
  const int64_t* ids = nullptr;
  const float* w = nullptr;
  absl::Time deadline = absl::InfiniteFuture();  // the earliest of the batch's callers
  absl::Time began = absl::InfinitePast();  // when the router's batch began (its own time)
};

// The routed experts of a layer, computed by its shards.
class RemoteExperts {
 public:
  virtual ~RemoteExperts() = default;
  // Adds to `acc` ([M, K] FP32) the weighted sum of every routed pair, each
  // shard sent only its tokens, all shards at once. Returns when every
  // shard answered, or with the first error, which names the shard
  // (UNAVAILABLE, DEADLINE_EXCEEDED, ...): then `acc` holds a partial sum
  // that must not be answered. A call that fails is retried once on another
  // replica of its shard.
  virtual absl::Status AddRoutedExperts(const RemoteExpertsCall& call, float* acc) const = 0;
  // OK while every shard has a replica that answered its last probe;
  // UNAVAILABLE naming each shard that has none.
  virtual absl::Status Available() const = 0;
  // Bytes a call of m tokens holds beyond x, ids and w: the requests to and
  // answers from the shards (an upper bound, linear in m).
  virtual int64_t WorkBytes(int64_t m) const = 0;
};

// What a router's repository entry gives the factory: the model's name (the
// shards serve the same name), the layer's dimensions and type, and its
// parsed shards.
struct ShardedLayerPlan {
  std::string model, version;  // the shards serve the same name and version
  int64_t k = 0, s = 0, g = 0;
  DataType type = DataType::kFP32;
  std::vector<ShardSpec> shards;
  Metrics* metrics = nullptr;  // the server's (per-shard calls, tokens per expert); may be null
};

using RemoteExpertsFactory =
    std::function<absl::StatusOr<std::shared_ptr<RemoteExperts>>(const ShardedLayerPlan& plan)>;

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_MODELS_SHARDED_LAYER_H_
