// Features of a (problem, configuration) pair for the cost model: a fixed-length vector of numbers
// that says, in a GPU's terms, what launching the kernel with that configuration will do.
//
// Every family gets generic features (log2 of each config and shape value: block sizes, group,
// warps and stages by name, other parameters by position in name order; the usual Triton launch
// parameters, static analysis of the compiled kernel when known). Families whose semantics
// are known (matmul, attention, softmax, rmsnorm) also get derived features: program instances,
// waves over the SMs, tail-wave efficiency, work and traffic per program, padding waste, loop trip
// counts, registers' worth of live elements per thread, an estimate of shared memory. The family
// knowledge lives in one table in features.cc; any other kernel falls back to generic features,
// unless the extractor describes by shape too (ByShape()): then a family of another name whose
// shape is exactly M x N x K is described as a matmul.
#ifndef DR_KERNEL_MODEL_FEATURES_H_
#define DR_KERNEL_MODEL_FEATURES_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dr_kernel/problem.h"
#include "dr_kernel/value.h"

namespace dr_kernel {

// The GPU that features describe. Defaults are an NVIDIA H200 (SXM, 132 SMs, Hopper).
struct DeviceDescription {
  std::string name = "NVIDIA H200";
  int sm_count = 132;
  int64_t smem_per_block = 232448;  // Most shared memory one block may use (opt-in), bytes.
  int64_t smem_per_sm = 233472;     // Shared memory of one SM, bytes.
  int regs_per_sm = 65536;          // 32-bit registers of one SM.
  int max_threads_per_sm = 2048;
  int max_blocks_per_sm = 32;
  // Hopper's warp-group MMA (wgmma): used by Triton when a dot has >= 4 warps and >= 64 rows; its
  // pipelines keep num_stages operand buffers in shared memory instead of num_stages - 1.
  bool has_warpgroup_mma = true;
  double peak_tflops = 989.0;         // Dense fp16 tensor-core peak.
  double dram_tb_per_s = 4.8;         // HBM bandwidth.
  double launch_overhead_ms = 0.004;  // Launch and ramp-up time that even an empty kernel costs.
  double l2_tb_per_s = 12.0;          // L2 bandwidth that re-read tiles are served at.
  double memory_latency_us = 1.0;     // Loaded DRAM latency: bytes in flight / latency bounds bandwidth.
  double mma_sync_fraction = 0.5;     // Tensor-core rate of the older mma.sync path relative to wgmma.
  double fp32_tflops = 67.0;          // CUDA-core rate, for kernels without dots.
  double sfu_tops = 4.2;              // Special-function unit rate (exp2, rsqrt): 16 per clock per SM.
  int warps_to_saturate = 16;         // Resident warps an SM needs to keep CUDA cores and SFUs busy.
  int max_regs_per_thread = 255;      // Beyond this the compiler spills to local memory.
  // Latency one dependent tensor-core step (issue, wait, the barrier of its operands) adds to an
  // iteration of a pipelined loop, hidden only by other resident programs. Fitted to the H200
  // tables' rank order: with 0.2 us the analytic time's rank correlation over the 20 tables of the
  // modelled families rises from 0.69 to 0.72 (attention's from 0.73 to 0.82), and on the causal
  // attention table the configs predicted faster than its best fall from 39 to 27. A model saved
  // before this term existed reads 0.
  double dot_step_latency_us = 0.2;

  // The roofline time of a problem: the larger of its compute and memory time plus launch overhead.
  double RooflineMs(double flops, double bytes) const;
};

// The description of a GPU by the name a problem records (torch's device name, e.g. "NVIDIA H100
// 80GB HBM3"), for the models this project knows: H200, H100 (SXM and PCIe), A100, L40S and B200;
// nullptr for any other. Limits and peaks are NVIDIA's data-sheet and occupancy-calculator figures
// (as python/dr_kernel/analysis.py has them); the H200's fitted terms (latencies) are kept on the
// other models, the L2 and special-function rates scaled by SMs x clock.
const DeviceDescription* KnownDevice(const std::string& name);

// What static analysis of a compiled kernel reports (registers, spills, shared memory); -1 when
// unknown.
struct StaticFeatures {
  int n_regs = -1;
  int n_spills = -1;
  int64_t shared = -1;

