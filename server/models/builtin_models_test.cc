// The built-in models served by the engine: answers of every datatype, limits,
// lookups, validation errors returned synchronously, requested outputs.
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
#include "server/models/builtin_models.h"
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

std::function<bool()> NeverCancelled() {
  return [] { return false; };
}

class InferenceEngineTest : public ::testing::Test {
 protected:
  explicit InferenceEngineTest(EngineOptions options = {}) { Reset(options); }
  void Reset(EngineOptions options) {
    engine_.reset();
    engine_ = std::make_unique<InferenceEngine>(options);
    // As the server installs them: with dynamic batching.
    engine_->Install(MakeMatMulModel(), BatchingOptions{});
    engine_->Install(MakeGroupedMatMulModel(), BatchingOptions{});
  }

  // Submit and expect a synchronous error. `done` must then never run; that is
  // checked in TearDown, after the engine's destructor has drained the pool.
  absl::Status SubmitExpectingSyncError(const Request& request) {
    auto completion = std::make_unique<Completion>();
    absl::Status status = engine_->Submit(request.View(), NeverCancelled(), completion->Callback());
    EXPECT_FALSE(status.ok()) << "accepted; done got "
                              << (status.ok() ? completion->Wait().status() : status);
    if (!status.ok()) never_done_.push_back(std::move(completion));
    return status;
  }

  void TearDown() override {
    engine_.reset();  // runs every task still scheduled
    for (const auto& c : never_done_) {
      EXPECT_EQ(c->calls(), 0) << "done was called after a synchronous error";
    }
  }

  std::unique_ptr<InferenceEngine> engine_;
  std::vector<std::unique_ptr<Completion>> never_done_;
};

Request MatMulFp32(Shape a_shape, std::vector<float> a, Shape b_shape, std::vector<float> b) {
  Request r("matmul");
  r.Add("A", "FP32", std::move(a_shape), a).Add("B", "FP32", std::move(b_shape), b);
  return r;
}

// --- success ------------------------------------------------------------------------

TEST_F(InferenceEngineTest, MatMulSucceedsAndCallsDoneOnce) {
  Request r = MatMulFp32({2, 3}, {1, 2, 3, 4, 5, 6}, {3, 2}, {7, 8, 9, 10, 11, 12});
  Completion c;
  ASSERT_TRUE(engine_->Submit(r.View(), NeverCancelled(), c.Callback()).ok());
  absl::StatusOr<InferResult>& result = c.Wait();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->model_name, "matmul");
  EXPECT_EQ(result->model_version, "1");
  ASSERT_EQ(result->outputs.size(), 1u);
  const NamedTensor& y = result->outputs[0];
  EXPECT_EQ(y.name, "Y");
  EXPECT_EQ(y.tensor.type(), DataType::kFP32);
  EXPECT_THAT(y.tensor.shape(), ElementsAre(2, 2));
  EXPECT_THAT(std::vector<float>(y.tensor.data<float>(), y.tensor.data<float>() + 4),
              ElementsAre(58, 64, 139, 154));
  engine_.reset();
  EXPECT_EQ(c.calls(), 1);
}

template <typename T>
std::vector<T> Cast(const std::vector<int>& v) {
  return std::vector<T>(v.begin(), v.end());
}

