// What gemmserve-bench's case families share (gemmserve_bench.cc defines
// it): the thread count, the check-then-time loop, rate counters, cache
// eviction for cold-weights cases, and registration at the current limits
// checkpoint. A family in its own file (moe_layer_bench.cc) registers its
// cases through these, so that they sit between limits measured before and
// after them like every other group.
#ifndef GEMMSERVE_BENCH_BENCH_HARNESS_H_
#define GEMMSERVE_BENCH_BENCH_HARNESS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "benchmark/benchmark.h"
#include "server/tensor/tensor.h"

namespace gemmserve {
namespace bench {

// --threads: the threads of every kernel call.
int Threads();

// A case that cannot run (memory, a kernel's status): skipped with `why`
// and counted, so the process exits non-zero.
void FailCase(benchmark::State& state, const std::string& why);

// Checks the first run of case `name` (its output poisoned first), then
// times `call`, `before_each` untimed before every call. The wall-clock
// seconds spent in `call`, or nothing when the case was skipped.
std::optional<double> CheckAndTime(benchmark::State& state, const std::string& name, Tensor* output,
                                   const std::function<absl::Status()>& call,
                                   const std::function<absl::Status()>& check,
                                   const std::function<void()>& before_each = nullptr);

// counters[key] = per_call * calls / seconds.
void SetRate(benchmark::State& state, const char* key, double per_call, double seconds);

// Writes back and invalidates [data, data + bytes) from every cache level.
void EvictFromCaches(const void* data, int64_t bytes);

// Registers a case at the current limits checkpoint; EndGroup registers the
// limits after a group of cases.
void Register(const std::string& name, std::function<void(benchmark::State&)> fn);
void EndGroup();

// Frees what every family holds (their weights and inputs) before a family
// builds its own: peak memory is one family's.
void EnterOwnFamily();

}  // namespace bench
}  // namespace gemmserve

#endif  // GEMMSERVE_BENCH_BENCH_HARNESS_H_
