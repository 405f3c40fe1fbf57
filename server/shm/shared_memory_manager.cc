#include "server/shm/shared_memory_manager.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <limits>

#include "absl/strings/str_cat.h"
#include "server/common/client_text.h"
#include "server/common/status_macros.h"

namespace gemmserve {

struct SharedMemoryLease::Region {
  std::string name;
  std::string key;
  uint64_t offset = 0;
  uint64_t byte_size = 0;
  int fd = -1;
  std::atomic<int> leases{0};

  ~Region() {
    if (fd >= 0) close(fd);
  }

  // The object's size now; -1 when fstat fails.
  int64_t ObjectSize() const {
    struct stat st;
    if (fstat(fd, &st) != 0) return -1;
    return static_cast<int64_t>(st.st_size);
  }
};

namespace {

constexpr size_t kMaxKeyBytes = 255;  // NAME_MAX of /dev/shm

absl::Status PermissionDenied() {
  return absl::PermissionDeniedError(
      "client shared memory is off; start the server with --allow_client_shm");
}

absl::Status CheckName(absl::string_view name) {
  if (name.empty()) return absl::InvalidArgumentError("shared memory region name is empty");
  if (name.size() > kMaxRegionNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat("shared memory region name '", ClientText(name),
                                                   "' is over ", kMaxRegionNameBytes, " bytes"));
  }
  for (const char c : name) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shared memory region name '", ClientText(name), "' holds control characters"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckKey(absl::string_view key) {
  const bool ok = key.size() >= 2 && key.size() <= kMaxKeyBytes && key[0] == '/' &&
                  key.find('/', 1) == absl::string_view::npos &&
                  key.find('\0') == absl::string_view::npos && key != "/." && key != "/..";
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory key '", ClientText(key),
                     "' is not a POSIX shared-memory name: '/' then 1 to 254 bytes without '/'"));
  }
  return absl::OkStatus();
}

// [offset, offset + size) inside [0, limit), without overflow.
bool Inside(uint64_t offset, uint64_t size, uint64_t limit) {
  return offset <= limit && size <= limit - offset;
}

}  // namespace

SharedMemoryLease::SharedMemoryLease(std::shared_ptr<Region> region) : region_(std::move(region)) {
  region_->leases.fetch_add(1, std::memory_order_acq_rel);
}

SharedMemoryLease& SharedMemoryLease::operator=(SharedMemoryLease&& other) noexcept {
  if (this != &other) {
    Release();
    region_ = std::move(other.region_);
  }
  return *this;
}

void SharedMemoryLease::Release() {
  if (region_ == nullptr) return;
  region_->leases.fetch_sub(1, std::memory_order_acq_rel);
  region_.reset();
}

const std::string& SharedMemoryLease::name() const { return region_->name; }
uint64_t SharedMemoryLease::byte_size() const { return region_->byte_size; }

absl::Status SharedMemoryLease::CheckWindow(uint64_t offset, uint64_t size) const {
  const Region& r = *region_;
  if (Inside(offset, size, r.byte_size)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("shared memory region '", ClientText(r.name),
                                                 "' holds ", r.byte_size, " bytes; offset ", offset,
                                                 " and byte size ", size, " pass its end"));
}

absl::Status SharedMemoryLease::Truncated() const {
  return absl::InvalidArgumentError(
      absl::StrCat("shared memory region '", ClientText(region_->name),
                   "' is shorter than registered (its owner truncated the object); register it "
                   "again"));
}

