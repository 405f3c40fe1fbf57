// Test helpers for the engine's tests (core_test, models_test): a request
// that owns what its InferRequestView points to, and the one completion of
// a submitted request.
//
//   Request r("matmul");
//   r.Add<float>("A", "FP32", {1, 1}, {2}).Add<float>("B", "FP32", {1, 1}, {3});
//   Completion c;
//   ASSERT_TRUE(engine.Submit(r.View(), NeverCancelled(), c.Callback()).ok());
//   EXPECT_TRUE(c.Wait().ok());
#ifndef GEMMSERVE_SERVER_CORE_ENGINE_TESTING_H_
#define GEMMSERVE_SERVER_CORE_ENGINE_TESTING_H_

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "server/core/inference_engine.h"
#include "server/core/inference_request.h"
#include "server/tensor/shape.h"

namespace gemmserve {
namespace engine_testing {

// Owns the names, shapes and bytes an InferRequestView points to; must
// outlive the engine call's `done`.
class Request {
 public:
  explicit Request(std::string model, std::string version = "")
      : model_(std::move(model)), version_(std::move(version)) {}

  template <typename T>
  Request& Add(const std::string& name, const std::string& datatype, Shape shape,
               const std::vector<T>& values) {
    std::string bytes(values.size() * sizeof(T), '\0');
    if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
    return AddRaw(name, datatype, std::move(shape), std::move(bytes));
  }
  Request& AddRaw(const std::string& name, const std::string& datatype, Shape shape,
                  std::string bytes) {
    auto in = std::make_unique<Input>();
    in->name = name;
    in->datatype = datatype;
    in->shape = std::move(shape);
    in->bytes = std::move(bytes);
    inputs_.push_back(std::move(in));
    return *this;
  }
  Request& SetId(std::string id) {
    id_ = std::move(id);
    return *this;
  }
  Request& Want(const std::string& output) {
    outputs_.push_back(std::make_unique<std::string>(output));
    return *this;
  }

  InferRequestView View() const {
    InferRequestView view;
    view.model_name = model_;
    view.model_version = version_;
    view.id = id_;
    for (const auto& in : inputs_) {
      InputTensorView t;
      t.name = in->name;
      t.datatype = in->datatype;
      t.shape = in->shape;
      t.contents = ContentsKind::kRaw;
      t.data = in->bytes.data();
      t.count = static_cast<int64_t>(in->bytes.size());
      view.inputs.push_back(t);
    }
    for (const auto& o : outputs_) view.requested_outputs.push_back(*o);
    return view;
  }

 private:
  struct Input {
    std::string name, datatype;
    Shape shape;
    std::string bytes;
  };
  std::string model_, version_, id_;
  std::vector<std::unique_ptr<Input>> inputs_;
  std::vector<std::unique_ptr<std::string>> outputs_;
};

// Collects the one call of `done` and counts calls.
class Completion {
 public:
  InferenceEngine::DoneCallback Callback() {
    return [this](absl::StatusOr<InferResult> result) {
      {
        absl::MutexLock lock(&mu_);
        ++calls_;
        result_ = std::move(result);
      }
      done_.Notify();  // a second call would abort here: Notify twice is a bug
    };
  }
  absl::StatusOr<InferResult>& Wait() {
    done_.WaitForNotification();
    absl::MutexLock lock(&mu_);
    return *result_;
  }
  int calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

 private:
  absl::Mutex mu_;
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<absl::StatusOr<InferResult>> result_ ABSL_GUARDED_BY(mu_);
  absl::Notification done_;
};

}  // namespace engine_testing
}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_CORE_ENGINE_TESTING_H_
