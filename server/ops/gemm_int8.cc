// The GEMM scheduler's path for quantized weights with 8-bit activations
// (GemmProblem::int8_activations, accuracy_level 4): every row of A quantized
// once per call, whatever experts it goes to, then each problem's integers
// streamed once in (problem, K slice) items cut on activation blocks, as the
// decode path streams (gemm_streaming.cc), partial sums folded per problem.
#include <algorithm>
#include <cstring>
#include <vector>

#include "server/common/allocation.h"
#include "server/common/status_macros.h"
#include "server/ops/gemm_paths.h"
#include "server/ops/kernels/int8_dot.h"
#include "server/tensor/shape.h"

namespace gemmserve {
namespace gemm_paths {
namespace {

// One matrix of activations the problems read, quantized once: rows
// [0, rows) of `a`.
struct Source {
  const void* a = nullptr;
  int64_t lda = 0, k = 0, block = 0, rows = 0;
  DataType type = DataType::kFP32;
  Int8Rows q;
};

int64_t RowsRead(const GemmProblem& p) {
  if (p.a_rows == nullptr) return p.m;
  return *std::max_element(p.a_rows, p.a_rows + p.m) + 1;
}

// The sources of the problems (one per distinct A, stride, K and block),
// and each problem's.
std::vector<Source> FindSources(const std::vector<const GemmProblem*>& problems,
                                std::vector<size_t>* source_of) {
  std::vector<Source> sources;
  for (const GemmProblem* p : problems) {
    const int64_t block = Int8ActivationBlock(*p->b_quantized);
    size_t s = 0;
    while (s < sources.size() &&
           !(sources[s].a == p->a && sources[s].lda == p->lda && sources[s].k == p->k &&
             sources[s].block == block && sources[s].type == p->type)) {
      ++s;
    }
    if (s == sources.size()) {
      Source src;
      src.a = p->a;
      src.lda = p->lda;
      src.k = p->k;
      src.block = block;
      src.type = p->type;
      sources.push_back(std::move(src));
    }
    sources[s].rows = std::max(sources[s].rows, RowsRead(*p));
    source_of->push_back(s);
  }
  return sources;
}

// (problem, K slice) items, slices cut on the problem's activation blocks.
struct Item {
  size_t problem;
  int64_t k_begin, k_end, partial;  // partial: float offset
};

std::vector<Item> LayOutItems(const std::vector<const GemmProblem*>& problems,
                              const std::vector<Source>& sources,
                              const std::vector<size_t>& source_of, int threads,
                              int64_t* partial_floats) {
  std::vector<Item> items;
  const int64_t count = static_cast<int64_t>(problems.size());
  const int64_t wanted = (2 * threads + count - 1) / count;
  for (size_t q = 0; q < problems.size(); ++q) {
    const GemmProblem& p = *problems[q];
    const int64_t block = sources[source_of[q]].block;
    const int64_t blocks = (p.k + block - 1) / block;
    const int64_t slices = std::max<int64_t>(1, std::min(wanted, blocks));
    for (int64_t s = 0; s < slices; ++s) {
      const int64_t b0 = blocks * s / slices, b1 = blocks * (s + 1) / slices;
      items.push_back({q, b0 * block, std::min(p.k, b1 * block), *partial_floats});
      *partial_floats += (p.m * p.n + 15) / 16 * 16;  // a cache line apart
    }
  }
  return items;
}

}  // namespace

absl::Status RunInt8Dot(const std::vector<const GemmProblem*>& problems, int threads) {
  std::vector<size_t> source_of;
  std::vector<Source> sources = FindSources(problems, &source_of);
  for (Source& s : sources) QuantizeInt8Rows(s.type, s.a, s.lda, s.rows, s.k, s.block, &s.q);
  int64_t partial_floats = 0;
  const std::vector<Item> items =
      LayOutItems(problems, sources, source_of, threads, &partial_floats);
  GEMMSERVE_ASSIGN_OR_RETURN(AlignedBuffer partial_buf,
                             AlignedBuffer::Allocate(partial_floats * int64_t{sizeof(float)}));
  auto* partial = static_cast<float*>(partial_buf.data());
  std::fill(partial, partial + partial_floats, 0.0f);
  const int64_t item_count = static_cast<int64_t>(items.size());
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t i = 0; i < item_count; ++i) {
    const Item& item = items[i];
    const GemmProblem& p = *problems[item.problem];
    Int8DotAccumulate(p.m, p.a_rows, sources[source_of[item.problem]].q, item.k_begin, item.k_end,
                      *p.b_quantized, partial + item.partial, p.n);
  }
  for (size_t i = 0; i < items.size();) {  // each problem's slices folded into its first
    size_t j = i + 1;
    const GemmProblem& p = *problems[items[i].problem];
    float* first = partial + items[i].partial;
    for (; j < items.size() && items[j].problem == items[i].problem; ++j) {
      const float* other = partial + items[j].partial;
      for (int64_t e = 0; e < p.m * p.n; ++e) first[e] += other[e];
    }
    StoreRows(p, first);
    i = j;
  }
  return absl::OkStatus();
}

int64_t Int8DotScratchBytes(const std::vector<const GemmProblem*>& problems, int threads) {
  std::vector<size_t> source_of;
  const std::vector<Source> sources = FindSources(problems, &source_of);
  int64_t bytes = 0;
  for (const Source& s : sources) {
    const int64_t blocks = (s.k + s.block - 1) / s.block;
    bytes += s.rows * (blocks * s.block + blocks * int64_t{sizeof(float) + sizeof(int32_t)});
  }
  int64_t partial_floats = 0;
  const std::vector<Item> items =
      LayOutItems(problems, sources, source_of, std::max(threads, 1), &partial_floats);
  return bytes + partial_floats * int64_t{sizeof(float)} +
         static_cast<int64_t>(items.size() * sizeof(Item) + sources.size() * sizeof(Source) +
                              source_of.size() * sizeof(size_t));
}

int64_t Int8DotWorkBytes(const GemmWorkShape& w, int64_t t) {
  // Every row quantized once (rows of all problems: at most w.rows distinct
  // ones read, each of K), and partial sums as the streaming path's, in
  // blocks of kQuantizedBlockRows rows.
  const int64_t partial_rows = SaturatingAdd(w.rows, 4 * t * kQuantizedBlockRows);
  return SaturatingAdd(Int8RowsBytes(w.rows, w.k),
                       SaturatingMul(SaturatingMul(partial_rows, w.n), int64_t{sizeof(float)}));
}

}  // namespace gemm_paths
}  // namespace gemmserve