absl::Status SharedMemoryLease::Read(uint64_t offset, uint64_t size, char* out) const {
  const Region& r = *region_;
  GEMMSERVE_RETURN_IF_ERROR(CheckWindow(offset, size));
  uint64_t done = 0;
  while (done < size) {
    const uint64_t chunk = std::min<uint64_t>(size - done, uint64_t{1} << 30);
    const ssize_t n = pread(r.fd, out + done, chunk, static_cast<off_t>(r.offset + offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Truncated();
    done += static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

absl::Status SharedMemoryLease::Write(uint64_t offset, absl::string_view data) const {
  const Region& r = *region_;
  GEMMSERVE_RETURN_IF_ERROR(CheckWindow(offset, data.size()));
  if (data.empty()) return absl::OkStatus();
  const int64_t now = r.ObjectSize();
  if (now < 0 || static_cast<uint64_t>(now) < r.offset + offset + data.size()) return Truncated();
  uint64_t done = 0;
  while (done < data.size()) {
    const uint64_t chunk = std::min<uint64_t>(data.size() - done, uint64_t{1} << 30);
    const ssize_t n =
        pwrite(r.fd, data.data() + done, chunk, static_cast<off_t>(r.offset + offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot write shared memory region '", ClientText(r.name), "'"));
    }
    done += static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

SharedMemoryManager::~SharedMemoryManager() = default;

absl::Status SharedMemoryManager::CheckEnabled() const {
  return enabled() ? absl::OkStatus() : PermissionDenied();
}

absl::Status SharedMemoryManager::Register(absl::string_view owner, absl::string_view name,
                                           absl::string_view key, uint64_t offset,
                                           uint64_t byte_size) {
  if (!enabled()) return PermissionDenied();
  if (absl::Status s = CheckName(name); !s.ok()) return s;
  if (absl::Status s = CheckKey(key); !s.ok()) return s;
  if (byte_size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory region '", ClientText(name), "': byte_size must be positive"));
  }
  if (byte_size > static_cast<uint64_t>(options_.max_registered_bytes)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("shared memory region '", ClientText(name), "' of ", byte_size,
                     " bytes is over the server's cap of ", options_.max_registered_bytes,
                     " registered bytes (raise it with --max_client_shm_bytes)"));
  }
  {
    absl::MutexLock lock(&mu_);
    if (regions_.count({std::string(owner), std::string(name)}) > 0) {
      return absl::AlreadyExistsError(
          absl::StrCat("shared memory region '", ClientText(name), "' is registered already"));
    }
  }
  const std::string key_string(key);
  const int fd = shm_open(key_string.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0);
  if (fd < 0) {
    const int error = errno;
    if (error == ENOENT) {
      return absl::NotFoundError(
          absl::StrCat("no shared memory object '", ClientText(key), "' to register"));
    }
    return absl::InvalidArgumentError(absl::StrCat("cannot open shared memory object '",
                                                   ClientText(key), "' for reading and writing"));
  }
  auto region = std::make_shared<SharedMemoryLease::Region>();
  region->fd = fd;  // closed by the region from here on
  region->name = std::string(name);
  region->key = key_string;
  region->offset = offset;
  region->byte_size = byte_size;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory object '", ClientText(key), "' is not a regular object"));
  }
  const uint64_t object_size = static_cast<uint64_t>(st.st_size);
  if (!Inside(offset, byte_size, object_size) ||
      offset + byte_size > static_cast<uint64_t>(std::numeric_limits<off_t>::max())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared memory region '", ClientText(name), "': offset ", offset, " and byte_size ",
        byte_size, " pass the end of object '", ClientText(key), "' (", object_size, " bytes)"));
  }
  absl::MutexLock lock(&mu_);
  Key map_key{std::string(owner), std::string(name)};
  if (regions_.count(map_key) > 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("shared memory region '", ClientText(name), "' is registered already"));
  }
  if (static_cast<int>(regions_.size()) >= options_.max_regions) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the server holds ", regions_.size(),
                     " shared memory regions, its cap (each holds a descriptor: the cap "
                     "follows the descriptor limit, ulimit -n)"));
  }
  if (static_cast<int64_t>(byte_size) > options_.max_registered_bytes - registered_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "registering ", byte_size, " more bytes of shared memory would pass the server's cap of ",
        options_.max_registered_bytes, " (", registered_bytes_,
        " registered; raise it with --max_client_shm_bytes)"));
  }
  registered_bytes_ += static_cast<int64_t>(byte_size);
  regions_.emplace(std::move(map_key), std::move(region));
  return absl::OkStatus();
}

absl::Status SharedMemoryManager::Unregister(absl::string_view owner, absl::string_view name) {
  if (!enabled()) return PermissionDenied();
  absl::MutexLock lock(&mu_);
  auto drop = [&](auto it) {
    registered_bytes_ -= static_cast<int64_t>(it->second->byte_size);
    return regions_.erase(it);
  };
  if (!name.empty()) {
    auto it = regions_.find({std::string(owner), std::string(name)});
    if (it == regions_.end()) {
      return absl::NotFoundError(
          absl::StrCat("no shared memory region '", ClientText(name), "' to unregister"));
    }
    if (it->second->leases.load(std::memory_order_acquire) > 0) {
      return absl::UnavailableError(
          absl::StrCat("shared memory region '", ClientText(name),
                       "' is in use by a request; unregister it once its requests are answered"));
    }
    drop(it);
    return absl::OkStatus();
  }
  int in_use = 0;
  for (auto it = regions_.lower_bound({std::string(owner), ""});
       it != regions_.end() && it->first.first == owner;) {
    if (it->second->leases.load(std::memory_order_acquire) > 0) {
      ++in_use;
      ++it;
    } else {
      it = drop(it);
    }
  }
  if (in_use > 0) {
    return absl::UnavailableError(
        absl::StrCat(in_use, " shared memory regions are in use by requests and stay registered"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<SharedMemoryRegionStatus>> SharedMemoryManager::Status(
    absl::string_view owner, absl::string_view name) const {
  if (!enabled()) return PermissionDenied();
  absl::MutexLock lock(&mu_);
  std::vector<SharedMemoryRegionStatus> out;
  auto add = [&](const SharedMemoryLease::Region& r) {
    out.push_back({r.name, r.key, r.offset, r.byte_size});
  };
  if (!name.empty()) {
    auto it = regions_.find({std::string(owner), std::string(name)});
    if (it == regions_.end()) {
      return absl::NotFoundError(absl::StrCat("no shared memory region '", ClientText(name), "'"));
    }
    add(*it->second);
    return out;
  }
  for (auto it = regions_.lower_bound({std::string(owner), ""});
       it != regions_.end() && it->first.first == owner; ++it) {
    add(*it->second);
  }
  return out;
}

absl::StatusOr<SharedMemoryLease> SharedMemoryManager::Acquire(absl::string_view owner,
                                                               absl::string_view name) const {
  if (!enabled()) return PermissionDenied();
  absl::MutexLock lock(&mu_);
  auto it = regions_.find({std::string(owner), std::string(name)});
  if (it == regions_.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown shared memory region '", ClientText(name), "'"));
  }
  // Taken under mu_: Unregister cannot see zero leases while one is made.
  return SharedMemoryLease(it->second);
}

int64_t SharedMemoryManager::registered_bytes() const {
  absl::MutexLock lock(&mu_);
  return registered_bytes_;
}

}  // namespace gemmserve
