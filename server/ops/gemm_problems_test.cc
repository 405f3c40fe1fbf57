// The scheduler on lists that mix datatypes, paths (streaming, packed side by
// side, packed one after another, direct) and gather/scatter rows, as merged
// batches will: every problem's rows must equal its own reference.
#include "server/ops/gemm_problems.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/ops/kernels/gemm_testing.h"
#include "server/ops/kernels/reference_gemm.h"

namespace gemmserve {
namespace {

using namespace ops_testing;

struct Owned {
  std::vector<uint8_t> a, b, c, bias;
  std::vector<int64_t> a_rows, c_rows;
  GemmProblem p;
};

// A problem over its own buffers; `gather` permutes rows of A and C, `with_bias` adds one.
Owned Make(DataType type, int64_t m, int64_t n, int64_t k, bool gather, bool with_bias,
           std::mt19937_64& rng) {
  Owned o;
  const int64_t es = DataTypeSize(type);
  const int64_t a_rows = gather ? m + 3 : m, c_rows = gather ? m + 2 : m;
  o.a.resize(std::max<int64_t>(1, a_rows * k * es));
  o.b.resize(std::max<int64_t>(1, k * n * es));
  o.c.assign(std::max<int64_t>(1, c_rows * n * es), 0);
  FillRandom(type, o.a.data(), a_rows * k, rng);
  FillRandom(type, o.b.data(), k * n, rng);
  o.p.type = type;
  o.p.m = m;
  o.p.n = n;
  o.p.k = k;
  o.p.a = o.a.data();
  o.p.lda = k;
  o.p.b = o.b.data();
  o.p.ldb = n;
  o.p.c = o.c.data();
  o.p.ldc = n;
  if (gather) {
    for (int64_t i = 0; i < m; ++i) o.a_rows.push_back((i * 7 + 1) % a_rows);
    o.c_rows.resize(c_rows);
    std::iota(o.c_rows.begin(), o.c_rows.end(), 0);
    std::shuffle(o.c_rows.begin(), o.c_rows.end(), rng);
    o.c_rows.resize(m);
    o.p.a_rows = o.a_rows.data();
    o.p.c_rows = o.c_rows.data();
  }
  if (with_bias) {
    o.bias.resize(std::max<int64_t>(1, n * es));
    FillRandom(type, o.bias.data(), n, rng);
    o.p.bias = o.bias.data();
  }
  return o;
}

void Check(const Owned& o, const std::string& where) {
  const GemmProblem& p = o.p;
  const int64_t es = DataTypeSize(p.type);
  for (int64_t i = 0; i < p.m; ++i) {
    const int64_t ar = p.a_rows ? p.a_rows[i] : i, cr = p.c_rows ? p.c_rows[i] : i;
    for (int64_t j = 0; j < p.n; ++j) {
      double want = 0, bound = 0;
      for (int64_t q = 0; q < p.k; ++q) {
        const double x = ValueAt(p.type, o.a.data(), ar * p.k + q);
        const double y = ValueAt(p.type, o.b.data(), q * p.n + j);
        want += x * y;
        bound += std::fabs(x * y);
      }
      if (p.bias) {
        const double bv = ValueAt(p.type, o.bias.data(), j);
        want += bv;
        bound += std::fabs(bv);
      }
      const double got = ValueAt(p.type, o.c.data(), cr * p.n + j);
      if (!IsFloatingPoint(p.type)) {
        std::vector<uint8_t> exact(es);
        (void)got;
        // Integers: the reference kernel's wrapped result, bit for bit.
        std::vector<uint8_t> arow(p.k * es);
        std::memcpy(arow.data(), o.a.data() + ar * p.k * es, arow.size());
        std::vector<uint8_t> bcol(p.k * es);
        for (int64_t q = 0; q < p.k; ++q) std::memcpy(bcol.data() + q * es, o.b.data() + (q * p.n + j) * es, es);
        ReferenceGemm(p.type, 1, 1, p.k, arow.data(), p.k, bcol.data(), 1, exact.data(), 1);
        ASSERT_TRUE(SameBits(p.type, o.c.data(), cr * p.n + j, exact.data(), 0)) << where;
      } else {
        ASSERT_TRUE(WithinRoundingOfExact(p.type, got, want, bound, p.k + (p.bias ? 1 : 0)))
            << where << " row " << i << " col " << j << ": got " << got << " want " << want;
      }
    }
  }
}

TEST(RunGemmProblemsTest, MixedListsGiveEachProblemItsOwnResult) {
  for (int threads : {1, 2}) {
    std::mt19937_64 rng(99 + threads);
    std::vector<Owned> owned;
    // Streaming (<= 16 rows) of every float type, with and without gather/bias.
    owned.push_back(Make(DataType::kFP32, 1, 1030, 300, true, true, rng));
    owned.push_back(Make(DataType::kBF16, 8, 33, 131, true, false, rng));
    owned.push_back(Make(DataType::kFP16, 3, 17, 70, false, true, rng));
    owned.push_back(Make(DataType::kFP64, 2, 9, 65, true, true, rng));
    // Packed: gather/scatter of every float type, direct float and integer.
    owned.push_back(Make(DataType::kFP32, 17, 300, 70, true, true, rng));
    owned.push_back(Make(DataType::kBF16, 40, 19, 33, true, true, rng));
    owned.push_back(Make(DataType::kFP16, 17, 8, 5, true, false, rng));
    // Half types packed by our pack_fn: K over several of BLIS's KC blocks,
    // rows and columns across micro-tile edges (skx 32 x 12, haswell 6 x 16).
    owned.push_back(Make(DataType::kBF16, 65, 37, 1100, true, true, rng));
    owned.push_back(Make(DataType::kFP16, 33, 131, 777, true, true, rng));
    owned.push_back(Make(DataType::kFP16, 97, 12, 1, false, false, rng));
    owned.push_back(Make(DataType::kINT32, 33, 400, 9, false, false, rng));
    owned.push_back(Make(DataType::kFP64, 12, 7, 9, true, true, rng));
    owned.push_back(Make(DataType::kFP32, 30, 31, 29, false, false, rng));
    owned.push_back(Make(DataType::kINT64, 20, 11, 13, false, false, rng));
    owned.push_back(Make(DataType::kUINT32, 10, 5, 7, false, false, rng));
    // Degenerate sizes in the same list.
    owned.push_back(Make(DataType::kFP32, 4, 6, 0, true, true, rng));
    owned.push_back(Make(DataType::kFP32, 0, 6, 3, false, false, rng));
    std::vector<GemmProblem> problems;
    for (const Owned& o : owned) problems.push_back(o.p);
    ASSERT_TRUE(RunGemmProblems(problems, threads).ok());
    for (size_t i = 0; i < owned.size(); ++i) {
      Check(owned[i], absl::StrCat("problem ", i, " ", DataTypeName(owned[i].p.type),
                                   " threads=", threads));
    }
  }
}

}  // namespace
}  // namespace gemmserve
