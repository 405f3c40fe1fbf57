#include "client/cpp/client.h"

#include <algorithm>
#include <utility>

#include <google/protobuf/unknown_field_set.h>
#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/channel_arguments.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "server/common/status_macros.h"
#include "server/tensor/datatype.h"
#include "server/tensor/shape.h"

namespace gemmserve::client {
namespace {

constexpr char kHealthCheckMethod[] = "/grpc.health.v1.Health/Check";
// Triton's shared-memory parameters.
constexpr char kRegionParameter[] = "shared_memory_region";
constexpr char kByteSizeParameter[] = "shared_memory_byte_size";
constexpr char kOffsetParameter[] = "shared_memory_offset";

void SetTimeout(absl::Duration timeout, grpc::ClientContext* context) {
  if (timeout != absl::InfiniteDuration()) {
    context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  }
}

// Output byte counts are checked against shapes only for datatypes gemmserve
// computes with; others (BYTES from some other server) pass through as sent.
absl::Status CheckOutputSize(const HostTensor& output) {
  absl::StatusOr<DataType> type = ParseDataType(output.datatype);
  if (!type.ok()) return absl::OkStatus();
  absl::StatusOr<int64_t> expected = ByteSize(output.shape, *type);
  if (!expected.ok() || static_cast<uint64_t>(*expected) != output.bytes.size()) {
    return absl::InternalError(absl::StrCat(
        "server sent output '", output.name, "' of shape ", ShapeToString(output.shape),
        " and datatype ", output.datatype, " with ", output.bytes.size(), " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::string_view ServingStatusName(ServingStatus status) {
  switch (status) {
    case ServingStatus::kUnknown: return "UNKNOWN";
    case ServingStatus::kServing: return "SERVING";
    case ServingStatus::kNotServing: return "NOT_SERVING";
    case ServingStatus::kServiceUnknown: return "SERVICE_UNKNOWN";
  }
  return "UNKNOWN";
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

absl::StatusOr<Client> Client::Connect(std::string target) {
  if (target.empty()) return absl::InvalidArgumentError("empty server address");
  grpc::ChannelArguments args;
  // gRPC's default 4 MiB receive limit would reject most GEMM outputs; the
  // server enforces its own limit on what it sends.
  args.SetMaxReceiveMessageSize(-1);
  return Client(grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args));
}

Client::Client(std::shared_ptr<grpc::Channel> channel)
    : channel_(std::move(channel)), stub_(inference::GRPCInferenceService::NewStub(channel_)) {}

absl::StatusOr<bool> Client::ServerLive(absl::Duration timeout) const {
  grpc::ClientContext context;
  SetTimeout(timeout, &context);
  inference::ServerLiveResponse response;
  GEMMSERVE_RETURN_IF_ERROR(
      FromGrpcStatus(stub_->ServerLive(&context, inference::ServerLiveRequest(), &response)));
  return response.live();
}

absl::StatusOr<bool> Client::ServerReady(absl::Duration timeout) const {
  grpc::ClientContext context;
  SetTimeout(timeout, &context);
  inference::ServerReadyResponse response;
  GEMMSERVE_RETURN_IF_ERROR(
      FromGrpcStatus(stub_->ServerReady(&context, inference::ServerReadyRequest(), &response)));
  return response.ready();
}

absl::StatusOr<ServingStatus> Client::Health(absl::string_view service,
                                             absl::Duration timeout) const {
  // No C++ code for health.proto ships with bookworm, and its two messages
  // are one field each, so they are encoded by hand: HealthCheckRequest is
  // {string service = 1}, HealthCheckResponse is {ServingStatus status = 1}.
  google::protobuf::UnknownFieldSet request_fields;
  if (!service.empty()) request_fields.AddLengthDelimited(1, std::string(service));
  std::string request_bytes;
  request_fields.SerializeToString(&request_bytes);
  grpc::Slice request_slice(request_bytes);
  grpc::ByteBuffer request(&request_slice, 1);

  grpc::ClientContext context;
  SetTimeout(timeout, &context);
  grpc::ByteBuffer response;
  grpc::Status status;
  absl::Notification done;
  grpc::GenericStub(channel_).UnaryCall(&context, kHealthCheckMethod, grpc::StubOptions(), &request,
                                        &response, [&](grpc::Status s) {
                                          status = std::move(s);
                                          done.Notify();
                                        });
  done.WaitForNotification();
  GEMMSERVE_RETURN_IF_ERROR(FromGrpcStatus(status));

  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return absl::InternalError("unreadable health response");
  std::string response_bytes;
  for (const grpc::Slice& slice : slices) {
    response_bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  google::protobuf::UnknownFieldSet response_fields;
  if (!response_fields.ParseFromString(response_bytes)) {
    return absl::InternalError("malformed health response");
  }
  // proto3 omits a zero (UNKNOWN) status; the last occurrence of a field wins.
  uint64_t value = 0;
  for (int i = 0; i < response_fields.field_count(); ++i) {
    const google::protobuf::UnknownField& field = response_fields.field(i);
    if (field.number() == 1 && field.type() == google::protobuf::UnknownField::TYPE_VARINT) {
      value = field.varint();
    }
  }
  if (value > static_cast<uint64_t>(ServingStatus::kServiceUnknown)) {
    return absl::InternalError(absl::StrCat("unknown health status ", value));
  }
  return static_cast<ServingStatus>(value);
}

absl::StatusOr<inference::ModelMetadataResponse> Client::ModelMetadata(
    absl::string_view model, absl::Duration timeout) const {
  grpc::ClientContext context;
  SetTimeout(timeout, &context);
  inference::ModelMetadataRequest request;
  request.set_name(std::string(model));
  inference::ModelMetadataResponse response;
  GEMMSERVE_RETURN_IF_ERROR(FromGrpcStatus(stub_->ModelMetadata(&context, request, &response)));
  return response;
}

absl::StatusOr<inference::ModelConfig> Client::ModelConfig(absl::string_view model,
                                                           absl::Duration timeout) const {
  grpc::ClientContext context;
  SetTimeout(timeout, &context);
  inference::ModelConfigRequest request;
  request.set_name(std::string(model));
  inference::ModelConfigResponse response;
  GEMMSERVE_RETURN_IF_ERROR(FromGrpcStatus(stub_->ModelConfig(&context, request, &response)));
  return std::move(*response.mutable_config());
}

absl::StatusOr<inference::ModelStatistics> Client::ModelStatistics(absl::string_view model,
                                                                   absl::Duration timeout) const {
  grpc::ClientContext context;
  SetTimeout(timeout, &context);
  inference::ModelStatisticsRequest request;
  request.set_name(std::string(model));
  inference::ModelStatisticsResponse response;
  GEMMSERVE_RETURN_IF_ERROR(FromGrpcStatus(stub_->ModelStatistics(&context, request, &response)));
  if (response.model_stats_size() != 1) {
    return absl::InternalError(absl::StrCat("ModelStatistics for one model answered ",
                                            response.model_stats_size(), " entries"));
  }
  return std::move(*response.mutable_model_stats(0));
}

inference::ModelInferRequest MakeInferRequest(absl::string_view model,
                                              std::vector<HostTensor> inputs,
                                              const std::vector<SharedMemoryInput>& shm_inputs,
                                              const std::vector<SharedMemoryOutput>& shm_outputs) {
  inference::ModelInferRequest request;
  request.set_model_name(std::string(model));
  auto add = [&request](HostTensor& input) {
    inference::ModelInferRequest::InferInputTensor* tensor = request.add_inputs();
    tensor->set_name(std::move(input.name));
    tensor->set_datatype(std::move(input.datatype));
    tensor->mutable_shape()->Add(input.shape.begin(), input.shape.end());
    return tensor;
  };
  auto window = [](const SharedMemoryWindow& w,
                   google::protobuf::Map<std::string, inference::InferParameter>* params) {
    (*params)[kRegionParameter].set_string_param(w.region);
    (*params)[kByteSizeParameter].set_int64_param(w.byte_size);
    if (w.offset != 0) (*params)[kOffsetParameter].set_int64_param(w.offset);
  };
  for (HostTensor& input : inputs) {
    add(input);
    *request.add_raw_input_contents() = std::move(input.bytes);
  }
  for (const SharedMemoryInput& input : shm_inputs) {
    HostTensor described{input.tensor.name, input.tensor.datatype, input.tensor.shape, ""};
    window(input.window, add(described)->mutable_parameters());
  }
  for (const SharedMemoryOutput& output : shm_outputs) {
    inference::ModelInferRequest::InferRequestedOutputTensor* requested = request.add_outputs();
    requested->set_name(output.name);
    window(output.window, requested->mutable_parameters());
  }
  return request;
}

absl::StatusOr<std::vector<HostTensor>> Client::Infer(absl::string_view model,
                                                      std::vector<HostTensor> inputs,
                                                      absl::Duration timeout) const {
  return Infer(model, std::move(inputs), {}, {}, timeout);
}

absl::StatusOr<std::vector<HostTensor>> Client::Infer(
    absl::string_view model, std::vector<HostTensor> inputs,
    const std::vector<SharedMemoryInput>& shm_inputs,
    const std::vector<SharedMemoryOutput>& shm_outputs, absl::Duration timeout) const {
  const inference::ModelInferRequest request =
      MakeInferRequest(model, std::move(inputs), shm_inputs, shm_outputs);
  grpc::ClientContext context;
  SetTimeout(timeout, &context);
  inference::ModelInferResponse response;
  GEMMSERVE_RETURN_IF_ERROR(FromGrpcStatus(stub_->ModelInfer(&context, request, &response)));

  if (response.raw_output_contents_size() != response.outputs_size()) {
    return absl::InternalError(absl::StrCat("server sent ", response.outputs_size(),
                                            " outputs but ", response.raw_output_contents_size(),
                                            " raw output contents"));
  }
  std::vector<HostTensor> outputs(response.outputs_size());
  for (int i = 0; i < response.outputs_size(); ++i) {
    inference::ModelInferResponse::InferOutputTensor* tensor = response.mutable_outputs(i);
    HostTensor& output = outputs[i];
    output.name = std::move(*tensor->mutable_name());
    output.datatype = std::move(*tensor->mutable_datatype());
    output.shape.assign(tensor->shape().begin(), tensor->shape().end());
    const bool in_shm =
        std::any_of(shm_outputs.begin(), shm_outputs.end(),
                    [&](const SharedMemoryOutput& o) { return o.name == output.name; });
    if (in_shm) {
      auto region = tensor->parameters().find(kRegionParameter);
      if (region == tensor->parameters().end() || !response.raw_output_contents(i).empty()) {
        return absl::InternalError(absl::StrCat("server sent output '", output.name,
                                                "' without its shared memory window"));
      }
      continue;
    }
    output.bytes = std::move(*response.mutable_raw_output_contents(i));
    GEMMSERVE_RETURN_IF_ERROR(CheckOutputSize(output));
  }
  return outputs;
}

absl::Status Client::RegisterSystemSharedMemory(absl::string_view name, absl::string_view key,
                                                int64_t byte_size, int64_t offset,
                                                absl::Duration timeout) const {
  if (byte_size < 0 || offset < 0) {
    return absl::InvalidArgumentError("shared memory byte size and offset must not be negative");
  }
  grpc::ClientContext context;
  SetTimeout(timeout, &context);
  inference::SystemSharedMemoryRegisterRequest request;
  request.set_name(std::string(name));
  request.set_key(std::string(key));
  request.set_offset(static_cast<uint64_t>(offset));
  request.set_byte_size(static_cast<uint64_t>(byte_size));
  inference::SystemSharedMemoryRegisterResponse response;
  return FromGrpcStatus(stub_->SystemSharedMemoryRegister(&context, request, &response));
}

absl::Status Client::UnregisterSystemSharedMemory(absl::string_view name,
                                                  absl::Duration timeout) const {
  grpc::ClientContext context;
  SetTimeout(timeout, &context);
  inference::SystemSharedMemoryUnregisterRequest request;
  request.set_name(std::string(name));
  inference::SystemSharedMemoryUnregisterResponse response;
  return FromGrpcStatus(stub_->SystemSharedMemoryUnregister(&context, request, &response));
}

absl::StatusOr<inference::SystemSharedMemoryStatusResponse> Client::SystemSharedMemoryStatus(
    absl::string_view name, absl::Duration timeout) const {
  grpc::ClientContext context;
  SetTimeout(timeout, &context);
  inference::SystemSharedMemoryStatusRequest request;
  request.set_name(std::string(name));
  inference::SystemSharedMemoryStatusResponse response;
  GEMMSERVE_RETURN_IF_ERROR(
      FromGrpcStatus(stub_->SystemSharedMemoryStatus(&context, request, &response)));
  return response;
}

}  // namespace gemmserve::client
