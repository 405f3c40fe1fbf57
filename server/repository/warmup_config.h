// config.pbtxt's model_warmup (Triton's field) turned into the samples the
// engine runs at load (WarmupSample), every field checked against what it
// is used for before anything is allocated for it:
//   - at most kMaxWarmupSamples samples of at most kMaxWarmupInputs inputs,
//     each run `count` (0 means 1) times, at most kMaxWarmupCount runs of
//     all samples together (the engine also stops a warmup that passes
//     kWarmupDeadline);
//   - a name (at most 128 characters) on every sample; with max_batch_size
//     0, batch_size 0 or 1 and dims the whole tensor; with max_batch_size > 0
//     (Triton's implicit batch dimension), batch_size up to it (0 means 1),
//     which leads each input's shape, then dims;
//   - every input: a datatype gemmserve serves, a rank of at most kMaxRank
//     with non-negative dimensions, and one of zero_data, random_data or
//     input_data_file (a plain relative path under the model's warmup/
//     directory, holding exactly the tensor's bytes);
//   - the bytes of all samples together at most `max_bytes` (the server's
//     --max_message_bytes: no more than one client request may hold),
//     counted from the shapes before any is allocated.
// Which inputs a model takes, and their shapes, are its own to check: the
// engine runs each sample through the model's validation as a client's.
//
// INVALID_ARGUMENT naming the sample and field; NOT_FOUND for a data file
// that does not exist.
#ifndef GEMMSERVE_SERVER_REPOSITORY_WARMUP_CONFIG_H_
#define GEMMSERVE_SERVER_REPOSITORY_WARMUP_CONFIG_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "model_config.pb.h"
#include "server/core/model_warmup.h"
#include "server/repository/model_files.h"

namespace gemmserve {

inline constexpr int kMaxWarmupSamples = 64;
inline constexpr int kMaxWarmupInputs = 16;
inline constexpr uint32_t kMaxWarmupCount = 1000;

absl::StatusOr<std::vector<WarmupSample>> WarmupFromConfig(const inference::ModelConfig& config,
                                                           const ModelFiles& files,
                                                           int64_t max_bytes);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_REPOSITORY_WARMUP_CONFIG_H_
