// The engine against fake models that throw or block: faults, accounting,
// refusals. The built-in models through the engine: server/models.
#include "server/core/inference_engine.h"

#include <atomic>
#include <chrono>
#include <new>
#include <stdexcept>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "server/core/overload.h"
#include "server/core/engine_testing.h"
#include "server/tensor/half.h"

namespace gemmserve {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

using engine_testing::Completion;
using engine_testing::Request;

// A model of one input "x" (any FP32 shape) whose RunBatch does what the
// test says: throw, block until released, or answer.
class FakeModel final : public Model {
 public:
  enum class Mode { kAnswer, kThrowBadAlloc, kThrowOther };
  explicit FakeModel(std::string name, std::string version = "1") {
    metadata_.name = std::move(name);
    metadata_.versions = {std::move(version)};
    metadata_.inputs = {{"x", {DataType::kFP32}, {}, /*variable_rank=*/true, false}};
    metadata_.outputs = {{"y", {DataType::kFP32}, {}, true, false}};
  }
  void set_mode(Mode mode) { mode_ = mode; }
  void set_held_bytes(int64_t bytes) { held_bytes_ = bytes; }
  // The next RunBatch waits for Release() after announcing it started.
  void BlockNextBatch() { block_ = true; }
  void WaitUntilBlocked() { started_.WaitForNotification(); }
  void Release() { release_.Notify(); }

  const ModelMetadata& metadata() const override { return metadata_; }
  absl::StatusOr<std::unique_ptr<PreparedInference>> Prepare(
      const BoundInputs& inputs) const override {
    return std::make_unique<Prepared>(inputs[0].shape, held_bytes_);
  }
  std::vector<InferOutputs> RunBatch(absl::Span<PreparedInference* const> batch,
                                     int) const override {
    if (block_.exchange(false)) {
      started_.Notify();
      release_.WaitForNotification();
    }
    if (mode_ == Mode::kThrowBadAlloc) throw std::bad_alloc();
    if (mode_ == Mode::kThrowOther) throw std::runtime_error("a fault of the model");
    std::vector<InferOutputs> out(batch.size());
    for (InferOutputs& o : out) {
      std::vector<NamedTensor> tensors;
      tensors.push_back({"y", *Tensor::Zeros(DataType::kFP32, {1})});
      o = std::move(tensors);
    }
    return out;
  }

 private:
  class Prepared final : public PreparedInference {
   public:
    Prepared(Shape shape, int64_t held) : shape_(std::move(shape)), held_(held) {}
    int64_t output_bytes() const override { return 4; }
    std::vector<std::pair<std::string, Shape>> output_shapes() const override {
      return {{"y", {1}}};
    }
    int64_t flops() const override { return shape_.empty() ? 0 : shape_[0]; }
    int64_t rows() const override { return 1; }
    int64_t held_bytes(int) const override { return held_; }

   private:
    Shape shape_;
    int64_t held_;
  };
  ModelMetadata metadata_;
  std::atomic<Mode> mode_{Mode::kAnswer};
  int64_t held_bytes_ = 16;
  mutable std::atomic<bool> block_{false};
  mutable absl::Notification started_, release_;
};

// x of `flops` elements: the fake's flops, so it picks inline (tiny) or not.
Request FakeRequest(const std::string& model, int64_t flops) {
  Request r(model);
  r.Add<float>("x", "FP32", {flops}, std::vector<float>(flops, 1.0f));
  return r;
}

class EngineFaultTest : public ::testing::Test {
 protected:
  void Install(EngineOptions options, std::optional<BatchingOptions> batching) {
    engine_ = std::make_unique<InferenceEngine>(options);
    auto model = std::make_unique<FakeModel>("fake");
    model_ = model.get();
    engine_->Install(std::move(model), batching);
  }
  std::unique_ptr<InferenceEngine> engine_;
  FakeModel* model_ = nullptr;
};

// The model throws on the caller's thread (inline), on a worker, batched or
// not: that request gets RESOURCE_EXHAUSTED (or INTERNAL for another fault),
// exactly once, nothing stays held, and the model serves the next request.
TEST_F(EngineFaultTest, AThrowingModelFailsThatRequestOnlyAndServesOn) {
  for (bool batched : {true, false}) {
    for (int64_t flops : {int64_t{1}, int64_t{1} << 20}) {  // inline, then on a worker
      SCOPED_TRACE(absl::StrCat(batched ? "batched" : "unbatched", " flops=", flops));
      Install(EngineOptions{},
              batched ? std::optional<BatchingOptions>(BatchingOptions{}) : std::nullopt);
      for (auto [mode, code] :
           {std::pair{FakeModel::Mode::kThrowBadAlloc, absl::StatusCode::kResourceExhausted},
            std::pair{FakeModel::Mode::kThrowOther, absl::StatusCode::kInternal}}) {
        model_->set_mode(mode);
        Request r = FakeRequest("fake", flops);
        Completion c;
        ASSERT_TRUE(engine_->Submit(r.View(), nullptr, c.Callback()).ok());
        EXPECT_EQ(c.Wait().status().code(), code);
        model_->set_mode(FakeModel::Mode::kAnswer);
        Completion next;
        ASSERT_TRUE(engine_->Submit(r.View(), nullptr, next.Callback()).ok());
        EXPECT_TRUE(next.Wait().ok()) << next.Wait().status();
        EXPECT_EQ(c.calls(), 1);
      }
      engine_.reset();  // joins: nothing outstanding
    }
  }
}

TEST_F(EngineFaultTest, ARequestCountedOverTheLimitIsResourceExhaustedAndNeverAccepted) {
  EngineOptions options;
  options.max_inflight_bytes = 1 << 20;
  Install(options, BatchingOptions{});
  model_->set_held_bytes(int64_t{1} << 40);
  Request r = FakeRequest("fake", 1);
  Completion c;
  absl::Status status = engine_->Submit(r.View(), nullptr, c.Callback());
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(status.message()), HasSubstr("--max_inflight_bytes"));
  EXPECT_EQ(c.calls(), 0);
  EXPECT_EQ(engine_->inflight_bytes(), 0);
}

