#include "server/repository/model_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <google/protobuf/message_lite.h>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "server/common/client_text.h"

namespace gemmserve {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxPathLength = 4096;

// `dir`/`path` as a message shows it: relative to the model directory.
std::string Shown(absl::string_view dir, absl::string_view path) {
  return ClientText(dir.empty() ? std::string(path) : absl::StrCat(dir, "/", path), 256);
}

// The components of a relative path with "." dropped; nullopt for an
// absolute path, a ".." or an empty path.
std::optional<std::vector<std::string>> Components(absl::string_view path) {
  if (path.empty() || path.size() > kMaxPathLength || path.front() == '/' ||
      path.find('\0') != absl::string_view::npos) {
    return std::nullopt;
  }
  std::vector<std::string> parts;
  for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    if (part == "..") return std::nullopt;
    if (part != ".") parts.emplace_back(part);
  }
  if (parts.empty()) return std::nullopt;
  return parts;
}

// A version directory's name as the repository writes it: a decimal number
// without leading zeros.
std::optional<int64_t> VersionNumber(absl::string_view name) {
  int64_t v;
  if (!absl::SimpleAtoi(name, &v) || v < 0 || absl::StrCat(v) != name) return std::nullopt;
  return v;
}

// `inner` is `outer` itself (when allowed) or lies below it; both canonical.
bool Inside(const fs::path& inner, const fs::path& outer, bool allow_equal) {
  const std::string in = inner.string();
  std::string out = outer.string();
  if (in == out) return allow_equal;
  if (out.empty() || out.back() != '/') out += '/';
  return in.compare(0, out.size(), out) == 0;
}

absl::Status Outside(absl::string_view shown) {
  return absl::InvalidArgumentError(
      absl::StrCat("'", shown,
                   "' leads outside its directory (an absolute path, '..' or a symbolic link "
                   "to elsewhere); model files must lie inside their version directory"));
}

// ------------------------------------------------------------------ disk

class FdFile final : public ModelFile {
 public:
  FdFile(int fd, int64_t size, std::string shown)
      : fd_(fd), size_(size), shown_(std::move(shown)) {}
  ~FdFile() override { ::close(fd_); }
  int64_t size() const override { return size_; }

  absl::Status Read(int64_t offset, int64_t length, void* dst) const override {
    if (offset < 0 || length < 0 || offset > size_ || length > size_ - offset) {
      return absl::InvalidArgumentError(absl::StrCat("'", shown_, "': range [", offset, ", +",
                                                     length, ") is beyond its ", size_, " bytes"));
    }
    auto* out = static_cast<char*>(dst);
    for (int64_t done = 0; done < length;) {
      const size_t chunk = static_cast<size_t>(std::min<int64_t>(length - done, int64_t{1} << 30));
      const ssize_t got = ::pread(fd_, out + done, chunk, offset + done);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("'", shown_, "': reading failed (was it changed while loading?)"));
      }
      done += got;
    }
    return absl::OkStatus();
  }

  bool ParseInto(google::protobuf::MessageLite* message) const override {
    if (::lseek(fd_, 0, SEEK_SET) != 0) return false;
    google::protobuf::io::FileInputStream file(fd_);
    google::protobuf::io::CodedInputStream coded(&file);
    coded.SetTotalBytesLimit(INT_MAX);
    return message->ParseFromCodedStream(&coded) && coded.ConsumedEntireMessage();
  }

 private:
  const int fd_;
  const int64_t size_;
  const std::string shown_;
};

class DirectoryFiles final : public ModelFiles {
 public:
  explicit DirectoryFiles(fs::path model_dir) : model_dir_(std::move(model_dir)) {}

  absl::StatusOr<std::unique_ptr<ModelFile>> Open(absl::string_view dir,
                                                  absl::string_view path) const override {
    const std::string shown = Shown(dir, path);
    if (!Components(path) || (!dir.empty() && !Components(dir))) return Outside(shown);
    std::error_code ec;
    const fs::path base =
        fs::canonical(dir.empty() ? model_dir_ : model_dir_ / std::string(dir), ec);
    if (ec) return absl::NotFoundError(absl::StrCat("'", ClientText(dir), "' does not exist"));
    if (!Inside(base, model_dir_, /*allow_equal=*/true)) return Outside(ClientText(dir));
    const fs::path target = fs::canonical(base / std::string(path), ec);
    if (ec) return absl::NotFoundError(absl::StrCat("'", shown, "' does not exist"));
    if (!Inside(target, base, /*allow_equal=*/false)) return Outside(shown);
    // O_NONBLOCK: opening a FIFO must not wait for a writer; O_NOFOLLOW: the
    // last component was resolved above and must not have become a link.
    const int fd =
        ::open(target.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return absl::NotFoundError(absl::StrCat("'", shown, "' cannot be opened"));
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      return absl::InvalidArgumentError(absl::StrCat(
          "'", shown, "' is not a regular file (a FIFO, device or directory is refused)"));
    }
    return std::unique_ptr<ModelFile>(new FdFile(fd, static_cast<int64_t>(st.st_size), shown));
  }

