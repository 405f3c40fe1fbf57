// Fuzzes the request path below gRPC with any bytes a client could send as a
// ModelInferRequest: protobuf parsing, DecodeInferRequest (the envelope),
// BindInputs against each built-in model's metadata (names, datatypes,
// shapes, byte and element counts), Model::Prepare (operator shape rules),
// and, when the planned work is small, Model::RunBatch on one thread, alone
// and batched between two copies of a fixed FP32 request of odd size (a
// merged batch mixing datatypes and byte sizes, as a server's is). Nothing
// may crash or trip a sanitizer; a plan's output must be what RunBatch
// returns; the fixed neighbour's answer must stay exact; and every answer,
// alone and batched, must equal the references of fuzz_reference.h: MatMul of
// every datatype with numpy's broadcasting derived there (integers bit for
// bit, floats within rounding of the exact sums), and GroupedMatMul by its
// definition.
//
// Both models see every request, so the fuzzer need not find the model name.
// FUZZ_VERBOSE=1 in the environment prints how far each model got, which
// shows whether a seed reaches RunBatch:
//
//   FUZZ_VERBOSE=1 build-asan/bin/fuzz_infer_request fuzz/corpus/fuzz_infer_request/*
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fuzz/fuzz_reference.h"
#include "fuzz/fuzz_support.h"
#include "google/protobuf/stubs/logging.h"
#include "grpc_service.pb.h"
#include "server/models/builtin_models.h"
#include "server/core/input_binding.h"
#include "server/core/model.h"
#include "server/service/infer_codec.h"
#include "server/tensor/datatype.h"
#include "server/tensor/shape.h"