TEST_F(InferenceEngineTest, MatMulComputesEveryDatatype) {
  const std::vector<int> a = {1, 2, 3, 4, 5, 6}, b = {7, 8, 9, 10, 11, 12};
  const std::vector<int> want = {58, 64, 139, 154};
  auto half = [](const std::vector<int>& v, bool bf16) {
    std::vector<uint16_t> out;
    for (int x : v) out.push_back(bf16 ? FloatToBFloat16(x) : FloatToHalf(x));
    return out;
  };
  for (DataType type : kAllDataTypes) {
    const std::string name(DataTypeName(type));
    Request r("matmul");
    switch (type) {
      case DataType::kFP32:
        r.Add("A", name, {2, 3}, Cast<float>(a)).Add("B", name, {3, 2}, Cast<float>(b));
        break;
      case DataType::kFP64:
        r.Add("A", name, {2, 3}, Cast<double>(a)).Add("B", name, {3, 2}, Cast<double>(b));
        break;
      case DataType::kINT32:
        r.Add("A", name, {2, 3}, Cast<int32_t>(a)).Add("B", name, {3, 2}, Cast<int32_t>(b));
        break;
      case DataType::kINT64:
        r.Add("A", name, {2, 3}, Cast<int64_t>(a)).Add("B", name, {3, 2}, Cast<int64_t>(b));
        break;
      case DataType::kUINT32:
        r.Add("A", name, {2, 3}, Cast<uint32_t>(a)).Add("B", name, {3, 2}, Cast<uint32_t>(b));
        break;
      case DataType::kUINT64:
        r.Add("A", name, {2, 3}, Cast<uint64_t>(a)).Add("B", name, {3, 2}, Cast<uint64_t>(b));
        break;
      case DataType::kFP16:
        r.Add("A", name, {2, 3}, half(a, false)).Add("B", name, {3, 2}, half(b, false));
        break;
      case DataType::kBF16:
        r.Add("A", name, {2, 3}, half(a, true)).Add("B", name, {3, 2}, half(b, true));
        break;
    }
    Completion c;
    ASSERT_TRUE(engine_->Submit(r.View(), NeverCancelled(), c.Callback()).ok()) << name;
    absl::StatusOr<InferResult>& result = c.Wait();
    ASSERT_TRUE(result.ok()) << name << ": " << result.status();
    const Tensor& y = result->outputs.at(0).tensor;
    ASSERT_EQ(y.type(), type);
    ASSERT_THAT(y.shape(), ElementsAre(2, 2));
    for (int i = 0; i < 4; ++i) {
      double got = 0;
      switch (type) {
        case DataType::kFP32: got = y.data<float>()[i]; break;
        case DataType::kFP64: got = y.data<double>()[i]; break;
        case DataType::kINT32: got = y.data<int32_t>()[i]; break;
        case DataType::kINT64: got = static_cast<double>(y.data<int64_t>()[i]); break;
        case DataType::kUINT32: got = y.data<uint32_t>()[i]; break;
        case DataType::kUINT64: got = static_cast<double>(y.data<uint64_t>()[i]); break;
        case DataType::kFP16: got = HalfToFloat(y.data<uint16_t>()[i]); break;
        case DataType::kBF16: got = BFloat16ToFloat(y.data<uint16_t>()[i]); break;
      }
      // 139 and 154 are not BF16 numbers: 8 significant bits.
      const double expected =
          type == DataType::kBF16 ? BFloat16ToFloat(FloatToBFloat16(want[i])) : want[i];
      EXPECT_EQ(got, expected) << name << " element " << i;
    }
  }
}

TEST_F(InferenceEngineTest, GroupedMatMulSucceedsWithBiasAndInt32Indices) {
  Request r("grouped_matmul");
  // input [[1, 2], [3, 4]]; group 0 = I, group 1 = swap; bias [[0, 0], [10, 20]]
  r.Add<float>("input", "FP32", {2, 2}, {1, 2, 3, 4})
      .Add<float>("weights", "FP32", {2, 2, 2}, {1, 0, 0, 1, 0, 1, 1, 0})
      .Add<int32_t>("group_indices", "INT32", {2, 2}, {1, 0, 0, 0})
      .Add<float>("bias", "FP32", {2, 2}, {0, 0, 10, 20});
  Completion c;
  ASSERT_TRUE(engine_->Submit(r.View(), NeverCancelled(), c.Callback()).ok());
  absl::StatusOr<InferResult>& result = c.Wait();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->model_name, "grouped_matmul");
  ASSERT_EQ(result->outputs.size(), 1u);
  const NamedTensor& out = result->outputs[0];
  EXPECT_EQ(out.name, "output");
  EXPECT_THAT(out.tensor.shape(), ElementsAre(2, 2, 2));
  EXPECT_THAT(std::vector<float>(out.tensor.data<float>(), out.tensor.data<float>() + 8),
              ElementsAre(12, 21, 1, 2, 3, 4, 3, 4));
}

