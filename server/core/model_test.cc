// The minimal model of model.h's banner, compiled and served as written there:
// what a new model kind needs, and that it is enough.
#include "server/core/model.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"
#include "server/core/inference_engine.h"

namespace gemmserve {
namespace {

class Doubling final : public Model {
 public:
  Doubling() {
    metadata_.name = "doubling";
    metadata_.versions = {"1"};
    metadata_.inputs = {{"x", {DataType::kFP32}, {}, /*variable_rank=*/true}};
    metadata_.outputs = {{"y", {DataType::kFP32}, {}, /*variable_rank=*/true}};
  }
  const ModelMetadata& metadata() const override { return metadata_; }
  absl::StatusOr<std::unique_ptr<PreparedInference>> Prepare(
      const BoundInputs& inputs) const override {
    return std::make_unique<Prepared>(inputs[0]);  // a shape check would go here
  }
  std::vector<InferOutputs> RunBatch(absl::Span<PreparedInference* const> batch,
                                     int) const override {
    std::vector<InferOutputs> out;
    for (PreparedInference* p : batch) {
      const BoundInput& x = static_cast<Prepared*>(p)->x;
      absl::StatusOr<Tensor> y = x.Materialize();
      if (!y.ok()) {
        out.push_back(y.status());
        continue;
      }
      for (int64_t i = 0; i < y->num_elements(); ++i) y->data<float>()[i] *= 2;
      std::vector<NamedTensor> outputs;
      outputs.push_back({"y", *std::move(y)});
      out.push_back(std::move(outputs));
    }
    return out;
  }

 private:
  struct Prepared final : PreparedInference {
    explicit Prepared(BoundInput x) : x(std::move(x)) {}
    int64_t output_bytes() const override { return x.byte_size; }
    std::vector<std::pair<std::string, Shape>> output_shapes() const override {
      return {{"y", x.shape}};
    }
    int64_t flops() const override { return x.byte_size / 4; }
    int64_t rows() const override { return 1; }
    int64_t held_bytes(int) const override { return x.byte_size; }  // the copy
    BoundInput x;
  };
  ModelMetadata metadata_;
};

TEST(ModelTest, TheMinimalModelOfTheHeaderIsServed) {
  InferenceEngine engine(EngineOptions{});
  engine.Install(std::make_unique<Doubling>(), BatchingOptions{});
  const float x[] = {1.5f, -2, 3};
  const Shape shape = {3};
  InferRequestView view;
  view.model_name = "doubling";
  view.inputs.push_back({"x", "FP32", shape, ContentsKind::kRaw, x, sizeof x});
  absl::Notification done;
  std::vector<float> y;
  ASSERT_TRUE(engine
                  .Submit(std::move(view), nullptr,
                          [&](absl::StatusOr<InferResult> r) {
                            ASSERT_TRUE(r.ok()) << r.status();
                            const Tensor& t = r->outputs.at(0).tensor;
                            y.assign(t.data<float>(), t.data<float>() + t.num_elements());
                            done.Notify();
                          })
                  .ok());
  done.WaitForNotification();
  EXPECT_EQ(y, (std::vector<float>{3, -4, 6}));
}

}  // namespace
}  // namespace gemmserve
