// Resident models: a batch of requests run as one call gives every request
// exactly what it gets alone, and a request with bad indices fails alone.
#include "server/models/resident_models.h"

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/core/input_binding.h"
#include "server/models/resident_common.h"

namespace gemmserve {
namespace {

// One request's wire data and its bound, prepared form.
struct Req {
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<Shape> shapes;
  InferRequestView view;
  std::unique_ptr<PreparedInference> prepared;

  template <typename T>
  void Add(const char* name, const char* type, Shape shape, const std::vector<T>& v) {
    bytes.emplace_back(reinterpret_cast<const uint8_t*>(v.data()),
                       reinterpret_cast<const uint8_t*>(v.data()) + v.size() * sizeof(T));
    shapes.push_back(std::move(shape));
    InputTensorView t;
    t.name = name;
    t.datatype = type;
    t.contents = ContentsKind::kRaw;
    view.inputs.push_back(t);
  }
  void Prepare(const Model& model) {
    for (size_t i = 0; i < view.inputs.size(); ++i) {
      view.inputs[i].shape = shapes[i];
      view.inputs[i].data = bytes[i].data();
      view.inputs[i].count = static_cast<int64_t>(bytes[i].size());
    }
    auto bound = BindInputs(model.metadata(), view);
    ASSERT_TRUE(bound.ok()) << bound.status();
    auto p = model.Prepare(*bound);
    ASSERT_TRUE(p.ok()) << p.status();
    prepared = *std::move(p);
  }
};

std::vector<float> Random(int64_t count, std::mt19937* rng) {
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> v(count);
  for (float& x : v) x = d(*rng);
  return v;
}

TEST(ResidentGroupedMatMulTest, BatchedRequestsGetTheirOwnRowsAndBadIndicesFailAlone) {
  std::mt19937 rng(5);
  const int64_t g = 5, k = 7, n = 9, s = 2;
  absl::StatusOr<Tensor> w = Tensor::Allocate(DataType::kFP32, {g, k, n});
  absl::StatusOr<Tensor> bias = Tensor::Allocate(DataType::kFP32, {g, n});
  ASSERT_TRUE(w.ok() && bias.ok());
  std::vector<float> wv = Random(g * k * n, &rng), bv = Random(g * n, &rng);
  std::memcpy(w->raw_data(), wv.data(), wv.size() * 4);
  std::memcpy(bias->raw_data(), bv.data(), bv.size() * 4);
  ResidentGroupedMatMulSpec spec;
  spec.name = "moe";
  spec.version = "1";
  spec.input = {"x", {DataType::kFP32}, {-1, k}, false, false};
  spec.group_indices = {"route", {DataType::kINT64, DataType::kINT32}, {-1, s}, false, false};
  spec.output_name = "y";
  spec.weights = *std::move(w);
  spec.bias = *std::move(bias);
  auto model = MakeResidentGroupedMatMulModel(std::move(spec));
  ASSERT_TRUE(model.ok()) << model.status();

  // Requests of 3, 0, 1, 2 tokens; the third has an index out of range; the
  // fourth sends INT32 indices.
  const std::vector<int64_t> tokens = {3, 0, 1, 2};
  std::vector<Req> reqs(tokens.size());
  std::vector<std::vector<float>> xs;
  std::vector<std::vector<int64_t>> idx;
  for (size_t r = 0; r < tokens.size(); ++r) {
    xs.push_back(Random(tokens[r] * k, &rng));
    std::vector<int64_t> ix(tokens[r] * s);
    for (int64_t& v : ix) v = static_cast<int64_t>(rng() % g);
    if (r == 2) ix[1] = g;  // out of range
    idx.push_back(ix);
    reqs[r].Add("x", "FP32", {tokens[r], k}, xs[r]);
    if (r == 3) {
      reqs[r].Add("route", "INT32", {tokens[r], s}, std::vector<int32_t>(ix.begin(), ix.end()));
    } else {
      reqs[r].Add("route", "INT64", {tokens[r], s}, ix);
    }
    reqs[r].Prepare(**model);
  }
  std::vector<PreparedInference*> batch;
  for (Req& r : reqs) batch.push_back(r.prepared.get());
  for (int threads : {1, 2}) {
    std::vector<InferOutputs> out = (*model)->RunBatch(batch, threads);
    ASSERT_EQ(out.size(), reqs.size());
    EXPECT_EQ(out[2].status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(out[2].status().message()), ::testing::HasSubstr("value 5 at [0,1]"));
    for (size_t r : {0u, 1u, 3u}) {
      ASSERT_TRUE(out[r].ok()) << out[r].status();
      const Tensor& y = out[r]->at(0).tensor;
      EXPECT_EQ(y.shape(), (Shape{tokens[r], s, n}));
      for (int64_t m = 0; m < tokens[r]; ++m) {
        for (int64_t j = 0; j < s; ++j) {
          const int64_t e = idx[r][m * s + j];
          for (int64_t c = 0; c < n; ++c) {
            double want = bv[e * n + c];
            for (int64_t p = 0; p < k; ++p)
              want += double{xs[r][m * k + p]} * wv[(e * k + p) * n + c];
            EXPECT_NEAR(y.data<float>()[(m * s + j) * n + c], want, 1e-5)
                << "request " << r << " token " << m << " slot " << j;
          }
        }
      }
    }
  }
}

TEST(ResidentMatMulTest, RowsOfEveryRequestStackIntoOneGemm) {
  std::mt19937 rng(6);
  const int64_t k = 5, n = 3;
  absl::StatusOr<Tensor> b = Tensor::Allocate(DataType::kINT64, {k, n});
  ASSERT_TRUE(b.ok());
  for (int64_t i = 0; i < k * n; ++i)
    b->data<int64_t>()[i] = static_cast<int64_t>(rng() % 100) - 50;
  ResidentMatMulSpec spec{
      "lin", "1",           {"a", {DataType::kINT64}, {-1, -1, k}, false, false},
      "c",   *std::move(b), std::nullopt};
  const std::vector<int64_t> bv(spec.b.data<int64_t>(), spec.b.data<int64_t>() + k * n);
  auto model = MakeResidentMatMulModel(std::move(spec));
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->metadata().outputs[0].shape, (Shape{-1, -1, n}));
  const std::vector<Shape> shapes = {{2, 3, k}, {1, 1, k}, {4, 0, k}};
  std::vector<Req> reqs(shapes.size());
  std::vector<std::vector<int64_t>> as;
  for (size_t r = 0; r < shapes.size(); ++r) {
    std::vector<int64_t> a(shapes[r][0] * shapes[r][1] * k);
    for (int64_t& v : a) v = static_cast<int64_t>(rng() % 100) - 50;
    as.push_back(a);
    reqs[r].Add("a", "INT64", shapes[r], a);
    reqs[r].Prepare(**model);
  }
  std::vector<PreparedInference*> batch;
  for (Req& r : reqs) batch.push_back(r.prepared.get());
  std::vector<InferOutputs> out = (*model)->RunBatch(batch, 2);
  for (size_t r = 0; r < shapes.size(); ++r) {
    ASSERT_TRUE(out[r].ok()) << out[r].status();
    const Tensor& y = out[r]->at(0).tensor;
    EXPECT_EQ(y.shape(), (Shape{shapes[r][0], shapes[r][1], n}));
    const int64_t rows = shapes[r][0] * shapes[r][1];
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t c = 0; c < n; ++c) {
        int64_t want = 0;
        for (int64_t p = 0; p < k; ++p) want += as[r][i * k + p] * bv[p * n + c];
        EXPECT_EQ(y.data<int64_t>()[i * n + c], want);
      }
    }
  }
}

