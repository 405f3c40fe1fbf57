// The sharded layer's config grammar: expert_range and shards, their rules
// one by one, and a property over random plans (what is printed parses back
// to the same plan; any single-character change parses to a plan that still
// covers [0, G) once, or is refused, never crashes).
#include "server/models/sharded_layer.h"

#include <random>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gemmserve {
namespace {

using ::testing::HasSubstr;

TEST(ExpertRangeTest, ParsesFirstColonLast) {
  absl::StatusOr<ExpertRange> r = ParseExpertRange("32:64");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->first, 32);
  EXPECT_EQ(r->last, 64);
  EXPECT_EQ(r->count(), 32);
  EXPECT_EQ(ExpertRangeText(*r), "32:64");
  for (const char* bad : {"", ":", "3", "3:3", "4:3", "-1:3", "1:2:3", " 1:2", "1:2 ", "0x1:2",
                          "1:1234567890", "+1:2", "a:b", "0:4097"}) {
    absl::StatusOr<ExpertRange> refused = ParseExpertRange(bad);
    EXPECT_FALSE(refused.ok()) << "'" << bad << "'";
    if (!refused.ok()) {
      EXPECT_THAT(refused.status().message(), HasSubstr("FIRST:LAST"));
    }
  }
}

TEST(ShardsTest, ParsesRangesAndReplicas) {
  absl::StatusOr<std::vector<ShardSpec>> s =
      ParseShards("0:32=a:8001|dns:///b.moe:8001;32:64=[::1]:9000", 64);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->size(), 2u);
  EXPECT_EQ((*s)[0].range, (ExpertRange{0, 32}));
  EXPECT_EQ((*s)[0].addresses, (std::vector<std::string>{"a:8001", "dns:///b.moe:8001"}));
  EXPECT_EQ((*s)[1].addresses, (std::vector<std::string>{"[::1]:9000"}));
}

TEST(ShardsTest, RefusesEachBrokenRuleNamingIt) {
  const std::pair<const char*, const char*> cases[] = {
      {"0:32=a:1", "the layer has G=64"},             // experts 32..63 in no shard
      {"0:32=a:1;16:64=b:1", "expected 32"},          // overlap
      {"0:16=a:1;32:64=b:1", "expected 16"},          // gap
      {"32:64=a:1;0:32=b:1", "expected 0"},           // out of order
      {"0:64", "FIRST:LAST=ADDRESS"},                 // no address
      {"0:64=", "an address must be"},                // empty address
      {"0:64=a:1|", "an address must be"},            // empty replica
      {"0:64=a b:1", "an address must be"},           // space
      {"0:64=a:1=b", "an address must be"},           // '='
      {"0:64=a:1;", "FIRST:LAST=ADDRESS"},            // empty entry
      {"0-64=a:1", "FIRST:LAST"},                     // range form
      {"", "FIRST:LAST=ADDRESS"},
  };
  for (const auto& [text, want] : cases) {
    absl::StatusOr<std::vector<ShardSpec>> s = ParseShards(text, 64);
    EXPECT_FALSE(s.ok()) << text;
    if (!s.ok()) {
      EXPECT_THAT(s.status().message(), HasSubstr(want)) << text;
    }
  }
  std::string many = "0:1=a:1";
  for (int e = 1; e <= kMaxShards; ++e) absl::StrAppend(&many, ";", e, ":", e + 1, "=a:1");
  EXPECT_THAT(ParseShards(many, kMaxShards + 1).status().message(), HasSubstr("more than"));
  std::vector<std::string> replicas(kMaxReplicas + 1, "a:1");
  EXPECT_THAT(ParseShards("0:4=" + absl::StrJoin(replicas, "|"), 4).status().message(),
              HasSubstr("replicas"));
  EXPECT_THAT(ParseShards("0:4=" + std::string(kMaxAddressLength + 1, 'a'), 4).status().message(),
              HasSubstr("an address must be"));
  EXPECT_THAT(ParseShards(std::string(kMaxShardsTextLength + 1, 'a'), 4).status().message(),
              HasSubstr("over the limit"));
}

TEST(ShardsTest, RandomPlansRoundTripAndMutationsNeverBreakTheCover) {
  std::mt19937_64 rng(53);
  const std::string alphabet = "0123456789:;=|ab.[]/ -";
  for (int trial = 0; trial < 2000; ++trial) {
    const int64_t g = 1 + static_cast<int64_t>(rng() % 300);
    std::vector<std::string> entries;
    std::vector<ShardSpec> want;
    for (int64_t first = 0; first < g;) {
      const int64_t last = std::min<int64_t>(g, first + 1 + static_cast<int64_t>(rng() % 64));
      ShardSpec s{{first, last}, {}};
      for (uint64_t r = 0, n = 1 + rng() % 3; r < n; ++r) {
        s.addresses.push_back(absl::StrCat("host", rng() % 100, ":", 8000 + rng() % 100));
      }
      entries.push_back(absl::StrCat(first, ":", last, "=", absl::StrJoin(s.addresses, "|")));
      want.push_back(s);
      first = last;
    }
    std::string text = absl::StrJoin(entries, ";");
    absl::StatusOr<std::vector<ShardSpec>> got = ParseShards(text, g);
    ASSERT_TRUE(got.ok()) << text << ": " << got.status();
    ASSERT_EQ(got->size(), want.size());
    for (size_t j = 0; j < want.size(); ++j) {
      EXPECT_EQ((*got)[j].range, want[j].range);
      EXPECT_EQ((*got)[j].addresses, want[j].addresses);
    }
    text[rng() % text.size()] = alphabet[rng() % alphabet.size()];
    absl::StatusOr<std::vector<ShardSpec>> mutated = ParseShards(text, g);
    if (!mutated.ok()) continue;
    int64_t next = 0;  // accepted: still every expert once, in order
    for (const ShardSpec& s : *mutated) {
      EXPECT_EQ(s.range.first, next) << text;
      EXPECT_LT(s.range.first, s.range.last) << text;
      EXPECT_FALSE(s.addresses.empty()) << text;
      next = s.range.last;
    }
    EXPECT_EQ(next, g) << text;
  }
}

}  // namespace
}  // namespace gemmserve