TEST_F(InferenceEngineTest, GroupedMatMulWithoutBiasAndInt64Indices) {
  Request r("grouped_matmul");
  r.Add<double>("input", "FP64", {1, 2}, {1, 2})
      .Add<double>("weights", "FP64", {3, 2, 1}, {1, 1, 2, 2, 3, 3})
      .Add<int64_t>("group_indices", "INT64", {1, 3}, {2, 0, 1});
  Completion c;
  ASSERT_TRUE(engine_->Submit(r.View(), NeverCancelled(), c.Callback()).ok());
  absl::StatusOr<InferResult>& result = c.Wait();
  ASSERT_TRUE(result.ok()) << result.status();
  const Tensor& out = result->outputs.at(0).tensor;
  EXPECT_THAT(out.shape(), ElementsAre(1, 3, 1));
  EXPECT_THAT(std::vector<double>(out.data<double>(), out.data<double>() + 3),
              ElementsAre(9, 3, 6));
}

TEST_F(InferenceEngineTest, GroupedMatMulIndexOutOfRangeIsInvalidArgument) {
  // Indices are data, checked when the request runs: INVALID_ARGUMENT either
  // synchronously or through `done`, and never a wrapped read.
  for (int64_t bad : {int64_t{-1}, int64_t{2}, std::numeric_limits<int64_t>::max()}) {
    Request r("grouped_matmul");
    r.Add<float>("input", "FP32", {1, 1}, {1})
        .Add<float>("weights", "FP32", {2, 1, 1}, {1, 2})
        .Add<int64_t>("group_indices", "INT64", {1, 1}, {bad});
    Completion c;
    absl::Status status = engine_->Submit(r.View(), NeverCancelled(), c.Callback());
    if (status.ok()) status = c.Wait().status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(status.message()), HasSubstr("'group_indices'"));
  }
}

TEST_F(InferenceEngineTest, EmptyOutputsAreFine) {
  Request r = MatMulFp32({0, 3}, {}, {3, 4}, std::vector<float>(12, 1.0f));
  Completion c;
  ASSERT_TRUE(engine_->Submit(r.View(), NeverCancelled(), c.Callback()).ok());
  absl::StatusOr<InferResult>& result = c.Wait();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_THAT(result->outputs.at(0).tensor.shape(), ElementsAre(0, 4));
  EXPECT_EQ(result->outputs.at(0).tensor.byte_size(), 0);

  Request k0 = MatMulFp32({2, 0}, {}, {0, 3}, {});
  Completion c0;
  ASSERT_TRUE(engine_->Submit(k0.View(), NeverCancelled(), c0.Callback()).ok());
  absl::StatusOr<InferResult>& zeros = c0.Wait();
  ASSERT_TRUE(zeros.ok()) << zeros.status();
  const Tensor& y = zeros->outputs.at(0).tensor;
  EXPECT_THAT(std::vector<float>(y.data<float>(), y.data<float>() + 6),
              ElementsAre(0, 0, 0, 0, 0, 0));
}

TEST_F(InferenceEngineTest, TheEngineKeepsItsOwnCopyOfTheView) {
  // The view object itself may go away right after Submit; only the bytes,
  // names and shapes it points to must stay.
  Request r = MatMulFp32({1, 2}, {1, 2}, {2, 1}, {3, 4});
  Completion c;
  {
    InferRequestView view = r.View();
    ASSERT_TRUE(engine_->Submit(std::move(view), NeverCancelled(), c.Callback()).ok());
    view = InferRequestView();
  }
  absl::StatusOr<InferResult>& result = c.Wait();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->outputs.at(0).tensor.data<float>()[0], 11.0f);
}

TEST_F(InferenceEngineTest, ManyConcurrentRequestsEachGetTheirOwnAnswer) {
  EngineOptions options;
  options.compute_threads = 2;
  Reset(options);
  constexpr int kRequests = 64;
  std::vector<std::unique_ptr<Request>> requests;
  std::vector<std::unique_ptr<Completion>> completions;
  for (int i = 0; i < kRequests; ++i) {
    // [1, i+1] of ones x [i+1, 1] of i: the answer is (i+1) * i.
    const int k = i + 1;
    requests.push_back(
        std::make_unique<Request>(MatMulFp32({1, k}, std::vector<float>(k, 1.0f), {k, 1},
                                             std::vector<float>(k, static_cast<float>(i)))));
    completions.push_back(std::make_unique<Completion>());
    ASSERT_TRUE(
        engine_->Submit(requests.back()->View(), NeverCancelled(), completions.back()->Callback())
            .ok());
  }
  for (int i = 0; i < kRequests; ++i) {
    absl::StatusOr<InferResult>& result = completions[i]->Wait();
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->outputs.at(0).tensor.data<float>()[0], static_cast<float>((i + 1) * i));
  }
  engine_.reset();
  for (const auto& c : completions) EXPECT_EQ(c->calls(), 1);
}

