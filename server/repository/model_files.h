// ModelFiles: where the files of one model come from, as the loader reads
// them. Either a model directory of the repository on disk, or the files a
// RepositoryModelLoad request uploaded, kept in memory (nothing is written to
// disk, so nothing is left behind by a load that fails or a crash).
//
// Every path is relative (to the model directory, or to a version directory
// inside it) and is checked before it is used:
//   - it must stay inside that directory once every symbolic link is
//     resolved (a link to a file or directory elsewhere is refused), and the
//     model and version directories themselves must stay inside the
//     repository;
//   - it must be a regular file (a FIFO or a device is refused, and opening
//     one never blocks);
//   - its size is known before anything is allocated for its contents.
// Messages name the path as given, relative to the model directory, never an
// absolute path.
//
//   GEMMSERVE_ASSIGN_OR_RETURN(std::unique_ptr<ModelFiles> files,
//                              ModelFiles::InDirectory("/models", "moe"));
//   GEMMSERVE_ASSIGN_OR_RETURN(std::unique_ptr<ModelFile> f, files->Open("1", "model.onnx"));
#ifndef GEMMSERVE_SERVER_REPOSITORY_MODEL_FILES_H_
#define GEMMSERVE_SERVER_REPOSITORY_MODEL_FILES_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace google::protobuf {
class MessageLite;
}  // namespace google::protobuf

namespace gemmserve {

class ModelFile {
 public:
  virtual ~ModelFile() = default;
  virtual int64_t size() const = 0;
  // Copies [offset, offset + length) into `dst`; INVALID_ARGUMENT outside
  // the file or when it cannot be read (it changed under us, say).
  virtual absl::Status Read(int64_t offset, int64_t length, void* dst) const = 0;
  // Parses the whole file as `message` (binary protobuf, up to 2 GiB).
  virtual bool ParseInto(google::protobuf::MessageLite* message) const = 0;
};

class ModelFiles {
 public:
  virtual ~ModelFiles() = default;

  // The model directory `root`/`name`. NOT_FOUND when it is not a directory
  // inside the repository.
  static absl::StatusOr<std::unique_ptr<ModelFiles>> InDirectory(const std::string& root,
                                                                 const std::string& name);
  // Uploaded files: path inside the model directory -> contents. Each path
  // is checked as a relative path of plain components (INVALID_ARGUMENT).
  static absl::StatusOr<std::unique_ptr<ModelFiles>> InMemory(
      std::map<std::string, std::string> files);

  // `path` inside `dir` ("" for the model directory itself, or a version).
  // NOT_FOUND when it does not exist; INVALID_ARGUMENT when it leads out of
  // `dir` or is not a regular file.
  virtual absl::StatusOr<std::unique_ptr<ModelFile>> Open(absl::string_view dir,
                                                          absl::string_view path) const = 0;
  // True when `path` names something (a file or not) inside `dir`.
  virtual bool Exists(absl::string_view dir, absl::string_view path) const = 0;
  // The numeric version directories that hold `file`, in ascending order.
  virtual std::vector<int64_t> Versions(absl::string_view file) const = 0;
};

// A relative path of plain components: not empty, not absolute, no "." or
// ".." or empty component, at most 4096 characters.
bool IsPlainRelativePath(absl::string_view path);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_REPOSITORY_MODEL_FILES_H_
