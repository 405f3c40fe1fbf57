// Every string field of a parsed message is UTF-8. protobuf's text format
// parser takes invalid UTF-8 into a proto3 `string` (it only logs), where its
// binary and JSON forms refuse it: a config.pbtxt holding such a string would
// load, and what ModelConfig answers for it would not load back (found by
// fuzz_model_loader: a warmup sample's name that JSON printed empty).
#ifndef GEMMSERVE_SERVER_REPOSITORY_UTF8_FIELDS_H_
#define GEMMSERVE_SERVER_REPOSITORY_UTF8_FIELDS_H_

#include "absl/status/status.h"

namespace google {
namespace protobuf {
class Message;
}  // namespace protobuf
}  // namespace google

namespace gemmserve {

// OK when every `string` field of `message` (not `bytes`), at any depth, in
// repeated fields and maps too, is structurally valid UTF-8; otherwise
// INVALID_ARGUMENT naming the first that is not by its path, e.g.
// "model_warmup[0].name is not UTF-8".
absl::Status CheckStringsAreUtf8(const google::protobuf::Message& message);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_REPOSITORY_UTF8_FIELDS_H_
