#include "bench/onednn_baseline.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "server/common/status_macros.h"
#include "server/tensor/half.h"

namespace gemmserve {
namespace {

using dnnl::memory;

int64_t IndexAt(const Tensor& indices, int64_t p) {
  return indices.type() == DataType::kINT32 ? int64_t{indices.data<int32_t>()[p]}
                                            : indices.data<int64_t>()[p];
}

// oneDNN's OpenMP threads for the scope of one call; the caller's setting
// (which other OpenMP code in the process may read) is put back after.
class OmpThreads {
 public:
  explicit OmpThreads(int threads) : saved_(omp_get_max_threads()) { omp_set_num_threads(threads); }
  ~OmpThreads() { omp_set_num_threads(saved_); }
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;

 private:
  int saved_;
};

dnnl::matmul::primitive_desc MakeMatMul(const dnnl::engine& engine, const memory::desc& src,
                                        const memory::desc& weights, const memory::desc& dst) {
#if DNNL_VERSION_MAJOR >= 3
  return dnnl::matmul::primitive_desc(engine, src, weights, dst);
#else
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, weights, dst), engine);
#endif
}

absl::Status Reserve(AlignedBuffer* buffer, int64_t bytes) {
  if (buffer->size() >= bytes) return absl::OkStatus();
  *buffer = AlignedBuffer();
  GEMMSERVE_ASSIGN_OR_RETURN(*buffer, AlignedBuffer::Allocate(bytes));
  return absl::OkStatus();
}

absl::Status FromDnnl(const dnnl::error& e) {
  return absl::InternalError(absl::StrCat("oneDNN: ", e.what()));
}

// The layout oneDNN picks is chosen for this many rows (the same from 1 to
// 4096 rows for FP32 and BF16 at the benchmark's shapes, on AVX-512).
constexpr int64_t kLayoutRows = 64;

}  // namespace

struct OneDnnGroupedMatMul::State {
  DataType type = DataType::kFP32;
  memory::data_type dnnl_type = memory::data_type::f32;
  int64_t g = 0, k = 0, n = 0;
  int threads = 1;
  dnnl::engine engine;
  dnnl::stream stream;
  memory::desc layout;  // of one group's reordered [K, N]
  int64_t group_bytes = 0;
  AlignedBuffer reordered;  // G * group_bytes
  std::vector<memory> group_memory;

  struct Primitive {
    dnnl::matmul matmul;
    memory src, dst;  // their handles are set to the shared buffers per call
    std::string impl;
  };
  std::map<int64_t, Primitive> by_rows;

  // Per call: pairs grouped by group (counting sort, in pair order within a
  // group), and the gathered rows and their FP32 results.
  std::vector<int64_t> offsets, order, next;
  AlignedBuffer rows, results;

  int64_t element() const { return DataTypeSize(type); }

  absl::StatusOr<Primitive*> PrimitiveFor(int64_t rows_count) {
    auto it = by_rows.find(rows_count);
    if (it != by_rows.end()) return &it->second;
    try {
      const memory::desc src({rows_count, k}, dnnl_type, memory::format_tag::ab);
      const memory::desc any({k, n}, dnnl_type, memory::format_tag::any);
      const memory::desc dst({rows_count, n}, memory::data_type::f32, memory::format_tag::ab);
      OmpThreads omp(threads);  // oneDNN sizes its work split by the threads at creation
      dnnl::matmul::primitive_desc pd = MakeMatMul(engine, src, any, dst);
      // The weights are already in `layout`: a row count whose preferred
      // layout differs gets the primitive that reads `layout`.
      if (!(pd.weights_desc() == layout)) pd = MakeMatMul(engine, src, layout, dst);
      Primitive p{dnnl::matmul(pd), memory(src, engine, nullptr), memory(dst, engine, nullptr),
                  pd.impl_info_str()};
      return &by_rows.emplace(rows_count, std::move(p)).first->second;
    } catch (const dnnl::error& e) {
      return FromDnnl(e);
    }
  }

