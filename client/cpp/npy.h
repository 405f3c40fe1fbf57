// NumPy .npy files, read and written as HostTensors.
//
// Only what a GEMM client needs is supported: format versions 1.0 and 2.0,
// C order, little-endian, and these dtypes:
//
//   .npy descr   KServe datatype
//   '<f2'        FP16
//   '<f4'        FP32
//   '<f8'        FP64
//   '<i4'        INT32
//   '<i8'        INT64
//   '<u4'        UINT32
//   '<u8'        UINT64
//   '<u2'        BF16 (bit patterns)
//
// NumPy has no bfloat16, so BF16 tensors are stored as their uint16 bits
// ('<u2'), the form `x.view(np.uint16)` gives. Reading '<u2' therefore yields
// BF16 unless the caller asks for FP16 (for files holding float16 bits as
// uint16). Writing BF16 always gives '<u2'.
//
// Files come from users, so every header is checked strictly: anything
// truncated or malformed, Fortran order, big-endian or unknown dtypes, and a
// payload whose size does not match the shape are INVALID_ARGUMENT, and all
// size arithmetic is overflow-checked.
//
//   GEMMSERVE_ASSIGN_OR_RETURN(HostTensor a, ReadNpy("a.npy"));
//   a.name = "A";
//   GEMMSERVE_RETURN_IF_ERROR(WriteNpy("copy.npy", a));
#ifndef GEMMSERVE_CLIENT_CPP_NPY_H_
#define GEMMSERVE_CLIENT_CPP_NPY_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/cpp/host_tensor.h"

namespace gemmserve::client {

// Decodes the bytes of a .npy file. The returned tensor has no name.
// `u2_datatype` is the datatype given to '<u2' data: "BF16" or "FP16".
absl::StatusOr<HostTensor> ParseNpy(absl::string_view file, absl::string_view u2_datatype = "BF16");

// Encodes `tensor` as a .npy file (version 1.0, or 2.0 when the header needs
// it). INVALID_ARGUMENT for a datatype without a dtype above, or when
// `tensor.bytes` does not hold exactly the elements of `tensor.shape`.
absl::StatusOr<std::string> EncodeNpy(const HostTensor& tensor);

// ParseNpy / EncodeNpy on a file; I/O failures carry the errno's code and the
// path.
absl::StatusOr<HostTensor> ReadNpy(const std::string& path, absl::string_view u2_datatype = "BF16");
absl::Status WriteNpy(const std::string& path, const HostTensor& tensor);

}  // namespace gemmserve::client

#endif  // GEMMSERVE_CLIENT_CPP_NPY_H_
