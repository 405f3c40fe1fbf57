// Client system shared memory (Triton's extension): a client on the same host
// puts tensors in a POSIX shared-memory object, registers a window of it as a
// named region, and sends references instead of bytes.
//
// The server never maps a client's object. A mapping would turn a region its
// owner truncates into SIGBUS on the next touch, and a check of the size
// before each touch still races with the owner. Every read and write goes
// through pread / pwrite on the object's descriptor instead: a truncated
// object gives a short read (a clean error), never a signal. The one copy is
// the same one a mapping would need to take the data out of the client's
// reach while it is computed on.
//
// Regions belong to whoever registered them (`owner`: the caller's
// credentials, "" without tokens): another owner's names are unknown to a
// caller, so one client can neither read nor overwrite another's tensors
// through the server by guessing a name. The object itself is opened with the
// server's rights, which is why client shared memory is off unless the
// server runs with --allow_client_shm.
//
//   SharedMemoryManager shm(options);
//   GEMMSERVE_RETURN_IF_ERROR(shm.Register(owner, "in", "/my_object", 0, 1 << 20));
//   GEMMSERVE_ASSIGN_OR_RETURN(SharedMemoryLease lease, shm.Acquire(owner, "in"));
//   GEMMSERVE_RETURN_IF_ERROR(lease.Read(offset, size, buffer));
//   // Unregister("in") fails with UNAVAILABLE while `lease` lives.
#ifndef GEMMSERVE_SERVER_SHM_SHARED_MEMORY_MANAGER_H_
#define GEMMSERVE_SERVER_SHM_SHARED_MEMORY_MANAGER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace gemmserve {

struct SharedMemoryOptions {
  bool allow_client_shm = false;                     // --allow_client_shm
  int64_t max_registered_bytes = int64_t{16} << 30;  // --max_client_shm_bytes, all owners
  int max_regions = 1024;                            // all owners
};

inline constexpr size_t kMaxRegionNameBytes = 256;

struct SharedMemoryRegionStatus {
  std::string name;
  std::string key;
  uint64_t offset = 0;
  uint64_t byte_size = 0;
};

class SharedMemoryManager;

// A region held by a request: while any lease on it lives, unregistering it
// fails. Offsets are relative to the registered window.
class SharedMemoryLease {
 public:
  SharedMemoryLease() = default;
  SharedMemoryLease(SharedMemoryLease&& other) noexcept { *this = std::move(other); }
  SharedMemoryLease& operator=(SharedMemoryLease&& other) noexcept;
  SharedMemoryLease(const SharedMemoryLease&) = delete;
  SharedMemoryLease& operator=(const SharedMemoryLease&) = delete;
  ~SharedMemoryLease() { Release(); }

  const std::string& name() const;
  uint64_t byte_size() const;

  // INVALID_ARGUMENT when [offset, offset + size) is not inside the window,
  // or when the object is now shorter than that (its owner truncated it:
  // the request's byte sizes are wrong); `out` then holds whatever was read.
  absl::Status Read(uint64_t offset, uint64_t size, char* out) const;
  // The same checks (the object's size first); never extends the object
  // unless its owner truncates it between the check and the write.
  absl::Status Write(uint64_t offset, absl::string_view data) const;

 private:
  friend class SharedMemoryManager;
  struct Region;
  explicit SharedMemoryLease(std::shared_ptr<Region> region);
  void Release();
  // INVALID_ARGUMENT unless [offset, offset + size) is inside the region.
  absl::Status CheckWindow(uint64_t offset, uint64_t size) const;
  // The region's object is shorter than registered.
  absl::Status Truncated() const;
  std::shared_ptr<Region> region_;
};

class SharedMemoryManager {
 public:
  explicit SharedMemoryManager(SharedMemoryOptions options) : options_(options) {}
  ~SharedMemoryManager();

  bool enabled() const { return options_.allow_client_shm; }
  // PERMISSION_DENIED naming --allow_client_shm when it is off.
  absl::Status CheckEnabled() const;

  // PERMISSION_DENIED when client shared memory is off. INVALID_ARGUMENT for
  // a name that is empty, over kMaxRegionNameBytes or holds control
  // characters; a key that is not "/NAME" (one leading slash, no other, at
  // most 255 bytes); a zero byte_size; a window past the object's end;
  // an object that is not a regular shared-memory file. NOT_FOUND when no
  // object has the key. ALREADY_EXISTS when the owner has the name already.
  // RESOURCE_EXHAUSTED over max_registered_bytes or max_regions.
  absl::Status Register(absl::string_view owner, absl::string_view name, absl::string_view key,
                        uint64_t offset, uint64_t byte_size);
  // One region ("": every region of the owner). NOT_FOUND for an unknown
  // name; UNAVAILABLE ("retry once its requests are answered") for a region
  // a request holds: it stays registered (with "", the others go).
  absl::Status Unregister(absl::string_view owner, absl::string_view name);
  // One region ("": all of the owner's, by name). NOT_FOUND for an unknown name.
  absl::StatusOr<std::vector<SharedMemoryRegionStatus>> Status(absl::string_view owner,
                                                               absl::string_view name) const;
  // PERMISSION_DENIED when off; INVALID_ARGUMENT for an unknown name (a
  // request naming a region that is not the caller's is a bad request).
  absl::StatusOr<SharedMemoryLease> Acquire(absl::string_view owner, absl::string_view name) const;

  int64_t registered_bytes() const;

 private:
  using Key = std::pair<std::string, std::string>;  // owner, name
  SharedMemoryOptions options_;
  mutable absl::Mutex mu_;
  std::map<Key, std::shared_ptr<SharedMemoryLease::Region>> regions_ ABSL_GUARDED_BY(mu_);
  int64_t registered_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_SHM_SHARED_MEMORY_MANAGER_H_