namespace gemmserve {
namespace fuzz {
namespace {

// The engine caps outputs at gigabytes; here work must stay small, so that
// each input runs in well under a millisecond.
constexpr int64_t kMaxOutputBytes = int64_t{1} << 20;
constexpr int64_t kMaxFlops = 10'000'000;

const std::vector<std::unique_ptr<Model>>& BuiltinModels() {
  static const auto* models = [] {
    auto* m = new std::vector<std::unique_ptr<Model>>();
    m->push_back(MakeMatMulModel());
    m->push_back(MakeGroupedMatMulModel());
    return m;
  }();
  return *models;
}

// A fixed request of odd byte size batched around each fuzzed one: FP32 ones
// with K = 3, so every output element is exactly 3. Built through the same
// decode, bind and prepare path as a client's request.
struct Neighbour {
  inference::ModelInferRequest request;
  std::unique_ptr<InferRequestView> view;
  std::unique_ptr<BoundInputs> bound;
  std::unique_ptr<PreparedInference> prepared;
};

void AddOnes(inference::ModelInferRequest* r, const char* name, const std::vector<int64_t>& shape) {
  inference::ModelInferRequest::InferInputTensor* t = r->add_inputs();
  t->set_name(name);
  t->set_datatype("FP32");
  int64_t count = 1;
  for (int64_t d : shape) {
    t->add_shape(d);
    count *= d;
  }
  const std::vector<float> ones(static_cast<size_t>(count), 1.0f);
  r->add_raw_input_contents(ones.data(), ones.size() * sizeof(float));
}

Neighbour* MakeNeighbour(const Model& model) {
  auto* n = new Neighbour();
  const std::string& name = model.metadata().name;
  n->request.set_model_name(name);
  if (name == "matmul") {
    AddOnes(&n->request, "A", {1, 3});
    AddOnes(&n->request, "B", {3, 1});
  } else {
    FUZZ_CHECK(name == "grouped_matmul", "no neighbour request for model '%s'", name.c_str());
    AddOnes(&n->request, "input", {1, 3});
    AddOnes(&n->request, "weights", {1, 3, 1});
    inference::ModelInferRequest::InferInputTensor* t = n->request.add_inputs();
    t->set_name("group_indices");
    t->set_datatype("INT64");
    t->add_shape(1);
    t->add_shape(1);
    const int64_t zero = 0;
    n->request.add_raw_input_contents(&zero, sizeof zero);
  }
  absl::StatusOr<InferRequestView> view = DecodeInferRequest(n->request);
  FUZZ_CHECK(view.ok(), "neighbour: %s", view.status().ToString().c_str());
  n->view = std::make_unique<InferRequestView>(*std::move(view));
  absl::StatusOr<BoundInputs> bound = BindInputs(model.metadata(), *n->view);
  FUZZ_CHECK(bound.ok(), "neighbour: %s", bound.status().ToString().c_str());
  n->bound = std::make_unique<BoundInputs>(*std::move(bound));
  absl::StatusOr<std::unique_ptr<PreparedInference>> prepared = model.Prepare(*n->bound);
  FUZZ_CHECK(prepared.ok(), "neighbour: %s", prepared.status().ToString().c_str());
  n->prepared = *std::move(prepared);
  return n;
}

// One per built-in model, in BuiltinModels() order; made by
// LLVMFuzzerInitialize, so a broken neighbour fails before any input runs.
std::vector<std::unique_ptr<Neighbour>>& Neighbours() {
  static auto* neighbours = new std::vector<std::unique_ptr<Neighbour>>();
  return *neighbours;
}

void MakeNeighbours() {
  for (const auto& model : BuiltinModels()) Neighbours().emplace_back(MakeNeighbour(*model));
}

Neighbour& NeighbourOf(const Model& model) {
  for (size_t i = 0; i < BuiltinModels().size(); ++i) {
    if (BuiltinModels()[i].get() == &model) return *Neighbours()[i];
  }
  FUZZ_CHECK(false, "no neighbour for model '%s'", model.metadata().name.c_str());
  __builtin_unreachable();
}

void CheckNeighbour(const std::string& model, const InferOutputs& result) {
  FUZZ_CHECK(result.ok() && result->size() == 1, "%s: neighbour failed: %s", model.c_str(),
             result.status().ToString().c_str());
  const Tensor& y = (*result)[0].tensor;
  FUZZ_CHECK(y.type() == DataType::kFP32 && y.byte_size() == sizeof(float) &&
                 *static_cast<const float*>(y.raw_data()) == 3.0f,
             "%s: the neighbour's answer changed when batched", model.c_str());
}

// One RunBatch result must be the outputs the plan announced.
void CheckOutputs(const std::string& model, const PreparedInference& prepared,
                  const std::vector<NamedTensor>& outputs) {
  const auto shapes = prepared.output_shapes();
  FUZZ_CHECK(outputs.size() == shapes.size(), "%s: %zu outputs, planned %zu", model.c_str(),
             outputs.size(), shapes.size());
  int64_t bytes = 0;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& t = outputs[i].tensor;
    FUZZ_CHECK(outputs[i].name == shapes[i].first && t.shape() == shapes[i].second,
               "%s: output '%s' %s, planned '%s' %s", model.c_str(), outputs[i].name.c_str(),
               ShapeToString(t.shape()).c_str(), shapes[i].first.c_str(),
               ShapeToString(shapes[i].second).c_str());
    const absl::StatusOr<int64_t> want = ByteSize(t.shape(), t.type());
    FUZZ_CHECK(want.ok() && *want == t.byte_size(), "%s: output '%s' holds %lld bytes",
               model.c_str(), outputs[i].name.c_str(), static_cast<long long>(t.byte_size()));
    bytes += t.byte_size();
  }
  FUZZ_CHECK(bytes == prepared.output_bytes(), "%s: %lld output bytes, planned %lld", model.c_str(),
             static_cast<long long>(bytes), static_cast<long long>(prepared.output_bytes()));
}

const bool kVerbose = std::getenv("FUZZ_VERBOSE") != nullptr;

void Trace(const std::string& model, const char* stage, const absl::Status& status) {
  if (kVerbose)
    std::fprintf(stderr, "  %s: %s %s\n", model.c_str(), stage, status.ToString().c_str());
}

// The answer of `model` to `bound` against the reference.
void CheckAnswer(const Model& model, const BoundInputs& bound, const std::vector<NamedTensor>& out,
                 const char* how) {
  std::vector<Tensor> in;
  for (const BoundInput& b : bound) {
    if (b.spec == nullptr) {
      in.emplace_back();
      continue;
    }
    absl::StatusOr<Tensor> t = b.Materialize();
    FUZZ_CHECK(t.ok(), "Materialize: %s", t.status().ToString().c_str());
    in.push_back(*std::move(t));
  }
  const std::string what = absl::StrCat(model.metadata().name, " ", how);
  if (model.metadata().name == "matmul") {
    CheckMatMul(what.c_str(), in[0], in[1], out[0].tensor);
  } else {
    CheckGroupedMatMul(what.c_str(), in[0], in[1], in[2], bound[3].spec ? &in[3] : nullptr,
                       out[0].tensor);
  }
}

// Runs `prepared` alone and batched between two neighbours, and checks both
// answers against the reference.
void Run(const Model& model, const BoundInputs& bound, PreparedInference* prepared) {
  const std::string& name = model.metadata().name;
  std::vector<InferOutputs> alone = model.RunBatch({&prepared, 1}, /*threads=*/1);
  FUZZ_CHECK(alone.size() == 1, "%s: RunBatch gave %zu results for 1", name.c_str(), alone.size());
  // Only an index out of range may fail a prepared request.
  Trace(name, "RunBatch", alone[0].status());
  if (!alone[0].ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(alone[0].status()), "%s: RunBatch: %s", name.c_str(),
               alone[0].status().ToString().c_str());
    return;
  }
  CheckOutputs(name, *prepared, *alone[0]);
  CheckAnswer(model, bound, *alone[0], "alone");