  // Fills offsets (G + 1) and order (M * S); returns the longest group.
  int64_t Group(const Tensor& indices, int64_t pairs) {
    offsets.assign(static_cast<size_t>(g + 1), 0);
    for (int64_t p = 0; p < pairs; ++p) ++offsets[static_cast<size_t>(IndexAt(indices, p) + 1)];
    int64_t longest = 0;
    for (int64_t group = 0; group < g; ++group) {
      longest = std::max(longest, offsets[group + 1]);
      offsets[group + 1] += offsets[group];
    }
    order.resize(static_cast<size_t>(pairs));
    next.assign(offsets.begin(), offsets.end() - 1);
    for (int64_t p = 0; p < pairs; ++p) order[next[IndexAt(indices, p)]++] = p;
    return longest;
  }

  absl::Status Reserve(int64_t longest) {
    GEMMSERVE_RETURN_IF_ERROR(gemmserve::Reserve(&rows, longest * k * element()));
    return gemmserve::Reserve(&results, longest * n * int64_t{sizeof(float)});
  }
};

bool OneDnnGroupedMatMul::Supports(DataType type) {
  return type == DataType::kFP32 || type == DataType::kBF16;
}

OneDnnGroupedMatMul::OneDnnGroupedMatMul(std::unique_ptr<State> state) : state_(std::move(state)) {}
OneDnnGroupedMatMul::OneDnnGroupedMatMul(OneDnnGroupedMatMul&&) noexcept = default;
OneDnnGroupedMatMul& OneDnnGroupedMatMul::operator=(OneDnnGroupedMatMul&&) noexcept = default;
OneDnnGroupedMatMul::~OneDnnGroupedMatMul() = default;

absl::StatusOr<OneDnnGroupedMatMul> OneDnnGroupedMatMul::Create(const Tensor& weights,
                                                                int threads) {
  if (!Supports(weights.type())) {
    return absl::InvalidArgumentError(
        absl::StrCat("oneDNN baseline: FP32 or BF16 weights, got ", DataTypeName(weights.type())));
  }
  if (weights.shape().size() != 3) {
    return absl::InvalidArgumentError("oneDNN baseline: weights must be [G, K, N]");
  }
  auto state = std::make_unique<State>();
  State& s = *state;
  s.type = weights.type();
  s.dnnl_type = s.type == DataType::kBF16 ? memory::data_type::bf16 : memory::data_type::f32;
  s.g = weights.shape()[0];
  s.k = weights.shape()[1];
  s.n = weights.shape()[2];
  s.threads = std::max(1, threads);
  if (s.k == 0 || s.n == 0) {
    return absl::InvalidArgumentError("oneDNN baseline: K and N must be positive");
  }
  try {
    s.engine = dnnl::engine(dnnl::engine::kind::cpu, 0);
    s.stream = dnnl::stream(s.engine);
    OmpThreads omp(s.threads);
    const memory::desc src({kLayoutRows, s.k}, s.dnnl_type, memory::format_tag::ab);
    const memory::desc any({s.k, s.n}, s.dnnl_type, memory::format_tag::any);
    const memory::desc dst({kLayoutRows, s.n}, memory::data_type::f32, memory::format_tag::ab);
    s.layout = MakeMatMul(s.engine, src, any, dst).weights_desc();
    s.group_bytes = (static_cast<int64_t>(s.layout.get_size()) + 63) / 64 * 64;
    GEMMSERVE_ASSIGN_OR_RETURN(s.reordered, AlignedBuffer::Allocate(s.g * s.group_bytes));
    const memory::desc plain({s.k, s.n}, s.dnnl_type, memory::format_tag::ab);
    const int64_t plain_bytes = s.k * s.n * s.element();
    auto* w = static_cast<uint8_t*>(const_cast<void*>(weights.raw_data()));  // only read
    auto* out = static_cast<uint8_t*>(s.reordered.data());
    s.group_memory.reserve(static_cast<size_t>(s.g));
    for (int64_t group = 0; group < s.g; ++group) {
      memory user(plain, s.engine, w + group * plain_bytes);
      memory packed(s.layout, s.engine, out + group * s.group_bytes);
      dnnl::reorder(user, packed).execute(s.stream, user, packed);
      s.group_memory.push_back(std::move(packed));
    }
    s.stream.wait();
  } catch (const dnnl::error& e) {
    return FromDnnl(e);
  }
  return OneDnnGroupedMatMul(std::move(state));
}

