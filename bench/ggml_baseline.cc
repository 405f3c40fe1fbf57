// ggml_mul_mat_id through ggml's public C API, the libraries dlopen'ed
// (ggml_baseline.h). The headers are ggml 0.25.1's, vendored unchanged in
// bench/third_party/ggml/ with llama.cpp's MIT license; only their types and
// signatures are used here (decltype of each function), never a symbol at
// link time.
#include "bench/ggml_baseline.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/third_party/ggml/ggml-alloc.h"
#include "bench/third_party/ggml/ggml-backend.h"
#include "bench/third_party/ggml/ggml.h"
#include "server/common/status_macros.h"
#include "server/ops/kernels/cpu_features.h"
#include "server/ops/kernels/gemm.h"
#include "server/tensor/half.h"
#include "server/tensor/datatype.h"

namespace gemmserve {

// clang-format off
#define GEMMSERVE_GGML_FUNCTIONS(X)                                                             \
  X(ggml_version) X(ggml_commit) X(ggml_init) X(ggml_free) X(ggml_tensor_overhead)              \
  X(ggml_graph_overhead) X(ggml_new_tensor_2d) X(ggml_new_tensor_3d) X(ggml_mul_mat_id)         \
  X(ggml_new_graph) X(ggml_build_forward_expand) X(ggml_quantize_chunk) X(ggml_row_size)        \
  X(ggml_get_type_traits) X(ggml_nbytes) X(ggml_backend_load_all_from_path)                     \
  X(ggml_backend_dev_by_type) X(ggml_backend_dev_init) X(ggml_backend_dev_backend_reg)          \
  X(ggml_backend_dev_buffer_type) X(ggml_backend_reg_get_proc_address)                          \
  X(ggml_backend_alloc_ctx_tensors_from_buft) X(ggml_backend_buffer_free)                       \
  X(ggml_backend_free) X(ggml_backend_tensor_set) X(ggml_backend_tensor_get)                    \
  X(ggml_backend_graph_compute) X(ggml_backend_buft_name)
// clang-format on

struct GgmlApi {
#define GEMMSERVE_GGML_MEMBER(name) decltype(&::name) name = nullptr;
  GEMMSERVE_GGML_FUNCTIONS(GEMMSERVE_GGML_MEMBER)
#undef GEMMSERVE_GGML_MEMBER
  ggml_backend_dev_t cpu = nullptr;
  ggml_backend_set_n_threads_t set_n_threads = nullptr;
  ggml_backend_buffer_type_t repack = nullptr;  // the CPU's extra "CPU_REPACK" buffer, if any
};

namespace {

// The CPU variant ggml_backend_load_all_from_path mapped into the process.
std::string MappedCpuVariant() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    const size_t at = line.find("libggml-cpu-");
    if (at != std::string::npos) return line.substr(at);
  }
  return "unknown";
}

