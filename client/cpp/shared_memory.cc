#include "client/cpp/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gemmserve::client {
namespace {

bool ValidKey(absl::string_view key) {
  return key.size() >= 2 && key.size() <= 255 && key[0] == '/' &&
         key.find('/', 1) == absl::string_view::npos;
}

absl::Status Errno(absl::string_view what, int error) {
  const std::string message = absl::StrCat(what, ": ", std::strerror(error));
  return error == EEXIST ? absl::AlreadyExistsError(message) : absl::InternalError(message);
}

}  // namespace

absl::StatusOr<SharedMemoryRegion> SharedMemoryRegion::Create(std::string key, int64_t byte_size) {
  if (!ValidKey(key)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory key '", key, "' is not '/NAME' (NAME without '/')"));
  }
  if (byte_size <= 0) {
    return absl::InvalidArgumentError("a shared memory region needs a positive byte size");
  }
  const int fd = ::shm_open(key.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return Errno(absl::StrCat("shm_open ", key), errno);
  auto fail = [&](absl::string_view what) {
    const int error = errno;
    ::close(fd);
    ::shm_unlink(key.c_str());
    return Errno(what, error);
  };
  if (::ftruncate(fd, static_cast<off_t>(byte_size)) != 0) return fail("ftruncate");
  void* data =
      ::mmap(nullptr, static_cast<size_t>(byte_size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) return fail("mmap");
  return SharedMemoryRegion(std::move(key), fd, static_cast<char*>(data), byte_size);
}

SharedMemoryRegion::SharedMemoryRegion(SharedMemoryRegion&& other) noexcept
    : key_(std::move(other.key_)),
      fd_(std::exchange(other.fd_, -1)),
      data_(std::exchange(other.data_, nullptr)),
      byte_size_(std::exchange(other.byte_size_, 0)),
      linked_(std::exchange(other.linked_, false)) {}

SharedMemoryRegion& SharedMemoryRegion::operator=(SharedMemoryRegion&& other) noexcept {
  if (this != &other) {
    Release();
    key_ = std::move(other.key_);
    fd_ = std::exchange(other.fd_, -1);
    data_ = std::exchange(other.data_, nullptr);
    byte_size_ = std::exchange(other.byte_size_, 0);
    linked_ = std::exchange(other.linked_, false);
  }
  return *this;
}

SharedMemoryRegion::~SharedMemoryRegion() { Release(); }

void SharedMemoryRegion::Release() {
  if (data_ != nullptr) ::munmap(data_, static_cast<size_t>(byte_size_));
  if (fd_ >= 0) ::close(fd_);
  Unlink();
  data_ = nullptr;
  fd_ = -1;
}

void SharedMemoryRegion::Unlink() {
  if (linked_ && !key_.empty()) ::shm_unlink(key_.c_str());
  linked_ = false;
}

absl::Status SharedMemoryRegion::CheckWindow(int64_t offset, int64_t length) const {
  if (offset < 0 || length < 0 || offset > byte_size_ || length > byte_size_ - offset) {
    return absl::OutOfRangeError(absl::StrCat("bytes [", offset, ", ", offset, " + ", length,
                                              ") are not inside region ", key_, " of ", byte_size_,
                                              " bytes"));
  }
  return absl::OkStatus();
}

absl::Status SharedMemoryRegion::Write(int64_t offset, absl::string_view bytes) {
  if (absl::Status s = CheckWindow(offset, static_cast<int64_t>(bytes.size())); !s.ok()) return s;
  if (!bytes.empty()) std::memcpy(data_ + offset, bytes.data(), bytes.size());
  return absl::OkStatus();
}

absl::StatusOr<std::string> SharedMemoryRegion::Read(int64_t offset, int64_t length) const {
  if (absl::Status s = CheckWindow(offset, length); !s.ok()) return s;
  return std::string(data_ + offset, static_cast<size_t>(length));
}

}  // namespace gemmserve::client
