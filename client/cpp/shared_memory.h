// System shared memory for local C++ clients (Triton's extension): a client
// on the server's host puts tensors in a POSIX shared-memory object and sends
// only references, so large tensors cross no socket and no protobuf copy.
// The server must run with --allow_client_shm.
//
// SharedMemoryRegion creates and maps the object (and unlinks it when
// destroyed); Client::RegisterSystemSharedMemory tells the server about it;
// Client::Infer's shared-memory overload sends inputs from it and has outputs
// written to it.
//
//   GEMMSERVE_ASSIGN_OR_RETURN(SharedMemoryRegion region,
//                              SharedMemoryRegion::Create("/my_tensors", a_bytes + y_bytes));
//   GEMMSERVE_RETURN_IF_ERROR(region.Write(0, a.bytes));
//   GEMMSERVE_RETURN_IF_ERROR(client.RegisterSystemSharedMemory("tensors", region.key(),
//                                                               region.byte_size()));
//   GEMMSERVE_ASSIGN_OR_RETURN(
//       std::vector<HostTensor> out,
//       client.Infer("matmul", {b},                          // B over the socket
//                    {{{"A", "FP32", {m, k}, ""}, {"tensors", 0, a_bytes}}},
//                    {{"Y", {"tensors", a_bytes, y_bytes}}}));
//   // out[0]: "Y" with its shape and no bytes; they are in the region:
//   GEMMSERVE_ASSIGN_OR_RETURN(std::string y, region.Read(a_bytes, y_bytes));
//   GEMMSERVE_RETURN_IF_ERROR(client.UnregisterSystemSharedMemory("tensors"));
#ifndef GEMMSERVE_CLIENT_CPP_SHARED_MEMORY_H_
#define GEMMSERVE_CLIENT_CPP_SHARED_MEMORY_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/cpp/host_tensor.h"

namespace gemmserve::client {

class SharedMemoryRegion {
 public:
  // Creates the object `key` ("/NAME", NAME without '/', at most 255
  // characters), `byte_size` zero bytes, readable and writable by this user
  // only, and maps it. INVALID_ARGUMENT for a bad key or a size that is not
  // positive; ALREADY_EXISTS when the object exists; the errno otherwise.
  static absl::StatusOr<SharedMemoryRegion> Create(std::string key, int64_t byte_size);

  SharedMemoryRegion(SharedMemoryRegion&& other) noexcept;
  SharedMemoryRegion& operator=(SharedMemoryRegion&& other) noexcept;
  SharedMemoryRegion(const SharedMemoryRegion&) = delete;
  SharedMemoryRegion& operator=(const SharedMemoryRegion&) = delete;
  // Unmaps and unlinks the object. A server that has it registered keeps
  // the object it opened (its memory lives on until the region is
  // unregistered): unregister first.
  ~SharedMemoryRegion();

  // Removes the object's name now; this mapping, and the object a server
  // opened when the region was registered, stay valid. Nothing is left in
  // /dev/shm if this process is killed afterwards.
  void Unlink();

  const std::string& key() const { return key_; }
  int64_t byte_size() const { return byte_size_; }
  char* data() { return data_; }
  const char* data() const { return data_; }

  // Copies `bytes` to [offset, offset + bytes.size()). OUT_OF_RANGE when
  // that is not inside the region.
  absl::Status Write(int64_t offset, absl::string_view bytes);
  // The bytes [offset, offset + length). OUT_OF_RANGE when not inside.
  absl::StatusOr<std::string> Read(int64_t offset, int64_t length) const;

 private:
  SharedMemoryRegion(std::string key, int fd, char* data, int64_t byte_size)
      : key_(std::move(key)), fd_(fd), data_(data), byte_size_(byte_size) {}
  absl::Status CheckWindow(int64_t offset, int64_t length) const;
  void Release();

  std::string key_;
  int fd_ = -1;
  char* data_ = nullptr;
  int64_t byte_size_ = 0;
  bool linked_ = true;
};

// Where a tensor's bytes are: a window of a region registered on the server
// under `region` (its name there, not the object's key).
struct SharedMemoryWindow {
  std::string region;
  int64_t offset = 0;
  int64_t byte_size = 0;
};

// An input whose bytes are in shared memory: its name, datatype and shape
// (tensor.bytes is not sent), and the window that holds them.
struct SharedMemoryInput {
  HostTensor tensor;
  SharedMemoryWindow window;
};

// An output the server writes to shared memory instead of the response.
struct SharedMemoryOutput {
  std::string name;
  SharedMemoryWindow window;
};

}  // namespace gemmserve::client

#endif  // GEMMSERVE_CLIENT_CPP_SHARED_MEMORY_H_