// --- cancellation --------------------------------------------------------------------

TEST_F(InferenceEngineTest, CancelledRequestFinishesWithCancelledAndIsNotComputed) {
  // Group index 7 of 2 would fail as INVALID_ARGUMENT if the request were
  // run; CANCELLED shows it never was.
  Request r("grouped_matmul");
  r.Add<float>("input", "FP32", {1, 1}, {1})
      .Add<float>("weights", "FP32", {2, 1, 1}, {1, 2})
      .Add<int64_t>("group_indices", "INT64", {1, 1}, {7});
  Completion c;
  std::atomic<int> polls{0};
  ASSERT_TRUE(engine_
                  ->Submit(
                      r.View(),
                      [&polls] {
                        polls.fetch_add(1);
                        return true;
                      },
                      c.Callback())
                  .ok());
  absl::StatusOr<InferResult>& result = c.Wait();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled);
  EXPECT_GE(polls.load(), 1);
  engine_.reset();
  EXPECT_EQ(c.calls(), 1);
}

TEST_F(InferenceEngineTest, NullCancellationCallbackMeansNeverCancelled) {
  Request r = MatMulFp32({1, 1}, {2}, {1, 1}, {3});
  Completion c;
  ASSERT_TRUE(engine_->Submit(r.View(), nullptr, c.Callback()).ok());
  absl::StatusOr<InferResult>& result = c.Wait();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->outputs.at(0).tensor.data<float>()[0], 6.0f);
}

// --- output limits (E8) -----------------------------------------------------------------

TEST_F(InferenceEngineTest, E8OutputOverMaxOutputBytesIsRejectedBeforeAllocation) {
  // [1000000, 1] x [1, 1000000] FP32 is 4e12 bytes of output: refused at
  // once, without allocating or computing anything.
  std::vector<float> column(1000000, 1.0f);
  Request r = MatMulFp32({1000000, 1}, column, {1, 1000000}, column);
  absl::Status status = SubmitExpectingSyncError(r);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(status.message()),
              AllOf(HasSubstr("--max_output_bytes"), HasSubstr("4000000000000"),
                    HasSubstr("'Y' [1000000,1000000]")));
  EXPECT_EQ(engine_->inflight_bytes(), 0);  // never accepted, so nothing was held
}

TEST_F(InferenceEngineTest, E8MaxOutputBytesIsAnInclusiveLimit) {
  EngineOptions options;
  options.max_output_bytes = 64;  // 16 FP32 values
  Reset(options);
  Request at_limit = MatMulFp32({4, 1}, {1, 2, 3, 4}, {1, 4}, {1, 1, 1, 1});
  Completion c;
  ASSERT_TRUE(engine_->Submit(at_limit.View(), NeverCancelled(), c.Callback()).ok());
  EXPECT_TRUE(c.Wait().ok());

  Request over = MatMulFp32({4, 1}, {1, 2, 3, 4}, {1, 5}, {1, 1, 1, 1, 1});
  absl::Status status = SubmitExpectingSyncError(over);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(status.message()), AllOf(HasSubstr("80 bytes"), HasSubstr("limit of 64"),
                                                   HasSubstr("--max_output_bytes")));
}

TEST_F(InferenceEngineTest, E8GroupedMatMulOutputLimit) {
  EngineOptions options;
  options.max_output_bytes = 100;
  Reset(options);
  Request r("grouped_matmul");
  r.Add<float>("input", "FP32", {2, 1}, {1, 1})
      .Add<float>("weights", "FP32", {1, 1, 10}, std::vector<float>(10, 1.0f))
      .Add<int32_t>("group_indices", "INT32", {2, 2}, {0, 0, 0, 0});  // output 2*2*10*4 = 160 B
  absl::Status status = SubmitExpectingSyncError(r);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(status.message()),
              AllOf(HasSubstr("'output' [2,2,10]"), HasSubstr("--max_output_bytes")));
}

