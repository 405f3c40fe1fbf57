#include "client/cpp/client.h"

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

absl::StatusOr<std::vector<HostTensor>> Client::Infer(absl::string_view model,
                                                      std::vector<HostTensor> inputs,
                                                      absl::Duration timeout) const {
  inference::ModelInferRequest request;
  request.set_model_name(std::string(model));
  for (HostTensor& input : inputs) {
    inference::ModelInferRequest::InferInputTensor* tensor = request.add_inputs();
    tensor->set_name(std::move(input.name));
    tensor->set_datatype(std::move(input.datatype));
    tensor->mutable_shape()->Add(input.shape.begin(), input.shape.end());
    *request.add_raw_input_contents() = std::move(input.bytes);
  }

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
    output.bytes = std::move(*response.mutable_raw_output_contents(i));
    GEMMSERVE_RETURN_IF_ERROR(CheckOutputSize(output));
  }
  return outputs;
}

}  // namespace gemmserve::client
