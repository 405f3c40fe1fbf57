#include "server/repository/warmup_config.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/common/client_text.h"
#include "server/common/status_macros.h"
#include "server/tensor/half.h"
#include "server/tensor/shape.h"

namespace gemmserve {
namespace {

constexpr char kWarmupDir[] = "warmup";
constexpr size_t kMaxWarmupNameLength = 128;

absl::StatusOr<DataType> WarmupDataType(inference::DataType t) {
  if (t == inference::TYPE_INVALID) return absl::InvalidArgumentError("data_type is not set");
  const std::string name = inference::DataType_Name(t);
  if (name.empty()) return absl::InvalidArgumentError(absl::StrCat("data_type ", t, " is unknown"));
  // TYPE_FP32 -> FP32; TYPE_STRING and TYPE_BOOL are refused by ParseDataType.
  absl::StatusOr<DataType> type = ParseDataType(name.substr(5));
  if (!type.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("data_type ", name, " is not served"));
  }
  return type;
}

// Floating point uniform in [-1, 1); integers 0 or 1 (valid group indices
// for any model of two or more groups). Seeded: every load warms alike.
void FillRandom(DataType type, int64_t elements, char* out, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> real(-1.0f, 1.0f);
  std::uniform_int_distribution<int> bit(0, 1);
  for (int64_t i = 0; i < elements; ++i) {
    auto put = [&](auto v) { std::memcpy(out + i * sizeof(v), &v, sizeof(v)); };
    switch (type) {
      case DataType::kBF16: put(FloatToBFloat16(real(rng))); break;
      case DataType::kFP16: put(FloatToHalf(real(rng))); break;
      case DataType::kFP32: put(real(rng)); break;
      case DataType::kFP64: put(static_cast<double>(real(rng))); break;
      case DataType::kINT32: put(static_cast<int32_t>(bit(rng))); break;
      case DataType::kINT64: put(static_cast<int64_t>(bit(rng))); break;
      case DataType::kUINT32: put(static_cast<uint32_t>(bit(rng))); break;
      case DataType::kUINT64: put(static_cast<uint64_t>(bit(rng))); break;
    }
  }
}

// One input of a sample, validated; its bytes are counted into
// `total_bytes` (held to `max_bytes`), not yet read or made.
// `batch`: the sample's batch size, the first dimension of every input of a
// model with max_batch_size > 0; 0 for a model without a batch dimension.
absl::StatusOr<WarmupInput> InputFromConfig(const std::string& name,
                                            const inference::ModelWarmup::Input& in,
                                            const std::string& where, int64_t batch,
                                            int64_t* total_bytes, int64_t max_bytes) {
  auto invalid = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
  };
  const std::string at = absl::StrCat("input '", ClientText(name, 128), "': ");
  if (name.empty()) return invalid("an input has no name");
  WarmupInput input;
  input.name = name;
  absl::StatusOr<DataType> type = WarmupDataType(in.data_type());
  if (!type.ok()) return invalid(absl::StrCat(at, type.status().message()));
  input.type = *type;
  const int rank = in.dims_size() + (batch > 0 ? 1 : 0);
  if (rank > kMaxRank) {
    return invalid(absl::StrCat(at, "rank ", rank, " is over the limit of ", kMaxRank));
  }
  if (batch > 0) input.shape.push_back(batch);
  input.shape.insert(input.shape.end(), in.dims().begin(), in.dims().end());
  absl::StatusOr<int64_t> bytes = ByteSize(input.shape, input.type);
  if (!bytes.ok()) {
    return invalid(
        absl::StrCat(at, "dims ", ShapeToString(input.shape), ": ", bytes.status().message()));
  }
  *total_bytes = SaturatingAdd(*total_bytes, *bytes);
  if (*total_bytes > max_bytes) {
    return invalid(absl::StrCat(at, "the warmup samples hold more than ", max_bytes,
                                " bytes together (--max_message_bytes)"));
  }
  switch (in.input_data_type_case()) {
    case inference::ModelWarmup::Input::kZeroData: input.data = WarmupInput::Data::kZero; break;
    case inference::ModelWarmup::Input::kRandomData:
      input.data = WarmupInput::Data::kRandom;
      break;
    case inference::ModelWarmup::Input::kInputDataFile:
      input.data = WarmupInput::Data::kFile;
      input.file = in.input_data_file();
      if (!IsPlainRelativePath(input.file)) {
        return invalid(absl::StrCat(
            at, "input_data_file must be a relative path without '.' or '..' components"));
      }
      break;
    case inference::ModelWarmup::Input::INPUT_DATA_TYPE_NOT_SET:
      return invalid(
          absl::StrCat(at, "one of zero_data, random_data or input_data_file is required"));
  }
  // zero_data: false or random_data: false still selects the kind;
  // Triton reads the field that is set, whatever its value.
  return input;
}

