#include "client/cli/noop_server.h"

#include <cstdint>
#include <utility>

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>
#include <grpcpp/support/server_callback.h>

#include "absl/strings/str_cat.h"
#include "server/tensor/datatype.h"
#include "server/tensor/shape.h"

namespace gemmserve::client {
namespace {

constexpr char kModel[] = "matmul";
constexpr char kVersion[] = "1";

// The same facts gemmserve reports for its built-in matmul, except the
// platform, which tells a curious client that nothing is computed here.
constexpr char kPlatform[] = "gemmserve-noop";

bool IsOurModel(const std::string& name, const std::string& version) {
  return name == kModel && (version.empty() || version == kVersion);
}

grpc::Status ModelNotFound(const std::string& name, const std::string& version) {
  return grpc::Status(grpc::StatusCode::NOT_FOUND,
                      absl::StrCat("unknown model '", name, "' version '", version,
                                   "' (noop-server serves only 'matmul')"));
}

// The second-to-last (rows) or last (columns) dimension, 1 when the rank is
// too small for it.
int64_t DimFromEnd(const google::protobuf::RepeatedField<int64_t>& shape, int from_end) {
  return shape.size() >= from_end ? shape[shape.size() - from_end] : 1;
}

class NoopService final : public inference::GRPCInferenceService::CallbackService {
  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* context,
                                       const inference::ServerLiveRequest*,
                                       inference::ServerLiveResponse* response) override {
    response->set_live(true);
    return Finish(context, grpc::Status::OK);
  }

  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* context,
                                        const inference::ServerReadyRequest*,
                                        inference::ServerReadyResponse* response) override {
    response->set_ready(true);
    return Finish(context, grpc::Status::OK);
  }

  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* context,
                                          const inference::ModelMetadataRequest* request,
                                          inference::ModelMetadataResponse* response) override {
    if (!IsOurModel(request->name(), request->version())) {
      return Finish(context, ModelNotFound(request->name(), request->version()));
    }
    response->set_name(kModel);
    response->add_versions(kVersion);
    response->set_platform(kPlatform);
    for (const char* name : {"A", "B"}) {
      auto* input = response->add_inputs();
      input->set_name(name);
      input->set_datatype("FP32");
      input->add_shape(-1);
      input->add_shape(-1);
    }
    auto* output = response->add_outputs();
    output->set_name("Y");
    output->set_datatype("FP32");
    output->add_shape(-1);
    output->add_shape(-1);
    return Finish(context, grpc::Status::OK);
  }

  grpc::ServerUnaryReactor* ModelConfig(grpc::CallbackServerContext* context,
                                        const inference::ModelConfigRequest* request,
                                        inference::ModelConfigResponse* response) override {
    if (!IsOurModel(request->name(), request->version())) {
      return Finish(context, ModelNotFound(request->name(), request->version()));
    }
    inference::ModelConfig* config = response->mutable_config();
    config->set_name(kModel);
    config->set_platform(kPlatform);
    config->set_backend(kPlatform);
    for (const char* name : {"A", "B"}) {
      inference::ModelInput* input = config->add_input();
      input->set_name(name);
      input->set_data_type(inference::TYPE_FP32);
      input->add_dims(-1);
      input->add_dims(-1);
    }
    inference::ModelOutput* output = config->add_output();
    output->set_name("Y");
    output->set_data_type(inference::TYPE_FP32);
    output->add_dims(-1);
    output->add_dims(-1);
    return Finish(context, grpc::Status::OK);
  }

  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* context,
                                       const inference::ModelInferRequest* request,
                                       inference::ModelInferResponse* response) override {
    return Finish(context, Infer(*request, response));
  }

  static grpc::Status Infer(const inference::ModelInferRequest& request,
                            inference::ModelInferResponse* response) {
    if (!IsOurModel(request.model_name(), request.model_version())) {
      return ModelNotFound(request.model_name(), request.model_version());
    }
    const inference::ModelInferRequest::InferInputTensor* a = nullptr;
    const inference::ModelInferRequest::InferInputTensor* b = nullptr;
    for (const auto& input : request.inputs()) {
      if (input.name() == "A") a = &input;
      if (input.name() == "B") b = &input;
    }
    if (a == nullptr || b == nullptr) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "noop-server needs inputs 'A' and 'B' to size the output");
    }
    absl::StatusOr<DataType> type = ParseDataType(a->datatype());
    if (!type.ok()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("input 'A': ", type.status().message()));
    }
    const Shape shape = {DimFromEnd(a->shape(), 2), DimFromEnd(b->shape(), 1)};
    absl::StatusOr<int64_t> bytes = ByteSize(shape, *type);
    if (!bytes.ok()) {
      return grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("output 'Y' ", ShapeToString(shape), ": ", bytes.status().message()));
    }
    if (*bytes > NoopServer::kMaxMessageBytes) {
      return grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat("output 'Y' ", ShapeToString(shape), " of ", *bytes,
                       " bytes is over the message limit of ", NoopServer::kMaxMessageBytes));
    }
    response->set_model_name(kModel);
    response->set_model_version(kVersion);
    response->set_id(request.id());
    auto* output = response->add_outputs();
    output->set_name("Y");
    output->set_datatype(a->datatype());
    output->mutable_shape()->Add(shape.begin(), shape.end());
    response->add_raw_output_contents()->assign(static_cast<size_t>(*bytes), '\0');
    return grpc::Status::OK;
  }

  static grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* context,
                                          grpc::Status status) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(std::move(status));
    return reactor;
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<NoopServer>> NoopServer::Start(const std::string& host, int port) {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--port ", port, " is not a port number"));
  }
  std::unique_ptr<NoopServer> server(new NoopServer);
  server->service_ = std::make_unique<NoopService>();
  const std::string bracketed = host.find(':') != std::string::npos && host.front() != '['
                                    ? absl::StrCat("[", host, "]")
                                    : host;
  int bound_port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat(bracketed, ":", port), grpc::InsecureServerCredentials(),
                           &bound_port);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  builder.RegisterService(server->service_.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || bound_port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", bracketed, ":", port));
  }
  server->address_ = absl::StrCat(bracketed, ":", bound_port);
  return server;
}

NoopServer::~NoopServer() {
  if (server_) server_->Shutdown();
}

void NoopServer::Shutdown(std::chrono::system_clock::time_point deadline) {
  server_->Shutdown(deadline);
}

void NoopServer::Wait() { server_->Wait(); }

}  // namespace gemmserve::client
