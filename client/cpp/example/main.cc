// Runs one FP32 MatMul on a gemmserve server through the installed C++ client
// (find_package(gemmserve) + gemmserve::client) and checks the product against
// a double-precision loop; with --shared_memory, runs it again with A read
// from, and Y written to, a system shared memory region (the server needs
// --allow_client_shm) and checks that product too.
//
//   matmul_example [URL] [--shared_memory]   # default 127.0.0.1:8001
//
// Exit status: 0 when the product matches, 1 on a mismatch or a failed call
// (the status is printed), 2 on a usage error.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <unistd.h>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/cpp/client.h"
#include "client/cpp/host_tensor.h"
#include "client/cpp/shared_memory.h"

namespace {

using gemmserve::client::Client;
using gemmserve::client::HostTensor;
using gemmserve::client::SharedMemoryInput;
using gemmserve::client::SharedMemoryOutput;
using gemmserve::client::SharedMemoryRegion;

HostTensor MakeFp32(std::string name, int64_t rows, int64_t cols,
                    const std::vector<float>& values) {
  HostTensor tensor{
      std::move(name), "FP32", {rows, cols}, std::string(values.size() * sizeof(float), '\0')};
  std::memcpy(tensor.bytes.data(), values.data(), tensor.bytes.size());
  return tensor;
}

constexpr int64_t kM = 3, kK = 4, kN = 5;

// Y against the double-precision product; prints it.
bool Check(const char* how, const HostTensor& y, const std::vector<float>& a,
           const std::vector<float>& b) {
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
  std::printf("matmul%s FP32 [%lld, %lld] x [%lld, %lld] -> %s [%s]: %s\n", how,
              static_cast<long long>(kM), static_cast<long long>(kK), static_cast<long long>(kK),
              static_cast<long long>(kN), y.datatype.c_str(), shape.c_str(),
              ok ? "OK" : "MISMATCH");
  for (int64_t m = 0; ok && m < kM; ++m) {
    for (int64_t n = 0; n < kN; ++n) std::printf("%8.3f", got[m * kN + n]);
    std::printf("\n");
  }
  return ok;
}

// A in a region, B over the socket, Y written by the server to the region.
bool RunShm(const Client& client, const std::vector<float>& a, const std::vector<float>& b) {
  const int64_t a_bytes = kM * kK * sizeof(float), y_bytes = kM * kN * sizeof(float);
  absl::StatusOr<SharedMemoryRegion> region = SharedMemoryRegion::Create(
      "/gemmserve_example_" + std::to_string(::getpid()), a_bytes + y_bytes);
  if (!region.ok()) {
    std::fprintf(stderr, "shared memory: %s\n", region.status().ToString().c_str());
    return false;
  }
  HostTensor a_tensor = MakeFp32("A", kM, kK, a);
  absl::Status s = region->Write(0, a_tensor.bytes);
  if (s.ok()) {
    s = client.RegisterSystemSharedMemory("example", region->key(), region->byte_size(), 0,
                                          absl::Seconds(30));
  }
  if (!s.ok()) {
    std::fprintf(stderr, "shared memory: %s\n", s.ToString().c_str());
    return false;
  }
  a_tensor.bytes.clear();
  std::vector<HostTensor> wire;
  wire.push_back(MakeFp32("B", kK, kN, b));
  absl::StatusOr<std::vector<HostTensor>> outputs = client.Infer(
      "matmul", std::move(wire), {SharedMemoryInput{a_tensor, {"example", 0, a_bytes}}},
      {SharedMemoryOutput{"Y", {"example", a_bytes, y_bytes}}}, absl::Seconds(30));
  const absl::Status unregistered =
      client.UnregisterSystemSharedMemory("example", absl::Seconds(30));
  if (!outputs.ok() || outputs->size() != 1 || !unregistered.ok()) {
    std::fprintf(stderr, "matmul via shared memory: %s %s\n",
                 outputs.ok() ? "" : outputs.status().ToString().c_str(),
                 unregistered.ToString().c_str());
    return false;
  }
  HostTensor y = outputs->front();  // its bytes are in the region
  absl::StatusOr<std::string> bytes = region->Read(a_bytes, y_bytes);
  if (!bytes.ok() || !y.bytes.empty()) return false;
  y.bytes = *std::move(bytes);
  return Check(" via shared memory", y, a, b);
}

int Run(const std::string& url, bool shared_memory) {
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
  bool ok = Check("", outputs->front(), a, b);
  if (shared_memory) ok = RunShm(*client, a, b) && ok;
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string url = "127.0.0.1:8001";
  bool shared_memory = false, have_url = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--shared_memory") == 0 && !shared_memory) {
      shared_memory = true;
    } else if (argv[i][0] != '-' && !have_url) {
      url = argv[i];
      have_url = true;
    } else {
      std::fprintf(stderr, "usage: %s [URL] [--shared_memory]   (default 127.0.0.1:8001)\n",
                   argv[0]);
      return 2;
    }
  }
  return Run(url, shared_memory);
}