  PreparedInference* neighbour = NeighbourOf(model).prepared.get();
  PreparedInference* three[] = {neighbour, prepared, neighbour};
  std::vector<InferOutputs> batched = model.RunBatch(three, /*threads=*/1);
  FUZZ_CHECK(batched.size() == 3, "%s: RunBatch gave %zu results for 3", name.c_str(),
             batched.size());
  CheckNeighbour(name, batched[0]);
  CheckNeighbour(name, batched[2]);
  {
    const InferOutputs& result = batched[1];
    FUZZ_CHECK(result.ok(), "%s: alone OK, batched %s", name.c_str(),
               result.status().ToString().c_str());
    CheckOutputs(name, *prepared, *result);
    CheckAnswer(model, bound, *result, "batched");
  }
}

}  // namespace
}  // namespace fuzz
}  // namespace gemmserve

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Invalid UTF-8 in a string field is a parse failure the fuzzer finds every
  // few runs; protobuf's log line for each would drown the report.
  google::protobuf::SetLogHandler(nullptr);
  gemmserve::fuzz::MakeNeighbours();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gemmserve;
  using namespace gemmserve::fuzz;
  inference::ModelInferRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  const absl::StatusOr<InferRequestView> view = DecodeInferRequest(request);
  Trace("request", "DecodeInferRequest", view.status());
  if (!view.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(view.status()), "DecodeInferRequest: %s",
               view.status().ToString().c_str());
    return 0;
  }
  for (const auto& model : BuiltinModels()) {
    const std::string& name = model->metadata().name;
    const absl::StatusOr<BoundInputs> bound = BindInputs(model->metadata(), *view);
    Trace(name, "BindInputs", bound.status());
    if (!bound.ok()) {
      FUZZ_CHECK(absl::IsInvalidArgument(bound.status()), "BindInputs: %s",
                 bound.status().ToString().c_str());
      continue;
    }
    absl::StatusOr<std::unique_ptr<PreparedInference>> prepared = model->Prepare(*bound);
    Trace(name, "Prepare", prepared.status());
    if (!prepared.ok()) {
      FUZZ_CHECK(absl::IsInvalidArgument(prepared.status()), "Prepare: %s",
                 prepared.status().ToString().c_str());
      continue;
    }
    const PreparedInference& p = **prepared;
    FUZZ_CHECK(p.output_bytes() >= 0 && p.flops() >= 0 && p.rows() >= 0,
               "%s: output_bytes %lld, flops %lld, rows %lld", name.c_str(),
               static_cast<long long>(p.output_bytes()), static_cast<long long>(p.flops()),
               static_cast<long long>(p.rows()));
    if (p.output_bytes() > kMaxOutputBytes || p.flops() > kMaxFlops) continue;
    Run(*model, *bound, prepared->get());
  }
  return 0;
}
