#include "server/shm/shared_memory_manager.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gemmserve {
namespace {

using ::testing::HasSubstr;

// A POSIX shared-memory object of `size` bytes holding `fill`, unlinked at
// the end of the test.
class ShmObject {
 public:
  ShmObject(const std::string& suffix, size_t size, char fill = 0)
      : key_(absl::StrCat("/gemmserve_test_", getpid(), "_", suffix)) {
    shm_unlink(key_.c_str());
    fd_ = shm_open(key_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    EXPECT_GE(fd_, 0);
    EXPECT_EQ(ftruncate(fd_, static_cast<off_t>(size)), 0);
    const std::string bytes(size, fill);
    EXPECT_EQ(pwrite(fd_, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(size));
  }
  ~ShmObject() {
    close(fd_);
    shm_unlink(key_.c_str());
  }
  const std::string& key() const { return key_; }
  void Truncate(size_t size) { ASSERT_EQ(ftruncate(fd_, static_cast<off_t>(size)), 0); }
  std::string Bytes(size_t offset, size_t size) const {
    std::string out(size, '\0');
    EXPECT_EQ(pread(fd_, out.data(), size, static_cast<off_t>(offset)), static_cast<ssize_t>(size));
    return out;
  }

 private:
  std::string key_;
  int fd_ = -1;
};

SharedMemoryOptions On() {
  SharedMemoryOptions o;
  o.allow_client_shm = true;
  return o;
}

TEST(SharedMemoryManagerTest, OffUnlessAllowed) {
  SharedMemoryManager shm{SharedMemoryOptions{}};
  ShmObject object("off", 64);
  EXPECT_EQ(shm.Register("", "r", object.key(), 0, 64).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(shm.Acquire("", "r").status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(shm.Status("", "").status().code(), absl::StatusCode::kPermissionDenied);
}

TEST(SharedMemoryManagerTest, ReadsAndWritesTheRegisteredWindow) {
  SharedMemoryManager shm(On());
  ShmObject object("rw", 4096, 'a');
  ASSERT_TRUE(shm.Register("", "win", object.key(), 1000, 100).ok());
  EXPECT_EQ(shm.registered_bytes(), 100);
  absl::StatusOr<SharedMemoryLease> lease = shm.Acquire("", "win");
  ASSERT_TRUE(lease.ok()) << lease.status();
  ASSERT_TRUE(lease->Write(10, "hello").ok());
  EXPECT_EQ(object.Bytes(1010, 5), "hello");
  std::string out(7, '\0');
  ASSERT_TRUE(lease->Read(9, 7, out.data()).ok());
  EXPECT_EQ(out, "ahelloa");
  // The window's last byte, and one past it.
  EXPECT_TRUE(lease->Read(99, 1, out.data()).ok());
  EXPECT_EQ(lease->Read(99, 2, out.data()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(lease->Read(100, 0, out.data()).code(), absl::StatusCode::kOk);
  EXPECT_EQ(lease->Read(101, 0, out.data()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(lease->Read(~uint64_t{0}, 2, out.data()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(lease->Write(96, "hello").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(object.Bytes(1096, 4), "aaaa") << "a refused write writes nothing";
}

TEST(SharedMemoryManagerTest, TruncatedObjectIsAnErrorNotASignal) {
  SharedMemoryManager shm(On());
  ShmObject object("trunc", 8192, 'x');
  ASSERT_TRUE(shm.Register("", "t", object.key(), 4096, 4096).ok());
  absl::StatusOr<SharedMemoryLease> lease = shm.Acquire("", "t");
  ASSERT_TRUE(lease.ok());
  object.Truncate(5000);
  std::string out(4096, '\0');
  absl::Status read = lease->Read(0, 4096, out.data());
  EXPECT_EQ(read.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(read.message(), HasSubstr("truncated"));
  EXPECT_TRUE(lease->Read(0, 904, out.data()).ok()) << "what is still there reads";
  EXPECT_EQ(lease->Write(1000, "y").code(), absl::StatusCode::kInvalidArgument);
  object.Truncate(0);
  EXPECT_EQ(lease->Read(0, 1, out.data()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(lease->Write(0, "y").code(), absl::StatusCode::kInvalidArgument);
}

TEST(SharedMemoryManagerTest, RegisterChecksEveryField) {
  SharedMemoryManager shm(On());
  ShmObject object("fields", 256);
  const std::string key = object.key();
  struct Case {
    std::string name, key;
    uint64_t offset, size;
    absl::StatusCode code;
  } cases[] = {
      {"", key, 0, 1, absl::StatusCode::kInvalidArgument},
      {std::string(kMaxRegionNameBytes + 1, 'n'), key, 0, 1, absl::StatusCode::kInvalidArgument},
      {"a\nb", key, 0, 1, absl::StatusCode::kInvalidArgument},
      {"r", "", 0, 1, absl::StatusCode::kInvalidArgument},
      {"r", "/", 0, 1, absl::StatusCode::kInvalidArgument},
      {"r", "no_slash", 0, 1, absl::StatusCode::kInvalidArgument},
      {"r", "/a/b", 0, 1, absl::StatusCode::kInvalidArgument},
      {"r", "/..", 0, 1, absl::StatusCode::kInvalidArgument},
      {"r", std::string("/a\0b", 4), 0, 1, absl::StatusCode::kInvalidArgument},
      {"r", "/" + std::string(255, 'k'), 0, 1, absl::StatusCode::kInvalidArgument},
      {"r", "/gemmserve_test_never_made", 0, 1, absl::StatusCode::kNotFound},
      {"r", key, 0, 0, absl::StatusCode::kInvalidArgument},
      {"r", key, 0, 257, absl::StatusCode::kInvalidArgument},
      {"r", key, 256, 1, absl::StatusCode::kInvalidArgument},
      {"r", key, 257, 0, absl::StatusCode::kInvalidArgument},
      {"r", key, ~uint64_t{0}, 2, absl::StatusCode::kInvalidArgument},
      {"r", key, 1, ~uint64_t{0}, absl::StatusCode::kResourceExhausted},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(shm.Register("", c.name, c.key, c.offset, c.size).code(), c.code)
        << c.name.substr(0, 8) << " " << c.key.substr(0, 16) << " " << c.offset << " " << c.size;
  }
  EXPECT_EQ(shm.registered_bytes(), 0);
  EXPECT_TRUE(shm.Register("", "r", key, 0, 256).ok());
  EXPECT_EQ(shm.Register("", "r", key, 0, 1).code(), absl::StatusCode::kAlreadyExists);
}

TEST(SharedMemoryManagerTest, CapsRegisteredBytesAndRegions) {
  SharedMemoryOptions options = On();
  options.max_registered_bytes = 1000;
  options.max_regions = 3;
  SharedMemoryManager shm(options);
  ShmObject object("cap", 1000);
  ASSERT_TRUE(shm.Register("", "a", object.key(), 0, 600).ok());
  absl::Status over = shm.Register("", "b", object.key(), 0, 401);
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(over.message(), HasSubstr("--max_client_shm_bytes"));
  EXPECT_TRUE(shm.Register("", "b", object.key(), 0, 400).ok());
  EXPECT_TRUE(shm.Unregister("", "b").ok());
  EXPECT_TRUE(shm.Register("", "b", object.key(), 0, 200).ok());
  EXPECT_TRUE(shm.Register("", "c", object.key(), 0, 100).ok());
  EXPECT_EQ(shm.Register("", "d", object.key(), 0, 1).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(shm.registered_bytes(), 900);
  EXPECT_TRUE(shm.Unregister("", "").ok());
  EXPECT_EQ(shm.registered_bytes(), 0);
}

TEST(SharedMemoryManagerTest, OwnersDoNotSeeEachOthersRegions) {
  SharedMemoryManager shm(On());
  ShmObject object("owners", 64, 's');
  ASSERT_TRUE(shm.Register("alice", "in", object.key(), 0, 64).ok());
  EXPECT_EQ(shm.Acquire("bob", "in").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(shm.Unregister("bob", "in").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(shm.Status("bob", "in").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(shm.Status("bob", "")->empty());
  EXPECT_TRUE(shm.Unregister("bob", "").ok());
  // Bob's own "in" is a region of its own.
  ASSERT_TRUE(shm.Register("bob", "in", object.key(), 8, 8).ok());
  absl::StatusOr<std::vector<SharedMemoryRegionStatus>> alice = shm.Status("alice", "");
  ASSERT_TRUE(alice.ok());
  ASSERT_EQ(alice->size(), 1u);
  EXPECT_EQ((*alice)[0].byte_size, 64u);
  EXPECT_EQ((*alice)[0].key, object.key());
  EXPECT_TRUE(shm.Acquire("alice", "in").ok());
}

TEST(SharedMemoryManagerTest, RegionInUseStaysRegistered) {
  SharedMemoryManager shm(On());
  ShmObject object("inuse", 64);
  ASSERT_TRUE(shm.Register("", "a", object.key(), 0, 32).ok());
  ASSERT_TRUE(shm.Register("", "b", object.key(), 32, 32).ok());
  {
    absl::StatusOr<SharedMemoryLease> lease = shm.Acquire("", "a");
    ASSERT_TRUE(lease.ok());
    SharedMemoryLease moved = *std::move(lease);
    EXPECT_EQ(shm.Unregister("", "a").code(), absl::StatusCode::kUnavailable);
    EXPECT_EQ(shm.Unregister("", "").code(), absl::StatusCode::kUnavailable);
    EXPECT_EQ(shm.Status("", "b").status().code(), absl::StatusCode::kNotFound) << "b is gone";
    EXPECT_TRUE(moved.Write(0, "still usable").ok());
  }
  EXPECT_TRUE(shm.Unregister("", "a").ok());
  EXPECT_EQ(shm.registered_bytes(), 0);
}

// Property: over random windows, offsets, sizes and truncations, a read or
// write succeeds exactly when it lies inside both the registered window and
// the object as it is now, reads return the object's bytes, and a refused
// write changes nothing; no combination crashes.
TEST(SharedMemoryManagerTest, RandomWindowsAndTruncationsAgreeWithTheModel) {
  SharedMemoryManager shm(On());
  std::mt19937_64 rng(7);
  for (int round = 0; round < 40; ++round) {
    const size_t object_size = 1 + rng() % 3000;
    ShmObject object(absl::StrCat("prop", round), object_size);
    std::string contents(object_size, '\0');
    for (char& c : contents) c = static_cast<char>(rng());
    ASSERT_EQ(shm.Unregister("", "").code(), absl::StatusCode::kOk);
    {
      // Fill through a window over the whole object.
      ASSERT_TRUE(shm.Register("", "all", object.key(), 0, object_size).ok());
      ASSERT_TRUE(shm.Acquire("", "all")->Write(0, contents).ok());
    }
    const uint64_t offset = rng() % (object_size + 2);
    const uint64_t size = rng() % (object_size + 2);
    const absl::Status registered = shm.Register("", "w", object.key(), offset, size);
    ASSERT_EQ(registered.ok(), size > 0 && offset + size <= object_size)
        << offset << " " << size << " " << object_size << " " << registered;
    if (!registered.ok()) continue;
    SharedMemoryLease lease = *shm.Acquire("", "w");
    size_t now = object_size;
    for (int op = 0; op < 30; ++op) {
      if (rng() % 8 == 0) {
        now = rng() % (object_size + 1);
        object.Truncate(now);
        contents.resize(now);
      }
      const uint64_t at = rng() % (size + 2);
      const uint64_t n = rng() % (size + 2);
      const bool inside = at + n <= size;
      const bool present = n == 0 || offset + at + n <= now;  // zero bytes need nothing
      if (rng() % 2 == 0) {
        std::string out(n, '\0');
        const absl::Status read = lease.Read(at, n, out.data());
        ASSERT_EQ(read.ok(), inside && present) << at << " " << n << " " << read;
        if (read.ok() && n > 0) {
          EXPECT_EQ(out, contents.substr(offset + at, n));
        }
      } else {
        std::string data(n, '\0');
        for (char& c : data) c = static_cast<char>(rng());
        const absl::Status wrote = lease.Write(at, data);
        ASSERT_EQ(wrote.ok(), inside && present) << at << " " << n << " " << wrote;
        if (wrote.ok() && n > 0) contents.replace(offset + at, n, data);
        ASSERT_EQ(object.Bytes(0, now), contents) << "the object holds what was written";
      }
    }
  }
}

}  // namespace
}  // namespace gemmserve
