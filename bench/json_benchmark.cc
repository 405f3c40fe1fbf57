// gemmserve-http-bench: the HTTP front end's JSON work on one core, for
// decode-size GroupedMatMul requests (the olmoe layer of shared/BENCHMARKS.md:
// K 2048, top-8 routing) and MatMul: decoding a request whose tensors are
// JSON numbers (DecodeInferRequestJson: RapidJSON's SAX pass and the
// conversion into the datatype), and encoding a response's outputs as JSON
// numbers. Reported as bytes of JSON text per second (bytes_per_second), the
// figure issue 16 asks for per core. scripts/http_benchmark.py runs it.
//
//   build/bin/gemmserve-http-bench --benchmark_repetitions=5
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "server/http/infer_json.h"
#include "server/http/json_numbers.h"
#include "server/tensor/tensor.h"

namespace gemmserve {
namespace {

constexpr int64_t kHidden = 2048;  // olmoe's K
constexpr int64_t kTopK = 8;
constexpr int64_t kExperts = 64;

// Values a model sees: BF16/FP32 activations of about unit scale, written as
// a Python or JavaScript client writes them (shortest round-trip text).
std::string Number(std::mt19937* rng, const char* datatype) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  float v = normal(*rng);
  if (std::string(datatype) == "BF16") {  // a value BF16 holds exactly
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    bits &= 0xffff0000u;
    std::memcpy(&v, &bits, 4);
  }
  std::string out;
  AppendJsonNumber(v, &out);
  return out;
}

// The resident olmoe model's request: tokens [rows, 2048], routing [rows, 8].
std::string OlmoeRequest(int64_t rows, const char* datatype) {
  std::mt19937 rng(static_cast<uint32_t>(rows));
  std::string body = "{\"inputs\":[{\"name\":\"tokens\",\"datatype\":\"";
  body += datatype;
  body += "\",\"shape\":[" + std::to_string(rows) + "," + std::to_string(kHidden) + "],\"data\":[";
  for (int64_t i = 0; i < rows * kHidden; ++i) {
    if (i > 0) body += ',';
    body += Number(&rng, datatype);
  }
  body += "]},{\"name\":\"routing\",\"datatype\":\"INT64\",\"shape\":[" + std::to_string(rows) +
          "," + std::to_string(kTopK) + "],\"data\":[";
  for (int64_t i = 0; i < rows * kTopK; ++i) {
    if (i > 0) body += ',';
    body += std::to_string(rng() % kExperts);
  }
  body += "]}]}";
  return body;
}

void BM_DecodeJson(benchmark::State& state, const char* datatype) {
  const int64_t rows = state.range(0);
  const std::string text = OlmoeRequest(rows, datatype);
  int64_t elements = 0;
  for (auto _ : state) {
    state.PauseTiming();
    HttpInferRequest request;
    request.body = text;
    state.ResumeTiming();
    absl::Status s = DecodeInferRequestJson("olmoe", "", std::nullopt, &request);
    if (!s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      return;
    }
    elements = request.view.inputs[0].count;
    benchmark::DoNotOptimize(request.view.inputs[0].data);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(text.size()));
  state.counters["json_bytes"] = static_cast<double>(text.size());
  state.counters["tensor_bytes"] = static_cast<double>(elements);
}

// The response: output [rows, 8, 1024] of the olmoe layer as JSON numbers.
void BM_EncodeJson(benchmark::State& state, DataType type) {
  const int64_t rows = state.range(0);
  absl::StatusOr<Tensor> made = Tensor::Zeros(type, {rows, kTopK, 1024});
  if (!made.ok()) {
    state.SkipWithError("cannot allocate the output");
    return;
  }
  Tensor out = *std::move(made);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  if (type == DataType::kFP32) {
    for (int64_t i = 0; i < out.num_elements(); ++i) out.data<float>()[i] = normal(rng);
  } else {
    for (int64_t i = 0; i < out.num_elements(); ++i) {
      float v = normal(rng);
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      out.data<uint16_t>()[i] = static_cast<uint16_t>(bits >> 16);
    }
  }
  InferResult result;
  result.model_name = "olmoe";
  result.outputs.push_back({"expert_out", std::move(out)});
  HttpInferRequest request;  // no binary_data: JSON numbers
  size_t bytes = 0;
  for (auto _ : state) {
    HttpResponseBody body;
    absl::Status s = EncodeInferResponseJson(result, request, &body);
    if (!s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      return;
    }
    bytes = body.body.size();
    benchmark::DoNotOptimize(body.body.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
  state.counters["json_bytes"] = static_cast<double>(bytes);
}

BENCHMARK_CAPTURE(BM_DecodeJson, bf16, "BF16")->Arg(1)->Arg(16)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_DecodeJson, fp32, "FP32")->Arg(1)->Arg(16)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_EncodeJson, bf16, DataType::kBF16)
    ->Arg(1)
    ->Arg(16)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_EncodeJson, fp32, DataType::kFP32)
    ->Arg(1)
    ->Arg(16)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace gemmserve

BENCHMARK_MAIN();
