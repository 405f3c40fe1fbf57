// Datatype dispatch for the row-major GEMM kernels.
#include "server/ops/kernels/gemm.h"

namespace gemmserve {

absl::Status GemmRowMajor(DataType type, int64_t m, int64_t n, int64_t k, const void* a,
                          int64_t lda, const void* b, int64_t ldb, void* c, int64_t ldc,
                          int threads) {
  switch (type) {
    case DataType::kFP32:
      SgemmRowMajor(m, n, k, static_cast<const float*>(a), lda, static_cast<const float*>(b), ldb,
                    static_cast<float*>(c), ldc, threads);
      return absl::OkStatus();
    case DataType::kFP64:
      DgemmRowMajor(m, n, k, static_cast<const double*>(a), lda, static_cast<const double*>(b), ldb,
                    static_cast<double*>(c), ldc, threads);
      return absl::OkStatus();
    case DataType::kFP16:
    case DataType::kBF16:
      return HalfGemmRowMajor(type, m, n, k, static_cast<const uint16_t*>(a), lda,
                              static_cast<const uint16_t*>(b), ldb, static_cast<uint16_t*>(c), ldc,
                              threads);
    case DataType::kINT32:
      IntGemmRowMajor(m, n, k, static_cast<const int32_t*>(a), lda, static_cast<const int32_t*>(b),
                      ldb, static_cast<int32_t*>(c), ldc, threads);
      return absl::OkStatus();
    case DataType::kINT64:
      IntGemmRowMajor(m, n, k, static_cast<const int64_t*>(a), lda, static_cast<const int64_t*>(b),
                      ldb, static_cast<int64_t*>(c), ldc, threads);
      return absl::OkStatus();
    case DataType::kUINT32:
      IntGemmRowMajor(m, n, k, static_cast<const uint32_t*>(a), lda,
                      static_cast<const uint32_t*>(b), ldb, static_cast<uint32_t*>(c), ldc,
                      threads);
      return absl::OkStatus();
    case DataType::kUINT64:
      IntGemmRowMajor(m, n, k, static_cast<const uint64_t*>(a), lda,
                      static_cast<const uint64_t*>(b), ldb, static_cast<uint64_t*>(c), ldc,
                      threads);
      return absl::OkStatus();
  }
  return absl::InternalError("unhandled datatype in GemmRowMajor");
}

}  // namespace gemmserve
