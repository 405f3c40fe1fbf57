// HostTensor: a tensor as the client holds it, in the wire's own form.
//
// The KServe v2 protocol sends tensors as a name, a datatype string, a shape
// and raw little-endian row-major bytes; HostTensor is exactly that, so it
// moves between .npy files, random generators and gRPC messages without any
// conversion. Half types (FP16, BF16) are kept as their 16-bit patterns.
//
//   HostTensor a{"A", "FP32", {2, 3}, std::string(2 * 3 * sizeof(float), '\0')};
//   float* values = reinterpret_cast<float*>(a.bytes.data());
#ifndef GEMMSERVE_CLIENT_CPP_HOST_TENSOR_H_
#define GEMMSERVE_CLIENT_CPP_HOST_TENSOR_H_

#include <cstdint>
#include <string>
#include <vector>

namespace gemmserve::client {

struct HostTensor {
  std::string name;
  std::string datatype;  // KServe name: "FP32", "BF16", "INT64", ...
  std::vector<int64_t> shape;
  std::string bytes;  // little-endian, row-major
};

}  // namespace gemmserve::client

#endif  // GEMMSERVE_CLIENT_CPP_HOST_TENSOR_H_