TEST_F(InferenceEngineTest, E8OutputThatCannotFitInAResponseMessage) {
  // With a 1 MiB message limit, 512 KiB of output fits and a full 1 MiB of
  // output cannot (the response needs room for its envelope too). The exact
  // envelope allowance is the engine's business; a few KiB is ample.
  EngineOptions options;
  options.max_message_bytes = 1 << 20;
  Reset(options);
  Request fits = MatMulFp32({256, 1}, std::vector<float>(256, 1.0f), {1, 512},
                            std::vector<float>(512, 1.0f));  // 512 KiB
  Completion c;
  ASSERT_TRUE(engine_->Submit(fits.View(), NeverCancelled(), c.Callback()).ok());
  EXPECT_TRUE(c.Wait().ok());
  Request over = MatMulFp32({512, 1}, std::vector<float>(512, 1.0f), {1, 512},
                            std::vector<float>(512, 1.0f));  // 1 MiB
  absl::Status status = SubmitExpectingSyncError(over);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(status.message()),
              AllOf(HasSubstr("--max_message_bytes"), HasSubstr("'Y' [512,512]")));
}

TEST_F(InferenceEngineTest, E8OutputsWrittenAsTextAreCountedAtTheirLargestText) {
  // 64Ki FP32 outputs: 256 KiB of bytes fit a 1 MiB message; as JSON numbers
  // (up to 16 bytes each, 1 MiB in all) they do not, and the message says so.
  EngineOptions options;
  options.max_message_bytes = 1 << 20;
  Reset(options);
  Request r =
      MatMulFp32({256, 1}, std::vector<float>(256, 1.0f), {1, 256}, std::vector<float>(256, 1.0f));
  Completion c;
  ASSERT_TRUE(engine_->Submit(r.View(), NeverCancelled(), c.Callback()).ok());
  ASSERT_TRUE(c.Wait().ok());
  c.Wait()->held.Release();  // the answer written
  InferRequestView as_text = r.View();
  as_text.output_element_bytes = &MaxDecimalTextBytes;
  as_text.output_form = " written as JSON numbers (binary_data_output sends raw bytes)";
  auto refused = std::make_unique<Completion>();
  absl::Status status = engine_->Submit(as_text, NeverCancelled(), refused->Callback());
  never_done_.push_back(std::move(refused));  // TearDown checks it was never called
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(status.message()),
              AllOf(HasSubstr("--max_message_bytes"), HasSubstr("JSON numbers"),
                    HasSubstr("binary_data_output")));
  EXPECT_EQ(engine_->inflight_bytes(), 0);
  // Half as many outputs fit as text too.
  Request small =
      MatMulFp32({128, 1}, std::vector<float>(128, 1.0f), {1, 256}, std::vector<float>(256, 1.0f));
  InferRequestView small_text = small.View();
  small_text.output_element_bytes = &MaxDecimalTextBytes;
  Completion accepted;
  ASSERT_TRUE(engine_->Submit(small_text, NeverCancelled(), accepted.Callback()).ok());
  ASSERT_TRUE(accepted.Wait().ok());
  EXPECT_GT(engine_->inflight_bytes(), 0);  // held by the answer until it is written
  accepted.Wait()->held.Release();
  EXPECT_EQ(engine_->inflight_bytes(), 0);
}

TEST_F(InferenceEngineTest, E8TheEchoedRequestIdCountsTowardsTheMessageLimit) {
  EngineOptions options;
  options.max_message_bytes = 1 << 20;
  Reset(options);
  // 1 MiB - 8 KiB of output: fits with a short id, not with a 16 KiB one.
  Request r = MatMulFp32({254, 1}, std::vector<float>(254, 1.0f), {1, 1024},
                         std::vector<float>(1024, 1.0f));
  Completion c;
  ASSERT_TRUE(engine_->Submit(r.View(), NeverCancelled(), c.Callback()).ok());
  EXPECT_TRUE(c.Wait().ok());
  r.SetId(std::string(16 * 1024, 'i'));
  absl::Status status = SubmitExpectingSyncError(r);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(status.message()), HasSubstr("--max_message_bytes"));
}

