#include "server/models/sharded_layer.h"

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/common/client_text.h"
#include "server/common/status_macros.h"

namespace gemmserve {
namespace {

// A decimal of at most 9 digits (a layer's experts fit in int32).
bool SmallNumber(absl::string_view text, int64_t* n) {
  if (text.empty() || text.size() > 9) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  return absl::SimpleAtoi(text, n);
}

bool AddressCharacters(absl::string_view a) {
  for (char c : a) {
    if (c <= ' ' || c > '~' || c == ';' || c == '|' || c == '=') return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<ExpertRange> ParseExpertRange(absl::string_view text) {
  const std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  ExpertRange r;
  if (parts.size() != 2 || !SmallNumber(parts[0], &r.first) || !SmallNumber(parts[1], &r.last) ||
      r.first >= r.last || r.last > kMaxShardedExperts) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expert range '", ClientText(text, 64), "': expected FIRST:LAST, decimal, FIRST < LAST <= ",
        kMaxShardedExperts, " (experts FIRST to LAST-1)"));
  }
  return r;
}

std::string ExpertRangeText(const ExpertRange& r) { return absl::StrCat(r.first, ":", r.last); }

absl::StatusOr<std::vector<ShardSpec>> ParseShards(absl::string_view text, int64_t g) {
  if (text.size() > static_cast<size_t>(kMaxShardsTextLength)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shards: ", text.size(), " characters, over the limit of ", kMaxShardsTextLength));
  }
  std::vector<ShardSpec> shards;
  int64_t next = 0;
  for (absl::string_view entry : absl::StrSplit(text, ';')) {
    const std::string where =
        absl::StrCat("shards entry ", shards.size(), " '", ClientText(entry, 80), "'");
    if (shards.size() == static_cast<size_t>(kMaxShards)) {
      return absl::InvalidArgumentError(absl::StrCat("shards: more than ", kMaxShards, " shards"));
    }
    const size_t eq = entry.find('=');
    if (eq == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": expected FIRST:LAST=ADDRESS|..."));
    }
    ShardSpec shard;
    absl::StatusOr<ExpertRange> range = ParseExpertRange(entry.substr(0, eq));
    if (!range.ok())
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", range.status().message()));
    shard.range = *range;
    if (shard.range.first != next) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": starts at expert ", shard.range.first, ", expected ", next,
                       " (ranges in order, covering every expert once)"));
    }
    next = shard.range.last;
    for (absl::string_view a : absl::StrSplit(entry.substr(eq + 1), '|')) {
      if (a.empty() || a.size() > static_cast<size_t>(kMaxAddressLength) || !AddressCharacters(a)) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": an address must be 1 to ", kMaxAddressLength,
                         " printable characters without spaces (host:port or a gRPC target)"));
      }
      shard.addresses.emplace_back(a);
    }
    if (shard.addresses.size() > static_cast<size_t>(kMaxReplicas)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": more than ", kMaxReplicas, " replicas"));
    }
    shards.push_back(std::move(shard));
  }
  if (next != g) {
    return absl::InvalidArgumentError(absl::StrCat("shards: the ranges end at expert ", next,
                                                   ", the layer has G=", g,
                                                   " (every expert must belong to one shard)"));
  }
  return shards;
}

}  // namespace gemmserve