// While a batch is held running, what is accepted is counted; a request that
// would pass the limit gets UNAVAILABLE (retry later) without its callback,
// and once the batch ends everything is released.
TEST_F(EngineFaultTest, HeldBytesAreCountedUntilAnsweredAndOverflowIsQueueFull) {
  EngineOptions options;
  options.max_inflight_bytes = 100000;
  options.inline_max_flops = 0;
  Install(options, BatchingOptions{});
  model_->set_held_bytes(40000);
  model_->BlockNextBatch();
  Request r = FakeRequest("fake", 1);
  Completion first, second, third;
  ASSERT_TRUE(engine_->Submit(r.View(), nullptr, first.Callback()).ok());
  model_->WaitUntilBlocked();
  const int64_t one = engine_->inflight_bytes();
  EXPECT_GT(one, 40000);
  ASSERT_TRUE(engine_->Submit(r.View(), nullptr, second.Callback()).ok());  // queued
  EXPECT_EQ(engine_->inflight_bytes(), 2 * one);
  absl::Status refused = engine_->Submit(r.View(), nullptr, third.Callback());
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(third.calls(), 0);
  EXPECT_EQ(engine_->inflight_bytes(), 2 * one);
  model_->Release();
  EXPECT_TRUE(first.Wait().ok());
  EXPECT_TRUE(second.Wait().ok());
  engine_.reset();
  EXPECT_EQ(third.calls(), 0);
}

// A full queue refuses without calling back; what it refused holds nothing.
TEST_F(EngineFaultTest, AFullQueueRefusesWithoutCallingBack) {
  EngineOptions options;
  options.inline_max_flops = 0;
  BatchingOptions batching;
  batching.max_queue_size = 1;
  Install(options, batching);
  model_->BlockNextBatch();
  Request r = FakeRequest("fake", 1);
  Completion running, queued, refused;
  ASSERT_TRUE(engine_->Submit(r.View(), nullptr, running.Callback()).ok());
  model_->WaitUntilBlocked();
  ASSERT_TRUE(engine_->Submit(r.View(), nullptr, queued.Callback()).ok());
  const int64_t held = engine_->inflight_bytes();
  absl::Status status = engine_->Submit(r.View(), nullptr, refused.Callback());
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(status.message()), HasSubstr("queue full"));
  EXPECT_EQ(engine_->inflight_bytes(), held);
  model_->Release();
  EXPECT_TRUE(running.Wait().ok());
  EXPECT_TRUE(queued.Wait().ok());
  engine_.reset();
  EXPECT_EQ(refused.calls(), 0);
}

