// Messages of the RPCs gemmserve serves raw (MarkMethodRawCallback): parsed
// and serialized by the handler instead of by gRPC, so that a handler can
// count a message's bytes before it parses it (ModelInfer) or tell a message
// that does not parse from the client closing its side (ModelStreamInfer).
#ifndef GEMMSERVE_SERVER_SERVICE_RAW_MESSAGES_H_
#define GEMMSERVE_SERVER_SERVICE_RAW_MESSAGES_H_

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include "grpc_service.pb.h"

namespace gemmserve {

// The index of `method` among GRPCInferenceService's methods, as the
// generated code numbers them (their order in grpc_service.proto).
inline int InferenceMethodIndex(const char* method) {
  return inference::ModelInferRequest::descriptor()
      ->file()
      ->FindServiceByName("GRPCInferenceService")
      ->FindMethodByName(method)
      ->index();
}

// `bytes` parsed into `message`: false for bytes that are not one
// (truncated, garbage, a string field that is not UTF-8). `bytes` is read,
// not changed.
inline bool ParseRawMessage(grpc::ByteBuffer& bytes, google::protobuf::Message& message) {
  grpc::ProtoBufferReader reader(&bytes);
  return message.ParseFromZeroCopyStream(&reader);
}

// `message` serialized into `bytes` (replacing what they held).
template <typename Message>
grpc::Status SerializeRawMessage(const Message& message, grpc::ByteBuffer* bytes) {
  bool own_buffer = false;
  return grpc::SerializationTraits<Message>::Serialize(message, bytes, &own_buffer);
}

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_SERVICE_RAW_MESSAGES_H_