// Sample `s` of the config, validated, its runs counted into `total_runs`.
absl::StatusOr<WarmupSample> SampleFromConfig(const inference::ModelWarmup& w, int s,
                                              int32_t max_batch_size, uint64_t* total_runs,
                                              int64_t* total_bytes, int64_t max_bytes) {
  const std::string where = w.name().empty() ? absl::StrCat("config.pbtxt: model_warmup[", s, "]")
                                             : absl::StrCat("config.pbtxt: model_warmup '",
                                                            ClientText(w.name(), 128), "'");
  auto invalid = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
  };
  if (w.name().empty()) return invalid("name is required");
  if (w.name().size() > kMaxWarmupNameLength) {
    return invalid(absl::StrCat("name is longer than ", kMaxWarmupNameLength, " characters"));
  }
  if (max_batch_size <= 0 && w.batch_size() > 1) {
    return invalid(absl::StrCat("batch_size ", w.batch_size(),
                                ": must be 0 or 1 with max_batch_size 0 (the model has no "
                                "batch dimension; give it in dims)"));
  }
  if (max_batch_size > 0 && w.batch_size() > static_cast<uint32_t>(max_batch_size)) {
    return invalid(
        absl::StrCat("batch_size ", w.batch_size(), " is over max_batch_size ", max_batch_size));
  }
  // With a batch dimension, dims follow it (Triton's layout); 0 means 1.
  const int64_t batch = max_batch_size > 0 ? std::max<uint32_t>(1, w.batch_size()) : 0;
  if (w.count() > kMaxWarmupCount) {
    return invalid(absl::StrCat("count ", w.count(), " is over the limit of ", kMaxWarmupCount));
  }
  *total_runs += std::max<uint32_t>(1, w.count());
  if (*total_runs > kMaxWarmupCount) {
    return invalid(absl::StrCat("the samples run more than ", kMaxWarmupCount,
                                " times together (the sum of their counts)"));
  }
  if (w.inputs_size() > kMaxWarmupInputs) {
    return invalid(
        absl::StrCat(w.inputs_size(), " inputs, over the limit of ", kMaxWarmupInputs));
  }
  WarmupSample sample;
  sample.name = w.name();
  sample.batch_size = w.batch_size();
  sample.count = std::max<uint32_t>(1, w.count());
  for (const auto& [name, in] : w.inputs()) {
    GEMMSERVE_ASSIGN_OR_RETURN(WarmupInput input,
                               InputFromConfig(name, in, where, batch, total_bytes, max_bytes));
    sample.inputs.push_back(std::move(input));
  }
  std::sort(sample.inputs.begin(), sample.inputs.end(),
            [](const WarmupInput& a, const WarmupInput& b) { return a.name < b.name; });
  return sample;
}

// `input`'s bytes from its file: exactly the tensor's bytes; with a batch
// dimension (`batched`), at least one batch item's, which every item of the
// batch gets (Triton's reading of a batched sample's file).
absl::Status ReadWarmupFile(const WarmupSample& sample, WarmupInput& input, bool batched,
                            const ModelFile& file) {
  const int64_t bytes = *ByteSize(input.shape, input.type);
  const int64_t items = batched ? std::max<int64_t>(input.shape[0], 1) : 1;
  const int64_t item = bytes / items;
  const bool whole = file.size() == bytes, one_item = batched && file.size() >= item;
  if (!whole && !one_item) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.pbtxt: model_warmup '", ClientText(sample.name), "': input '",
        ClientText(input.name), "': ", kWarmupDir, "/", ClientText(input.file), " holds ",
        file.size(), " bytes; dims ", ShapeToString(input.shape), " of ", DataTypeName(input.type),
        " need ", batched ? absl::StrCat("at least ", item) : "",
        batched ? " (one batch item) or " : "", bytes));
  }
  input.bytes.resize(static_cast<size_t>(bytes));
  if (whole) return file.Read(0, bytes, input.bytes.data());
  GEMMSERVE_RETURN_IF_ERROR(file.Read(0, item, input.bytes.data()));
  for (int64_t i = 1; i < items; ++i) {
    std::memcpy(input.bytes.data() + i * item, input.bytes.data(), static_cast<size_t>(item));
  }
  return absl::OkStatus();
}

// The samples' bytes, all counted before: read from their files, zeros, or
// random values from one fixed seed.
absl::Status MakeBytes(std::vector<WarmupSample>& samples, const ModelFiles& files, bool batched) {
  std::mt19937_64 rng(0x9e3779b97f4a7c15ull);
  for (WarmupSample& sample : samples) {
    for (WarmupInput& input : sample.inputs) {
      const int64_t bytes = *ByteSize(input.shape, input.type);
      if (input.data == WarmupInput::Data::kFile) {
        absl::StatusOr<std::unique_ptr<ModelFile>> file = files.Open(kWarmupDir, input.file);
        if (!file.ok()) {
          return absl::Status(
              file.status().code(),
              absl::StrCat("config.pbtxt: model_warmup '", ClientText(sample.name), "': input '",
                           ClientText(input.name), "': ", file.status().message()));
        }
        GEMMSERVE_RETURN_IF_ERROR(ReadWarmupFile(sample, input, batched, **file));
        continue;
      }
      input.bytes.assign(static_cast<size_t>(bytes), '\0');
      if (input.data == WarmupInput::Data::kRandom) {
        FillRandom(input.type, bytes / DataTypeSize(input.type), input.bytes.data(), rng);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<WarmupSample>> WarmupFromConfig(const inference::ModelConfig& config,
                                                           const ModelFiles& files,
                                                           int64_t max_bytes) {
  if (config.model_warmup_size() > kMaxWarmupSamples) {
    return absl::InvalidArgumentError(absl::StrCat("config.pbtxt: ", config.model_warmup_size(),
                                                   " model_warmup samples, over the limit of ",
                                                   kMaxWarmupSamples));
  }
  // Every field is checked, and every byte counted, before any is allocated.
  int64_t total_bytes = 0;
  uint64_t total_runs = 0;
  std::vector<WarmupSample> samples;
  for (int s = 0; s < config.model_warmup_size(); ++s) {
    GEMMSERVE_ASSIGN_OR_RETURN(WarmupSample sample,
                               SampleFromConfig(config.model_warmup(s), s, config.max_batch_size(),
                                                &total_runs, &total_bytes, max_bytes));
    samples.push_back(std::move(sample));
  }
  GEMMSERVE_RETURN_IF_ERROR(MakeBytes(samples, files, config.max_batch_size() > 0));
  return samples;
}

}  // namespace gemmserve