  // The static fields of a measurement (all -1 when it has none).
  static StaticFeatures From(const Measurement& m);
  bool known() const { return n_regs >= 0; }
};

// What the family table knows about one launch; every field is 0 when the family is unknown.
struct KernelEstimate {
  bool known = false;           // True when a family model computed the fields below.
  double programs = 0;          // Program instances (tiles) in the grid.
  double flops = 0;             // Useful floating-point operations of the problem.
  double bytes = 0;             // Fewest bytes the problem must move to and from DRAM.
  double tile_flops = 0;        // Operations one program performs, padding and masked work included.
  double tile_sfu_ops = 0;      // Special-function operations (exponentials) one program performs.
  double tile_bytes = 0;        // Bytes one program loads and stores.
  double padding_waste = 0;     // Fraction of the work done on padding or masked-out elements.
  double loop_iters = 0;        // Trip count of a program's main loop.
  double elems_per_thread = 0;  // Live accumulator/row elements per thread.
  double regs_per_thread = 0;   // Estimated 32-bit registers per thread the kernel needs.
  double smem_bytes = 0;        // Estimated shared memory per program, bytes.
  double stage_bytes = 0;       // Bytes one program loads per pipeline stage (loop iteration).
  double buffers = 1;           // Loads a program keeps in flight (pipeline depth).
  double dot_steps = 0;         // Dependent tensor-core steps in one iteration of the main loop.
  bool warpgroup_mma = false;   // The dot runs as Hopper wgmma.
  bool tensor_cores = false;    // The main loop is a dot (else CUDA-core arithmetic).
};

// Turns (problem, config, optional static features) into a fixed-length feature vector.
// Cheap to copy; thread-safe (const) after construction.
class FeatureExtractor {
 public:
  explicit FeatureExtractor(DeviceDescription device = {});

  // This extractor, describing also the families the table does not name by their shape: one
  // whose numeric shape is exactly {M, N, K} as a matmul (an FP8 or fused GEMM of a user's,
  // whose config names BLOCK_M, BLOCK_N and BLOCK_K). A cost model describes so the families it
  // was not trained on (CostModel::FeaturesFor), never those whose rows it learned by name.
  FeatureExtractor ByShape() const;
  bool by_shape() const { return by_shape_; }

  // Number of features, their names (in vector order) and the device.
  static size_t size();
  static const std::vector<std::string>& names();
  const DeviceDescription& device() const { return device_; }
  // The GPU that describes `problem`. Where its recorded device is a model KnownDevice() knows
  // other than device()'s: that model's SMs, shared memory, threads, blocks, registers and
  // tensor-core path, with device()'s rates (peaks, bandwidths, latencies). device() itself
  // otherwise (no device recorded, an unknown one, or the same model, whose description may carry
  // fitted terms). Every feature, estimate and analytic time of a problem is computed on it, so
  // that a config over an A100's shared memory is over its limit there, and waves count its SMs.
  const DeviceDescription& DeviceOf(const Problem& problem) const;

  // The feature vector; `static_features` may be nullptr (the "missing" indicator is then set).
  std::vector<double> Extract(const Problem& problem, const NamedValues& config,
                              const StaticFeatures* static_features = nullptr) const;
  // Writes size() features into `out`.
  void Extract(const Problem& problem, const NamedValues& config, const StaticFeatures* static_features,
               double* out) const;

  // What the family table knows about the launch (estimate.known is false for unknown families).
  KernelEstimate Estimate(const Problem& problem, const NamedValues& config) const;
  // log(roofline ms) of the problem; 0 for families the table does not know. Depends on the
  // problem only, not on the config.
  double LogRooflineMs(const Problem& problem) const;
  // A first-principles time of one launch, ms: the busiest SM's share of the tiles at the
  // tensor-core rate (or the CUDA-core and special-function rates, scaled by how many warps the
  // SM can hold), against the traffic (spills included) at the bandwidth that the loads in flight
  // can sustain. Crude, but it knows about waves, padding, pipelining and register pressure; NaN
  // for unknown families. The cost model predicts log time relative to it.
  double AnalyticMs(const KernelEstimate& e, double num_warps, const DeviceDescription& device) const;
  // The same on device().
  double AnalyticMs(const KernelEstimate& e, double num_warps) const { return AnalyticMs(e, num_warps, device_); }

  // Whether the analytic estimate cannot tell config `a` from `b` of `problem`: the same grid,
  // tiles, loop, registers, shared memory and pipeline, and the same warps and stages (a matmul tile
  // and its transpose on a square problem; two GROUP_M orders of one tile). False when the family
  // has no analytic model.
  bool AnalyticTwins(const Problem& problem, const NamedValues& a, const NamedValues& b) const;

  // Families with derived features by name, e.g. {"matmul", "attention", "softmax", "rmsnorm"}.
  static std::vector<std::string> KnownFamilies();

 private:
  DeviceDescription device_;
  bool by_shape_ = false;
  // What DeviceOf() gives each other known model (KnownDevice()'s entry).
  std::vector<std::pair<const DeviceDescription*, DeviceDescription>> others_;
};

// Positions of some features in the vector, for tests and for masking.
namespace feature {
constexpr int kMaxConfigSlots = 6;  // log2 of the first 6 other config values, by name.
constexpr int kMaxShapeSlots = 6;   // log2 of the first 6 shape values, by name.
}  // namespace feature

// The position of the feature called `name`; throws std::out_of_range for an unknown name.
size_t FeatureIndex(const std::string& name);

}  // namespace dr_kernel

#endif  // DR_KERNEL_MODEL_FEATURES_H_
