// gemmserve-bench's mixture-of-experts layer cases (issue 41):
//
//   MoeLayer/fused/<dtype>/<shape>/<M>     RunMoeLayer on resident weights
//   MoeLayer/composed/<dtype>/<shape>/<M>  the same layer as two resident
//                                          GroupedMatMul calls with the
//                                          activation and the weighted sum
//                                          between and after them, in-process
//
// over the layer shapes olmoe-layer (K 2048, I 1024, G 64, S 8, gate/up
// fused) and mixtral-small-layer (K 1024, I 3584, G 8, S 2), FP32 and BF16,
// routing given (uniform random, the same for both). Counters as the
// GroupedMatMul cases': GFLOPS, bytes_touched (the distinct experts' three
// matrices one call reads), GBps_effective, distinct_groups, and panels (1
// where the weights are packed at load). Decode cases
// (M <= 64) start each call with those experts evicted. Each case's first
// output is checked against the other implementation's (within the layer's
// bound for the type), the GroupedMatMul kernels beneath both being
// row-checked in their own cases.
#ifndef GEMMSERVE_BENCH_MOE_LAYER_BENCH_H_
#define GEMMSERVE_BENCH_MOE_LAYER_BENCH_H_

namespace gemmserve {

// Registers the cases, a limits checkpoint after each (shape, type) group.
void RegisterMoeLayerCases();

// Frees the layer cases' weights and inputs (another family is starting).
void ReleaseMoeLayerCases();

}  // namespace gemmserve

#endif  // GEMMSERVE_BENCH_MOE_LAYER_BENCH_H_