TEST(ResidentModelsTest, SpecsThatDisagreeAreRejected) {
  absl::StatusOr<Tensor> b = Tensor::Allocate(DataType::kFP32, {4, 3});
  ResidentMatMulSpec spec{"lin", "1",           {"a", {DataType::kFP32}, {-1, 5}, false, false},
                          "c",   *std::move(b), std::nullopt};
  auto m = MakeResidentMatMulModel(std::move(spec));
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(m.status().message()), ::testing::HasSubstr("differs from K=4"));

  absl::StatusOr<Tensor> w = Tensor::Allocate(DataType::kFP32, {2, 3, 4});
  ResidentGroupedMatMulSpec g;
  g.name = "moe";
  g.version = "1";
  g.input = {"x", {DataType::kFP32}, {-1, 3}, false, false};
  g.group_indices = {"r", {DataType::kINT64}, {-1, -1}, false, false};
  g.output_name = "y";
  g.weights = *std::move(w);
  auto gm = MakeResidentGroupedMatMulModel(std::move(g));
  EXPECT_THAT(std::string(gm.status().message()), ::testing::HasSubstr("fixed S"));
}

}  // namespace
}  // namespace gemmserve

namespace gemmserve {
namespace {

// A batch that fails as a whole (a denied allocation, a kernel's error) gives
// its status to every request it had not answered; a request that failed on
// its own keeps its own error; one left unanswered after success is INTERNAL.
TEST(RunRowsTogetherTest, AWholeBatchFailureReachesEveryUnansweredRequest) {
  std::vector<InferOutputs> failed = RunRowsTogether(3, [](std::vector<InferOutputs>* results) {
    (*results)[1] = absl::InvalidArgumentError("request 1: bad ids");
    return absl::ResourceExhaustedError("the batch's rows");
  });
  ASSERT_EQ(failed.size(), 3u);
  EXPECT_EQ(failed[0].status(), absl::ResourceExhaustedError("the batch's rows"));
  EXPECT_EQ(failed[1].status(), absl::InvalidArgumentError("request 1: bad ids"));
  EXPECT_EQ(failed[2].status(), absl::ResourceExhaustedError("the batch's rows"));

  std::vector<InferOutputs> partly = RunRowsTogether(2, [](std::vector<InferOutputs>* results) {
    (*results)[0] = std::vector<NamedTensor>{};
    return absl::OkStatus();
  });
  EXPECT_TRUE(partly[0].ok());
  EXPECT_EQ(partly[1].status().code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace gemmserve