  bool Exists(absl::string_view dir, absl::string_view path) const override {
    std::error_code ec;
    return fs::exists(model_dir_ / std::string(dir) / std::string(path), ec);
  }

  std::vector<int64_t> Versions(absl::string_view file) const override {
    std::vector<int64_t> out;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(model_dir_, ec)) {
      const std::optional<int64_t> v = VersionNumber(entry.path().filename().string());
      if (v && entry.is_directory(ec) && Exists(entry.path().filename().string(), file)) {
        out.push_back(*v);
      }
    }
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  const fs::path model_dir_;  // canonical
};

// ---------------------------------------------------------------- memory

class MemoryFile final : public ModelFile {
 public:
  explicit MemoryFile(const std::string& bytes) : bytes_(bytes) {}
  int64_t size() const override { return static_cast<int64_t>(bytes_.size()); }
  absl::Status Read(int64_t offset, int64_t length, void* dst) const override {
    if (offset < 0 || length < 0 || offset > size() || length > size() - offset) {
      return absl::InvalidArgumentError(absl::StrCat("range [", offset, ", +", length,
                                                     ") is beyond the file's ", size(), " bytes"));
    }
    if (length > 0) std::memcpy(dst, bytes_.data() + offset, static_cast<size_t>(length));
    return absl::OkStatus();
  }
  bool ParseInto(google::protobuf::MessageLite* message) const override {
    return bytes_.size() <= INT_MAX &&
           message->ParseFromArray(bytes_.data(), static_cast<int>(bytes_.size()));
  }

 private:
  const std::string& bytes_;
};

class MemoryFiles final : public ModelFiles {
 public:
  explicit MemoryFiles(std::map<std::string, std::string> files) : files_(std::move(files)) {}

  absl::StatusOr<std::unique_ptr<ModelFile>> Open(absl::string_view dir,
                                                  absl::string_view path) const override {
    const std::string shown = Shown(dir, path);
    std::optional<std::string> key = Key(dir, path);
    if (!key) return Outside(shown);
    auto it = files_.find(*key);
    if (it == files_.end()) {
      return absl::NotFoundError(absl::StrCat("'", shown, "' was not uploaded"));
    }
    return std::unique_ptr<ModelFile>(new MemoryFile(it->second));
  }

  bool Exists(absl::string_view dir, absl::string_view path) const override {
    std::optional<std::string> key = Key(dir, path);
    if (!key) return false;
    auto it = files_.lower_bound(*key);
    return it != files_.end() &&
           (it->first == *key || it->first.compare(0, key->size() + 1, *key + "/") == 0);
  }

  std::vector<int64_t> Versions(absl::string_view file) const override {
    std::vector<int64_t> out;  // files_ is a map: each path once
    for (const auto& [path, bytes] : files_) {
      const size_t slash = path.find('/');
      if (slash == std::string::npos || absl::string_view(path).substr(slash + 1) != file) continue;
      const std::optional<int64_t> v = VersionNumber(absl::string_view(path).substr(0, slash));
      if (v) out.push_back(*v);
    }
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  static std::optional<std::string> Key(absl::string_view dir, absl::string_view path) {
    std::optional<std::vector<std::string>> parts = Components(path);
    if (!parts) return std::nullopt;
    if (!dir.empty()) {
      std::optional<std::vector<std::string>> head = Components(dir);
      if (!head) return std::nullopt;
      parts->insert(parts->begin(), head->begin(), head->end());
    }
    return absl::StrJoin(*parts, "/");
  }

  const std::map<std::string, std::string> files_;
};

}  // namespace

bool IsPlainRelativePath(absl::string_view path) {
  if (path.empty() || path.size() > kMaxPathLength || path.front() == '/') return false;
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part.empty() || part == "." || part == ".." || part.find('\0') != absl::string_view::npos) {
      return false;
    }
  }
  return true;
}

absl::StatusOr<std::unique_ptr<ModelFiles>> ModelFiles::InDirectory(const std::string& root,
                                                                    const std::string& name) {
  std::error_code ec;
  const fs::path canonical_root = fs::canonical(root, ec);
  if (ec) return absl::NotFoundError("the model repository directory cannot be read");
  const fs::path dir = fs::canonical(canonical_root / name, ec);
  if (ec || !fs::is_directory(dir, ec)) {
    return absl::NotFoundError(
        absl::StrCat("no model '", ClientText(name), "' in the model repository"));
  }
  if (!Inside(dir, canonical_root, /*allow_equal=*/false)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model directory '", ClientText(name),
                     "' leads outside the model repository (a symbolic link to elsewhere)"));
  }
  return std::unique_ptr<ModelFiles>(new DirectoryFiles(dir));
}

absl::StatusOr<std::unique_ptr<ModelFiles>> ModelFiles::InMemory(
    std::map<std::string, std::string> files) {
  for (const auto& [path, bytes] : files) {
    if (!IsPlainRelativePath(path)) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter 'file:", ClientText(path),
                       "': must be a relative path of plain components (no '.', '..' or "
                       "empty component)"));
    }
  }
  return std::unique_ptr<ModelFiles>(new MemoryFiles(std::move(files)));
}

}  // namespace gemmserve
