// Runs one FP32 MatMul on a gemmserve server through the installed C++ client
// (find_package(gemmserve) + gemmserve::client) and checks the product against
// a double-precision loop.
//
//   matmul_example [URL]          # default 127.0.0.1:8001
//
// Exit status: 0 when the product matches, 1 on a mismatch or a failed call
// (the status is printed), 2 on a usage error.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/cpp/client.h"
#include "client/cpp/host_tensor.h"

namespace {

using gemmserve::client::Client;
using gemmserve::client::HostTensor;

HostTensor MakeFp32(std::string name, int64_t rows, int64_t cols,
                    const std::vector<float>& values) {
  HostTensor tensor{
      std::move(name), "FP32", {rows, cols}, std::string(values.size() * sizeof(float), '\0')};
  std::memcpy(tensor.bytes.data(), values.data(), tensor.bytes.size());
  return tensor;
}

int Run(const std::string& url) {
  constexpr int64_t kM = 3, kK = 4, kN = 5;
  std::vector<float> a(kM * kK), b(kK * kN);
  for (int64_t i = 0; i < kM * kK; ++i) a[i] = 0.5f * static_cast<float>(i) - 2.0f;
  for (int64_t i = 0; i < kK * kN; ++i) b[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;

  absl::StatusOr<Client> client = Client::Connect(url);
  if (!client.ok()) {
    std::fprintf(stderr, "connect: %s\n", client.status().ToString().c_str());
    return 1;
  }
  std::vector<HostTensor> inputs;
  inputs.push_back(MakeFp32("A", kM, kK, a));
  inputs.push_back(MakeFp32("B", kK, kN, b));
  absl::StatusOr<std::vector<HostTensor>> outputs =
      client->Infer("matmul", std::move(inputs), absl::Seconds(30));
  if (!outputs.ok()) {
    std::fprintf(stderr, "matmul: %s\n", outputs.status().ToString().c_str());
    return 1;
  }

  if (outputs->size() != 1) {
    std::fprintf(stderr, "matmul: expected one output, got %zu\n", outputs->size());
    return 1;
  }
  const HostTensor& y = outputs->front();
  bool ok = y.name == "Y" && y.datatype == "FP32" && y.shape == std::vector<int64_t>{kM, kN} &&
            y.bytes.size() == kM * kN * sizeof(float);
  std::vector<float> got(kM * kN);
  if (ok) std::memcpy(got.data(), y.bytes.data(), y.bytes.size());
  for (int64_t m = 0; ok && m < kM; ++m) {
    for (int64_t n = 0; n < kN; ++n) {
      double want = 0;
      for (int64_t k = 0; k < kK; ++k) want += double{a[m * kK + k]} * double{b[k * kN + n]};
      if (std::abs(got[m * kN + n] - want) > 1e-5 * (1 + std::abs(want))) ok = false;
    }
  }
  std::string shape;
  for (int64_t dim : y.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(dim);
  std::printf("matmul FP32 [%lld, %lld] x [%lld, %lld] -> %s [%s]: %s\n",
              static_cast<long long>(kM), static_cast<long long>(kK), static_cast<long long>(kK),
              static_cast<long long>(kN), y.datatype.c_str(), shape.c_str(),
              ok ? "OK" : "MISMATCH");
  for (int64_t m = 0; ok && m < kM; ++m) {
    for (int64_t n = 0; n < kN; ++n) std::printf("%8.3f", got[m * kN + n]);
    std::printf("\n");
  }
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 2) {
    std::fprintf(stderr, "usage: %s [URL]   (default 127.0.0.1:8001)\n", argv[0]);
    return 2;
  }
  return Run(argc == 2 ? argv[1] : "127.0.0.1:8001");
}