// Bytes a front end reserves before it allocates them (client shared memory
// inputs) are held from Reserve on, refused as a request over the limit or a
// full server would be, and taken over by the request that holds them: never
// counted twice, and released by whoever holds them last.
TEST_F(EngineFaultTest, ReservedBytesAreHeldUntilTheRequestThatHoldsThemIsAnswered) {
  EngineOptions options;
  options.max_inflight_bytes = 100000;
  options.inline_max_flops = 0;
  Install(options, BatchingOptions{});

  auto over = engine_->Reserve(100001, "the inputs");
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(over.status().message()),
              AllOf(HasSubstr("the inputs"), HasSubstr("--max_inflight_bytes")));
  auto none = engine_->Reserve(0, "the inputs");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->bytes(), 0);
  EXPECT_EQ(engine_->inflight_bytes(), 0);

  // A reservation that no request takes is released when it goes.
  {
    auto unused = engine_->Reserve(30000, "the inputs");
    ASSERT_TRUE(unused.ok()) << unused.status();
    EXPECT_EQ(engine_->inflight_bytes(), 30000);
    InferenceEngine::Reservation moved = *std::move(unused);
    EXPECT_EQ(moved.bytes(), 30000);
    EXPECT_EQ(engine_->inflight_bytes(), 30000);
  }
  EXPECT_EQ(engine_->inflight_bytes(), 0);

  model_->BlockNextBatch();
  Request r = FakeRequest("fake", 1);
  InferRequestView view = r.View();
  view.message_bytes = 30000;  // what the front end copied, and reserved
  auto reserved = engine_->Reserve(30000, "the inputs");
  ASSERT_TRUE(reserved.ok()) << reserved.status();
  Completion first, second;
  ASSERT_TRUE(engine_->Submit(view, nullptr, first.Callback(), &*reserved).ok());
  EXPECT_EQ(reserved->bytes(), 0);  // the request holds them now
  model_->WaitUntilBlocked();
  const int64_t one = engine_->inflight_bytes();
  EXPECT_GT(one, 30000);
  // The same request without a reservation costs the same: nothing twice.
  ASSERT_TRUE(engine_->Submit(view, nullptr, second.Callback()).ok());
  EXPECT_EQ(engine_->inflight_bytes(), 2 * one);

  // No room: the queue-full refusal, and nothing held for it.
  auto full = engine_->Reserve(100000 - 2 * one + 1, "the inputs");
  EXPECT_EQ(full.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(IsQueueFull(full.status())) << full.status();
  EXPECT_EQ(engine_->inflight_bytes(), 2 * one);

  // A request refused at admission leaves its reservation with the caller.
  auto kept = engine_->Reserve(100, "the inputs");
  ASSERT_TRUE(kept.ok()) << kept.status();
  Request unknown = FakeRequest("nobody", 1);
  Completion never;
  InferRequestView unknown_view = unknown.View();
  unknown_view.message_bytes = 100;
  EXPECT_EQ(engine_->Submit(unknown_view, nullptr, never.Callback(), &*kept).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(kept->bytes(), 100);
  EXPECT_EQ(engine_->inflight_bytes(), 2 * one + 100);
  *kept = InferenceEngine::Reservation();
  EXPECT_EQ(engine_->inflight_bytes(), 2 * one);

  model_->Release();
  ASSERT_TRUE(first.Wait().ok());
  ASSERT_TRUE(second.Wait().ok());
  // Answered: each answer carries its request's bytes to the front end,
  // which holds them until it has written the answer.
  EXPECT_EQ(first.Wait()->held.bytes(), one);
  EXPECT_EQ(engine_->inflight_bytes(), 2 * one);
  first.Wait()->held.Release();
  EXPECT_EQ(engine_->inflight_bytes(), one);
  second.Wait() = absl::CancelledError("the answer was written and freed");
  EXPECT_EQ(engine_->inflight_bytes(), 0);
  engine_.reset();
  EXPECT_EQ(never.calls(), 0);
}

// Versions of one name are served each on its own: the highest when no
// version is asked, one index row each; a reload that drops a version lets
// the request computing on it finish there, while new requests for it are
// NOT_FOUND.
TEST(EngineVersionsTest, EachVersionServesOnItsOwnAndADroppedOneFinishesWhatItHolds) {
  EngineOptions options;
  options.compute_threads = 2;
  options.inline_max_flops = 0;  // every request on a worker: the test thread never blocks
  InferenceEngine engine(options);
  auto one = std::make_unique<FakeModel>("m", "1");
  FakeModel* v1 = one.get();
  std::vector<ModelVersion> versions;
  versions.push_back({std::move(one), std::nullopt});
  versions.push_back({std::make_unique<FakeModel>("m", "3"), BatchingOptions{}});
  ASSERT_TRUE(engine.InstallVersions("m", std::move(versions)).ok());
  EXPECT_THAT(engine.Versions("m"), ElementsAre("1", "3"));
  EXPECT_EQ((*engine.FindModel("m", ""))->metadata().versions.front(), "3");
  EXPECT_EQ((*engine.FindModel("m", "1"))->metadata().versions.front(), "1");
  absl::Status missing = engine.FindModel("m", "2").status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.message()), HasSubstr("it serves 1, 3"));
  std::vector<std::string> rows;
  for (const ModelStatus& s : engine.States()) rows.push_back(absl::StrCat(s.name, "/", s.version));
  EXPECT_THAT(rows, ElementsAre("m/1", "m/3"));

  v1->BlockNextBatch();
  Request on_one("m", "1");
  on_one.Add<float>("x", "FP32", {4}, std::vector<float>(4, 1.0f));
  Completion done;
  ASSERT_TRUE(engine
                  .Submit(
                      on_one.View(), [] { return false; }, done.Callback())
                  .ok());
  v1->WaitUntilBlocked();
  std::vector<ModelVersion> reload;
  reload.push_back({std::make_unique<FakeModel>("m", "3"), std::nullopt});
  ASSERT_TRUE(engine.InstallVersions("m", std::move(reload)).ok());
  EXPECT_EQ(engine.FindModel("m", "1").status().code(), absl::StatusCode::kNotFound);
  v1->Release();
  absl::StatusOr<InferResult>& result = done.Wait();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->model_version, "1");
  EXPECT_THAT(engine.Versions("m"), ElementsAre("3"));
}

}  // namespace
}  // namespace gemmserve
