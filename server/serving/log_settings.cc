// Serving::LogSettings: Triton's log settings over the running process
// (server/common/logging.h holds them).
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/common/client_text.h"
#include "server/common/logging.h"
#include "server/common/status_macros.h"
#include "server/serving/serving.h"

namespace gemmserve {
namespace {

using Value = inference::LogSettingsRequest::SettingValue;

constexpr char kKeys[] =
    "log_file, log_info, log_warning, log_error, log_verbose_level, log_format";

absl::Status WrongType(const std::string& key, const char* type) {
  return absl::InvalidArgumentError(absl::StrCat("log setting '", key, "' must be ", type));
}

// Applies one key of the request to `config`.
absl::Status Apply(const std::string& key, const Value& value, bool file_settable,
                   LogConfig* config) {
  bool* flag = key == "log_info"      ? &config->info
               : key == "log_warning" ? &config->warning
               : key == "log_error"   ? &config->error
                                      : nullptr;
  if (flag != nullptr) {
    if (value.parameter_choice_case() != Value::kBoolParam) return WrongType(key, "a bool");
    *flag = value.bool_param();
  } else if (key == "log_verbose_level") {
    if (value.parameter_choice_case() != Value::kUint32Param) return WrongType(key, "a uint32");
    config->verbose_level = value.uint32_param();
  } else if (key == "log_format") {
    if (value.parameter_choice_case() != Value::kStringParam) return WrongType(key, "a string");
    if (value.string_param() != "default" && value.string_param() != "ISO8601") {
      return absl::InvalidArgumentError(absl::StrCat("log_format '",
                                                     ClientText(value.string_param()),
                                                     "' is not one of: default, ISO8601"));
    }
    config->format = value.string_param() == "ISO8601" ? LogFormat::kIso8601 : LogFormat::kDefault;
  } else if (key == "log_file") {
    if (value.parameter_choice_case() != Value::kStringParam) return WrongType(key, "a string");
    if (value.string_param() != config->file && !file_settable) {
      return absl::PermissionDeniedError(
          "log_file cannot be changed by a client (a path it picks would be written by the "
          "server); start the server with --allow_log_file_setting to allow it");
    }
    config->file = value.string_param();
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unknown log setting '", ClientText(key),
                                                   "'; expected one of: ", kKeys));
  }
  return absl::OkStatus();
}

void Report(const LogConfig& c, inference::LogSettingsResponse* response) {
  auto& out = *response->mutable_settings();
  out["log_file"].set_string_param(c.file);
  out["log_info"].set_bool_param(c.info);
  out["log_warning"].set_bool_param(c.warning);
  out["log_error"].set_bool_param(c.error);
  out["log_verbose_level"].set_uint32_param(c.verbose_level);
  out["log_format"].set_string_param(c.format == LogFormat::kIso8601 ? "ISO8601" : "default");
}

}  // namespace

absl::Status Serving::LogSettings(std::optional<absl::string_view> authorization,
                                  const inference::LogSettingsRequest& request,
                                  inference::LogSettingsResponse* response) {
  GEMMSERVE_RETURN_IF_ERROR(Authenticate(authorization));
  LogConfig config = CurrentLogConfig();
  if (!request.settings().empty()) {
    std::vector<std::string> changed;
    for (const auto& [key, value] : request.settings()) {
      GEMMSERVE_RETURN_IF_ERROR(Apply(key, value, allow_log_file_setting_, &config));
      changed.push_back(key);
    }
    GEMMSERVE_RETURN_IF_ERROR(SetLogConfig(config));
    std::sort(changed.begin(), changed.end());
    GEMMSERVE_LOG(WARNING) << "log settings set by a client: " << absl::StrJoin(changed, ", ");
  }
  Report(config, response);
  return absl::OkStatus();
}

}  // namespace gemmserve
