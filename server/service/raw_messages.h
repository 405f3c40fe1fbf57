// Messages of the RPCs gemmserve serves raw (MarkMethodRawCallback): parsed
// and serialized by the handler instead of by gRPC, so that a handler can
// count a message's bytes before it parses it (ModelInfer) or tell a message
// that does not parse from the client closing its side (ModelStreamInfer).
#ifndef GEMMSERVE_SERVER_SERVICE_RAW_MESSAGES_H_
#define GEMMSERVE_SERVER_SERVICE_RAW_MESSAGES_H_

#include <string>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/message.h>
#include <google/protobuf/wire_format_lite.h>
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

// The `model_name` (field 1) of a serialized ModelInferRequest, read without
// parsing the rest (fields before it are skipped, not copied): what a
// refusal before the parse is counted under. "" when it is not among the
// first 16 fields, longer than 1 KiB, or the bytes are not protobuf.
inline std::string PeekModelName(grpc::ByteBuffer& bytes) {
  using google::protobuf::internal::WireFormatLite;
  grpc::ProtoBufferReader reader(&bytes);
  google::protobuf::io::CodedInputStream in(&reader);
  for (int field = 0; field < 16; ++field) {
    const uint32_t tag = in.ReadTag();
    if (tag == 0) break;
    if (WireFormatLite::GetTagFieldNumber(tag) == 1 &&
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      uint32_t length = 0;
      std::string name;
      if (!in.ReadVarint32(&length) || length > 1024 ||
          !in.ReadString(&name, static_cast<int>(length))) {
        break;
      }
      return name;
    }
    if (!WireFormatLite::SkipField(&in, tag)) break;
  }
  return "";
}

// `message` serialized into `bytes` (replacing what they held).
template <typename Message>
grpc::Status SerializeRawMessage(const Message& message, grpc::ByteBuffer* bytes) {
  bool own_buffer = false;
  return grpc::SerializationTraits<Message>::Serialize(message, bytes, &own_buffer);
}

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_SERVICE_RAW_MESSAGES_H_