absl::Status Resolve(void* handle, GgmlApi* api) {
#define GEMMSERVE_GGML_RESOLVE(name)                                                              \
  api->name = reinterpret_cast<decltype(&::name)>(dlsym(handle, #name));                          \
  if (api->name == nullptr) {                                                                     \
    return absl::FailedPreconditionError(absl::StrCat("ggml: no symbol " #name ": ", dlerror())); \
  }
  GEMMSERVE_GGML_FUNCTIONS(GEMMSERVE_GGML_RESOLVE)
#undef GEMMSERVE_GGML_RESOLVE
  return absl::OkStatus();
}

// The CPU device, its thread setter and its repack buffer type.
absl::Status FindCpu(const std::string& dir, GgmlApi* api) {
  api->ggml_backend_load_all_from_path(dir.c_str());
  api->cpu = api->ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
  if (api->cpu == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("ggml: no CPU backend in ", dir, " runs on this CPU"));
  }
  ggml_backend_reg_t reg = api->ggml_backend_dev_backend_reg(api->cpu);
  api->set_n_threads = reinterpret_cast<ggml_backend_set_n_threads_t>(
      api->ggml_backend_reg_get_proc_address(reg, "ggml_backend_set_n_threads"));
  auto extra = reinterpret_cast<ggml_backend_dev_get_extra_bufts_t>(
      api->ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts"));
  for (ggml_backend_buffer_type_t* b = extra != nullptr ? extra(api->cpu) : nullptr;
       b != nullptr && *b != nullptr; ++b) {
    if (std::strcmp(api->ggml_backend_buft_name(*b), "CPU_REPACK") == 0) api->repack = *b;
  }
  if (api->set_n_threads == nullptr) {
    return absl::FailedPreconditionError("ggml: the CPU backend has no ggml_backend_set_n_threads");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<const GgmlLibrary*> GgmlLibrary::Load(const std::string& dir) {
  static std::mutex mu;
  static GgmlLibrary* loaded = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (loaded != nullptr) return loaded;
  const std::string base = dir + "/libggml-base.so", main = dir + "/libggml.v0.5.0.so";
  if (!std::ifstream(main).good()) {
    return absl::NotFoundError(absl::StrCat("ggml: no ", main, " (bench/ggml/install.sh)"));
  }
  // libggml-base first and global: libggml's NEEDED entry then finds it.
  if (dlopen(base.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("ggml: ", dlerror()));
  }
  void* handle = dlopen(main.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (handle == nullptr) return absl::FailedPreconditionError(absl::StrCat("ggml: ", dlerror()));
  auto lib = std::make_unique<GgmlLibrary>();
  lib->api_ = std::make_unique<GgmlApi>();
  GEMMSERVE_RETURN_IF_ERROR(Resolve(handle, lib->api_.get()));
  GEMMSERVE_RETURN_IF_ERROR(FindCpu(dir, lib->api_.get()));
  lib->version_ = absl::StrCat(lib->api_->ggml_version(), " (", lib->api_->ggml_commit(), ")");
  lib->cpu_variant_ = MappedCpuVariant();
  loaded = lib.release();  // kept for the process: the libraries stay loaded
  return loaded;
}

bool GgmlLibrary::has_repack() const { return api_->repack != nullptr; }

const char* GgmlWeightsName(GgmlWeights w) {
  switch (w) {
    case GgmlWeights::kF32: return "f32";
    case GgmlWeights::kBF16: return "bf16";
    case GgmlWeights::kQ8_0: return "q8_0";
    case GgmlWeights::kQ4_0: return "q4_0";
  }
  return "?";
}

namespace {

ggml_type TypeOf(GgmlWeights w) {
  switch (w) {
    case GgmlWeights::kF32: return GGML_TYPE_F32;
    case GgmlWeights::kBF16: return GGML_TYPE_BF16;
    case GgmlWeights::kQ8_0: return GGML_TYPE_Q8_0;
    case GgmlWeights::kQ4_0: return GGML_TYPE_Q4_0;
  }
  return GGML_TYPE_F32;
}

float ValueOf(const Tensor& t, int64_t i) {
  return t.type() == DataType::kBF16 ? BFloat16ToFloat(t.data<uint16_t>()[i]) : t.data<float>()[i];
}

// Group g of `w` ([G, K, N]) transposed to N rows of K floats, then in `type`.
std::vector<uint8_t> ConvertGroup(const GgmlApi& api, const Tensor& w, int64_t g, ggml_type type) {
  const int64_t k = w.shape()[1], n = w.shape()[2];
  std::vector<float> rows(static_cast<size_t>(k * n));
  for (int64_t t = 0; t < k; ++t) {
    for (int64_t j = 0; j < n; ++j) rows[j * k + t] = ValueOf(w, (g * k + t) * n + j);
  }
  std::vector<uint8_t> out(api.ggml_row_size(type, k) * static_cast<size_t>(n));
  api.ggml_quantize_chunk(type, rows.data(), out.data(), 0, n, k, nullptr);
  return out;
}

}  // namespace

struct GgmlGroupedMatMul::State {
  const GgmlApi* api = nullptr;
  GgmlWeights type = GgmlWeights::kF32;
  DataType value_type = DataType::kFP32;
  int64_t g = 0, k = 0, n = 0;
  ggml_backend_t backend = nullptr;
  ggml_context* weights_ctx = nullptr;
  ggml_backend_buffer_t weights_buf = nullptr;
  ggml_tensor* experts = nullptr;
  bool repacked = false;
  // The graph of Prepare.
  ggml_context* graph_ctx = nullptr;
  ggml_backend_buffer_t graph_buf = nullptr;
  ggml_tensor *x = nullptr, *ids = nullptr, *out = nullptr;
  ggml_cgraph* graph = nullptr;
  std::vector<float> x_f32, out_f32;  // BF16 cases: the widened input, the F32 result
  std::vector<int32_t> ids_i32;

  void FreeGraph() {
    if (graph_buf != nullptr) api->ggml_backend_buffer_free(graph_buf);
    if (graph_ctx != nullptr) api->ggml_free(graph_ctx);
    graph_buf = nullptr;
    graph_ctx = nullptr;
  }
  ~State() {
    if (api == nullptr) return;
    FreeGraph();
    if (weights_buf != nullptr) api->ggml_backend_buffer_free(weights_buf);
    if (weights_ctx != nullptr) api->ggml_free(weights_ctx);
    if (backend != nullptr) api->ggml_backend_free(backend);
  }
};

GgmlGroupedMatMul::GgmlGroupedMatMul(std::unique_ptr<State> state) : state_(std::move(state)) {}
GgmlGroupedMatMul::GgmlGroupedMatMul(GgmlGroupedMatMul&&) noexcept = default;
GgmlGroupedMatMul& GgmlGroupedMatMul::operator=(GgmlGroupedMatMul&&) noexcept = default;
GgmlGroupedMatMul::~GgmlGroupedMatMul() = default;

absl::StatusOr<GgmlGroupedMatMul> GgmlGroupedMatMul::Create(const GgmlLibrary& lib,
                                                            const Tensor& weights, GgmlWeights type,
                                                            int threads) {
  if (weights.shape().size() != 3 ||
      (weights.type() != DataType::kFP32 && weights.type() != DataType::kBF16)) {
    return absl::InvalidArgumentError("ggml baseline: weights must be [G, K, N] of FP32 or BF16");
  }
  auto s = std::make_unique<State>();
  const GgmlApi& api = lib.api();
  s->api = &api;
  s->type = type;
  s->value_type = weights.type();
  s->g = weights.shape()[0];
  s->k = weights.shape()[1];
  s->n = weights.shape()[2];
  const bool blocked = type == GgmlWeights::kQ8_0 || type == GgmlWeights::kQ4_0;
  if (blocked && s->k % 32 != 0) {
    return absl::InvalidArgumentError("ggml baseline: Q8_0 and Q4_0 need K a multiple of 32");
  }
  s->backend = api.ggml_backend_dev_init(api.cpu, nullptr);
  if (s->backend == nullptr) return absl::InternalError("ggml: the CPU backend did not start");
  api.set_n_threads(s->backend, threads);
  ggml_init_params params{api.ggml_tensor_overhead() * 4, nullptr, /*no_alloc=*/true};
  s->weights_ctx = api.ggml_init(params);
  s->experts = api.ggml_new_tensor_3d(s->weights_ctx, TypeOf(type), s->k, s->n, s->g);
  // llama.cpp's default for Q4_0: repacked where the CPU backend can (AVX2, N % 8 == 0).
  s->repacked = type == GgmlWeights::kQ4_0 && api.repack != nullptr && Cpu().avx2 && s->n % 8 == 0;
  s->weights_buf = api.ggml_backend_alloc_ctx_tensors_from_buft(
      s->weights_ctx, s->repacked ? api.repack : api.ggml_backend_dev_buffer_type(api.cpu));
  if (s->weights_buf == nullptr) {
    return absl::ResourceExhaustedError("ggml: could not allocate the experts");
  }
  // The repack buffer takes a tensor whole (it asserts so); plain buffers
  // take an expert at a time, with no second copy of them all.
  const size_t group_bytes = s->experts->nb[2];
  std::vector<uint8_t> all(s->repacked ? group_bytes * static_cast<size_t>(s->g) : 0);
  for (int64_t g = 0; g < s->g; ++g) {
    const std::vector<uint8_t> converted = ConvertGroup(api, weights, g, TypeOf(type));
    if (s->repacked) {
      std::memcpy(all.data() + g * group_bytes, converted.data(), group_bytes);
    } else {
      api.ggml_backend_tensor_set(s->experts, converted.data(), g * group_bytes, group_bytes);
    }
  }
  if (s->repacked) api.ggml_backend_tensor_set(s->experts, all.data(), 0, all.size());
  return GgmlGroupedMatMul(std::move(s));
}

absl::Status GgmlGroupedMatMul::Prepare(const GroupedMatMulPlan& plan, const Tensor& indices) {
  State& s = *state_;
  const GgmlApi& api = *s.api;
  s.FreeGraph();
  const int64_t m = plan.m, slots = indices.shape()[1];
  ggml_init_params params{api.ggml_tensor_overhead() * 8 + api.ggml_graph_overhead(), nullptr,
                          /*no_alloc=*/true};
  s.graph_ctx = api.ggml_init(params);
  // llama.cpp's layout: x [K, 1, M] (one row per token, shared by its slots),
  // ids [S, M], out [N, S, M] (row-major [M, S, N]).
  s.x = api.ggml_new_tensor_3d(s.graph_ctx, GGML_TYPE_F32, s.k, 1, m);
  s.ids = api.ggml_new_tensor_2d(s.graph_ctx, GGML_TYPE_I32, slots, m);
  s.out = api.ggml_mul_mat_id(s.graph_ctx, s.experts, s.x, s.ids);
  s.graph = api.ggml_new_graph(s.graph_ctx);
  api.ggml_build_forward_expand(s.graph, s.out);
  s.graph_buf = api.ggml_backend_alloc_ctx_tensors_from_buft(
      s.graph_ctx, api.ggml_backend_dev_buffer_type(api.cpu));
  if (s.graph_buf == nullptr) return absl::ResourceExhaustedError("ggml: no graph buffer");
  s.ids_i32.resize(static_cast<size_t>(m * slots));
  for (int64_t i = 0; i < m * slots; ++i) {
    s.ids_i32[i] = static_cast<int32_t>(indices.data<int64_t>()[i]);
  }
  s.x_f32.resize(s.value_type == DataType::kBF16 ? static_cast<size_t>(m * s.k) : 0);
  s.out_f32.resize(s.value_type == DataType::kBF16 ? static_cast<size_t>(m * slots * s.n) : 0);
  return absl::OkStatus();
}

absl::Status GgmlGroupedMatMul::Run(const Tensor& input, Tensor* output) {
  State& s = *state_;
  const GgmlApi& api = *s.api;
  const bool bf16 = s.value_type == DataType::kBF16;
  if (bf16)
    HalfToFloatBlock(DataType::kBF16, input.data<uint16_t>(), s.x_f32.data(),
                     static_cast<int64_t>(s.x_f32.size()));
  api.ggml_backend_tensor_set(s.x, bf16 ? s.x_f32.data() : input.raw_data(), 0,
                              api.ggml_nbytes(s.x));
  api.ggml_backend_tensor_set(s.ids, s.ids_i32.data(), 0, api.ggml_nbytes(s.ids));
  if (api.ggml_backend_graph_compute(s.backend, s.graph) != GGML_STATUS_SUCCESS) {
    return absl::InternalError("ggml: graph compute failed");
  }
  if (!bf16) {
    api.ggml_backend_tensor_get(s.out, output->raw_data(), 0, api.ggml_nbytes(s.out));
    return absl::OkStatus();
  }
  api.ggml_backend_tensor_get(s.out, s.out_f32.data(), 0, api.ggml_nbytes(s.out));
  FloatToHalfBlock(DataType::kBF16, s.out_f32.data(), output->data<uint16_t>(),
                   static_cast<int64_t>(s.out_f32.size()));
  return absl::OkStatus();
}

const void* GgmlGroupedMatMul::group_weights(int64_t group) const {
  return static_cast<const char*>(state_->experts->data) + group * state_->experts->nb[2];
}

int64_t GgmlGroupedMatMul::group_bytes() const {
  return static_cast<int64_t>(state_->experts->nb[2]);
}

bool GgmlGroupedMatMul::repacked() const { return state_->repacked; }

absl::StatusOr<Tensor> GgmlGroupedMatMul::GroupAsFloat(const Tensor& weights, int64_t group) const {
  const State& s = *state_;
  const ggml_type type = TypeOf(s.type);
  const std::vector<uint8_t> converted = ConvertGroup(*s.api, weights, group, type);
  const size_t row_bytes = s.api->ggml_row_size(type, s.k);
  std::vector<float> row(static_cast<size_t>(s.k));
  GEMMSERVE_ASSIGN_OR_RETURN(Tensor out, Tensor::Allocate(DataType::kFP32, {s.k, s.n}));
  for (int64_t j = 0; j < s.n; ++j) {
    if (type == GGML_TYPE_F32) {
      std::memcpy(row.data(), converted.data() + j * row_bytes, row_bytes);
    } else {
      s.api->ggml_get_type_traits(type)->to_float(converted.data() + j * row_bytes, row.data(),
                                                  s.k);
    }
    for (int64_t t = 0; t < s.k; ++t) out.data<float>()[t * s.n + j] = row[t];
  }
  return out;
}

}  // namespace gemmserve