TEST_F(InferenceEngineTest, E8OutputByteCountOverflowingInt64IsRejectedSynchronously) {
  // K = 0 makes the inputs empty while the output has 2^31 * 2^31 = 2^62
  // elements: 2^64 bytes in FP32, which does not fit in int64. It is far over
  // any --max_output_bytes, so it must be refused at once like any other
  // oversized output, not accepted and then failed on a worker.
  Request r = MatMulFp32({int64_t{1} << 31, 0}, {}, {0, int64_t{1} << 31}, {});
  absl::Status status = SubmitExpectingSyncError(r);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;

  // The same through GroupedMatMul: [1, 1, 2^61] FP32 output is 2^63 bytes.
  Request g("grouped_matmul");
  g.Add<float>("input", "FP32", {1, 0}, {})
      .Add<float>("weights", "FP32", {1, 0, int64_t{1} << 61}, {})
      .Add<int64_t>("group_indices", "INT64", {1, 1}, {0});
  absl::Status grouped = SubmitExpectingSyncError(g);
  EXPECT_EQ(grouped.code(), absl::StatusCode::kResourceExhausted) << grouped;
}

// --- model lookup (E1) -------------------------------------------------------------------

TEST_F(InferenceEngineTest, E1UnknownModelIsNotFound) {
  Request r("no_such_model");
  r.Add<float>("A", "FP32", {1}, {1});
  absl::Status status = SubmitExpectingSyncError(r);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(status.message()), HasSubstr("unknown model 'no_such_model'"));
}

TEST_F(InferenceEngineTest, E1UnknownVersionIsNotFound) {
  Request r("matmul", "2");
  r.Add<float>("A", "FP32", {1, 1}, {1}).Add<float>("B", "FP32", {1, 1}, {1});
  absl::Status status = SubmitExpectingSyncError(r);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(status.message()), AllOf(HasSubstr("'matmul'"), HasSubstr("'2'")));
}

TEST_F(InferenceEngineTest, E1ExistingVersionOrNoneIsFound) {
  for (const char* version : {"1", ""}) {
    Request r("matmul", version);
    r.Add<float>("A", "FP32", {1, 1}, {2}).Add<float>("B", "FP32", {1, 1}, {5});
    Completion c;
    ASSERT_TRUE(engine_->Submit(r.View(), NeverCancelled(), c.Callback()).ok()) << version;
    absl::StatusOr<InferResult>& result = c.Wait();
    ASSERT_TRUE(result.ok());
    EXPECT_EQ(result->model_version, "1");
  }
}

TEST_F(InferenceEngineTest, E1EmptyModelNameIsInvalidArgument) {
  Request r("");
  absl::Status status = SubmitExpectingSyncError(r);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine_->FindModel("", "").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(InferenceEngineTest, FindModelAndModels) {
  auto m = engine_->FindModel("grouped_matmul", "");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ((*m)->metadata().name, "grouped_matmul");
  EXPECT_EQ(engine_->FindModel("matmul", "1").status().code(), absl::StatusCode::kOk);
  EXPECT_EQ(engine_->FindModel("MatMul", "").status().code(), absl::StatusCode::kNotFound);
  ASSERT_EQ(engine_->models().size(), 2u);
  EXPECT_EQ(engine_->models()[0]->metadata().name, "grouped_matmul");
}

TEST_F(InferenceEngineTest, AnInvalidModelNameIsInvalidArgumentAndEscapedInTheMessage) {
  Request r(std::string("evil\x01\n") + std::string(300, 'z'));
  absl::Status status = SubmitExpectingSyncError(r);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              AllOf(HasSubstr("\\x01"), HasSubstr("..."), ::testing::Not(HasSubstr("\n"))));
  EXPECT_LT(status.message().size(), 200u);
}

// --- validation errors are synchronous ---------------------------------------------------