absl::Status OneDnnGroupedMatMul::Prepare(const GroupedMatMulPlan& plan, const Tensor& indices) {
  State& s = *state_;
  const int64_t pairs = plan.m * plan.s;
  const int64_t longest = s.Group(indices, pairs);
  GEMMSERVE_RETURN_IF_ERROR(s.Reserve(longest));
  for (int64_t group = 0; group < s.g; ++group) {
    const int64_t count = s.offsets[group + 1] - s.offsets[group];
    if (count > 0) GEMMSERVE_RETURN_IF_ERROR(s.PrimitiveFor(count).status());
  }
  return absl::OkStatus();
}

absl::Status OneDnnGroupedMatMul::Run(const GroupedMatMulPlan& plan, const Tensor& input,
                                      const Tensor& indices, Tensor* output) {
  State& s = *state_;
  if (plan.k != s.k || plan.n != s.n || plan.g != s.g) {
    return absl::InvalidArgumentError("oneDNN baseline: the plan is not for these weights");
  }
  if (input.type() != s.type || output->type() != s.type) {
    return absl::InvalidArgumentError(
        absl::StrCat("oneDNN baseline: weights are ", DataTypeName(s.type), ", input ",
                     DataTypeName(input.type()), ", output ", DataTypeName(output->type())));
  }
  if (plan.output_elements == 0) return absl::OkStatus();
  const int64_t pairs = plan.m * plan.s;
  const int64_t longest = s.Group(indices, pairs);
  GEMMSERVE_RETURN_IF_ERROR(s.Reserve(longest));  // nothing to do after Prepare

  const int64_t k = s.k, n = s.n, slots = plan.s, element = s.element();
  const size_t row_bytes = static_cast<size_t>(k * element);
  const auto* x = static_cast<const uint8_t*>(input.raw_data());
  auto* out = static_cast<uint8_t*>(output->raw_data());
  auto* rows = static_cast<uint8_t*>(s.rows.data());
  auto* results = static_cast<float*>(s.results.data());
  OmpThreads omp(s.threads);
  try {
    for (int64_t group = 0; group < s.g; ++group) {
      const int64_t begin = s.offsets[group], count = s.offsets[group + 1] - begin;
      if (count == 0) continue;
      GEMMSERVE_ASSIGN_OR_RETURN(State::Primitive * p, s.PrimitiveFor(count));
      for (int64_t i = 0; i < count; ++i) {
        std::memcpy(rows + i * row_bytes, x + (s.order[begin + i] / slots) * row_bytes, row_bytes);
      }
      p->src.set_data_handle(rows);
      p->dst.set_data_handle(results);
      p->matmul.execute(s.stream, {{DNNL_ARG_SRC, p->src},
                                   {DNNL_ARG_WEIGHTS, s.group_memory[group]},
                                   {DNNL_ARG_DST, p->dst}});
      s.stream.wait();
      for (int64_t i = 0; i < count; ++i) {
        const float* result = results + i * n;
        const int64_t pair = s.order[begin + i];
        if (s.type == DataType::kBF16) {
          uint16_t* dst = reinterpret_cast<uint16_t*>(out) + pair * n;
          for (int64_t j = 0; j < n; ++j) dst[j] = FloatToBFloat16(result[j]);
        } else {
          std::memcpy(reinterpret_cast<float*>(out) + pair * n, result,
                      static_cast<size_t>(n) * sizeof(float));
        }
      }
    }
  } catch (const dnnl::error& e) {
    return FromDnnl(e);
  }
  return absl::OkStatus();
}

const void* OneDnnGroupedMatMul::group_weights(int64_t g) const {
  return static_cast<const uint8_t*>(state_->reordered.data()) + g * state_->group_bytes;
}

int64_t OneDnnGroupedMatMul::group_bytes() const { return state_->group_bytes; }

absl::StatusOr<std::string> OneDnnGroupedMatMul::ImplementationName(int64_t rows) {
  GEMMSERVE_ASSIGN_OR_RETURN(State::Primitive * p, state_->PrimitiveFor(rows));
  return p->impl;
}

}  // namespace gemmserve