TEST_F(InferenceEngineTest, BindingErrorsAreReturnedSynchronously) {
  Request short_b("matmul");
  short_b.Add<float>("A", "FP32", {3, 4}, std::vector<float>(12))
      .AddRaw("B", "FP32", {4, 3}, std::string(47, '\0'));
  absl::Status status = SubmitExpectingSyncError(short_b);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "input 'B': expected 48 bytes (shape [4,3], FP32), got 47");

  Request missing("matmul");
  missing.Add<float>("A", "FP32", {1}, {1});
  EXPECT_EQ(SubmitExpectingSyncError(missing).code(), absl::StatusCode::kInvalidArgument);

  Request int8("matmul");
  int8.AddRaw("A", "INT8", {1}, "x").AddRaw("B", "INT8", {1}, "y");
  EXPECT_EQ(SubmitExpectingSyncError(int8).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(InferenceEngineTest, ModelShapeErrorsAreReturnedSynchronously) {
  // M1 datatypes differ
  Request m1("matmul");
  m1.Add<float>("A", "FP32", {1, 1}, {1}).Add<double>("B", "FP64", {1, 1}, {1});
  absl::Status s1 = SubmitExpectingSyncError(m1);
  EXPECT_EQ(s1.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s1.message()),
              AllOf(HasSubstr("'B'"), HasSubstr("FP32"), HasSubstr("FP64")));
  // M2 rank 0
  Request m2("matmul");
  m2.Add<float>("A", "FP32", {}, {1}).Add<float>("B", "FP32", {1}, {1});
  EXPECT_EQ(SubmitExpectingSyncError(m2).code(), absl::StatusCode::kInvalidArgument);
  // M3 K differs
  Request m3("matmul");
  m3.Add<float>("A", "FP32", {2, 3}, std::vector<float>(6))
      .Add<float>("B", "FP32", {4, 5}, std::vector<float>(20));
  EXPECT_EQ(SubmitExpectingSyncError(m3).code(), absl::StatusCode::kInvalidArgument);
  // M4 batch does not broadcast
  Request m4("matmul");
  m4.Add<float>("A", "FP32", {2, 3, 4}, std::vector<float>(24))
      .Add<float>("B", "FP32", {3, 4, 5}, std::vector<float>(60));
  EXPECT_EQ(SubmitExpectingSyncError(m4).code(), absl::StatusCode::kInvalidArgument);
  // G4 bias datatype differs from input
  Request g4("grouped_matmul");
  g4.Add<float>("input", "FP32", {1, 1}, {1})
      .Add<float>("weights", "FP32", {1, 1, 1}, {1})
      .Add<int64_t>("group_indices", "INT64", {1, 1}, {0})
      .Add<double>("bias", "FP64", {1, 1}, {1});
  absl::Status sg4 = SubmitExpectingSyncError(g4);
  EXPECT_EQ(sg4.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(sg4.message()), HasSubstr("'bias'"));
  // G5 G = 0 with tokens to route
  Request g5("grouped_matmul");
  g5.Add<float>("input", "FP32", {1, 1}, {1})
      .Add<float>("weights", "FP32", {0, 1, 1}, {})
      .Add<int64_t>("group_indices", "INT64", {1, 1}, {0});
  EXPECT_EQ(SubmitExpectingSyncError(g5).code(), absl::StatusCode::kInvalidArgument);
}

// --- requested outputs ---------------------------------------------------------------------

TEST_F(InferenceEngineTest, RequestedOutputIsReturned) {
  Request r = MatMulFp32({1, 1}, {2}, {1, 1}, {3});
  r.Want("Y");
  Completion c;
  ASSERT_TRUE(engine_->Submit(r.View(), NeverCancelled(), c.Callback()).ok());
  absl::StatusOr<InferResult>& result = c.Wait();
  ASSERT_TRUE(result.ok());
  ASSERT_EQ(result->outputs.size(), 1u);
  EXPECT_EQ(result->outputs[0].name, "Y");
}

TEST_F(InferenceEngineTest, UnknownRequestedOutputIsInvalidArgument) {
  Request r = MatMulFp32({1, 1}, {2}, {1, 1}, {3});
  r.Want("Y").Want("Z");
  absl::Status status = SubmitExpectingSyncError(r);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              AllOf(HasSubstr("unknown output 'Z'"), HasSubstr("'matmul'")));
}

}  // namespace
}  // namespace gemmserve

namespace gemmserve {
namespace {

TEST_F(InferenceEngineTest, TinyRequestToAnIdleModelIsAnsweredBeforeSubmitReturns) {
  Request tiny = MatMulFp32({1, 2}, {1, 2}, {2, 1}, {3, 4});
  Completion c;
  ASSERT_TRUE(engine_->Submit(tiny.View(), NeverCancelled(), c.Callback()).ok());
  EXPECT_EQ(c.calls(), 1);  // computed on this thread: no hand-off
  EXPECT_EQ(c.Wait()->outputs.at(0).tensor.data<float>()[0], 11.0f);

  // Over the inline limit: handed to a worker.
  EngineOptions options;
  options.inline_max_flops = 0;
  Reset(options);
  Completion d;
  ASSERT_TRUE(engine_->Submit(tiny.View(), NeverCancelled(), d.Callback()).ok());
  EXPECT_EQ(d.Wait()->outputs.at(0).tensor.data<float>()[0], 11.0f);
}

}  // namespace
}  // namespace gemmserve
