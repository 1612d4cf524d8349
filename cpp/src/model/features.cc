#include "dr_kernel/model/features.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <initializer_list>
#include <stdexcept>
#include <utility>

namespace dr_kernel {

namespace {

// Feature positions. The order is the vector's order; kNames below must follow it.
enum F : int {
  kFamilyMatmul,
  kFamilyAttention,
  kFamilySoftmax,
  kFamilyRmsnorm,
  kFamilyOther,
  kConfig0,
  kShape0 = kConfig0 + feature::kMaxConfigSlots,
  kNumWarpsLog2 = kShape0 + feature::kMaxShapeSlots,
  kNumStages,
  kBlockMLog2,
  kBlockNLog2,
  kBlockKLog2,
  kBlockLog2,
  kGroupLog2,
  kBlockProductLog2,
  kProblemFlopsLog2,
  kProblemBytesLog2,
  kProblemIntensityLog2,
  kRooflineMsLog2,
  kProgramsLog2,
  kWaves,
  kTailEfficiency,
  kResidentWaves,
  kTileFlopsLog2,
  kTileBytesLog2,
  kTileIntensityLog2,
  kTrafficRatioLog2,
  kPaddingWaste,
  kLoopItersLog2,
  kElemsPerThreadLog2,
  kSmemOverLimit,
  kSmemEstimateLog2,
  kSmemFraction,
  kBlocksPerSmBySmem,
  kWarpgroupMma,
  kSmFill,
  kInflightBytesLog2,
  kAnalyticMsLog2,
  kAnalyticOverRooflineLog2,
  kRegsEstimate,
  kSpillEstimateLog2,
  kStaticMissing,
  kRegs,
  kSpillsLog2,
  kSharedLog2,
  kBlocksPerSmByRegs,
  kResidentWarpsPerSm,
  kCount
};

std::vector<std::string> MakeNames() {
  std::vector<std::string> names = {"family_matmul", "family_attention", "family_softmax", "family_rmsnorm",
                                    "family_other"};
  for (int i = 0; i < feature::kMaxConfigSlots; ++i)
    names.push_back("extra_param" + std::to_string(i) + "_log2");
  for (int i = 0; i < feature::kMaxShapeSlots; ++i) names.push_back("shape" + std::to_string(i) + "_log2");
  for (const char* n : {"num_warps_log2",
                        "num_stages",
                        "block_m_log2",
                        "block_n_log2",
                        "block_k_log2",
                        "block_log2",
                        "group_log2",
                        "block_product_log2",
                        "problem_flops_log2",
                        "problem_bytes_log2",
                        "problem_intensity_log2",
                        "roofline_ms_log2",
                        "programs_log2",
                        "waves",
                        "tail_efficiency",
                        "resident_waves",
                        "tile_flops_log2",
                        "tile_bytes_log2",
                        "tile_intensity_log2",
                        "traffic_ratio_log2",
                        "padding_waste",
                        "loop_iters_log2",
                        "elems_per_thread_log2",
                        "smem_over_limit",
                        "smem_estimate_log2",
                        "smem_fraction",
                        "blocks_per_sm_by_smem",
                        "warpgroup_mma",
                        "sm_fill",
                        "inflight_bytes_log2",
                        "analytic_ms_log2",
                        "analytic_over_roofline_log2",
                        "regs_estimate",
                        "spill_estimate_log2",
                        "static_missing",
                        "n_regs",
                        "n_spills_log2",
                        "shared_log2",
                        "blocks_per_sm_by_regs",
                        "resident_warps_per_sm"})
    names.push_back(n);
  if (names.size() != static_cast<size_t>(kCount)) throw std::logic_error("feature names out of step");
  return names;
}

using NamedValue = std::pair<std::string, Value>;

// log2 that maps non-positive values to 0 (absent sizes and flags stay finite).
double Log2(double v) { return v > 0 ? std::log2(v) : 0.0; }
double CeilDiv(double a, double b) { return std::ceil(a / b); }

// Reads named values by any of a role's spellings.
class Lookup {
 public:
  explicit Lookup(const NamedValues& values) : values_(values) {}

  // The first of `names` present as a number; NaN when none is.
  double Get(std::initializer_list<const char*> names) const {
    for (const char* name : names)
      for (const auto& [key, value] : values_)
        if (key == name && !std::holds_alternative<std::string>(value)) return ToDouble(value);
    return kNaN;
  }

 private:
  const NamedValues& values_;
};

// The launch parameters every Triton kernel has, with Triton's defaults when a config omits them.
struct Launch {
  double num_warps;
  double num_stages;
};

Launch LaunchOf(const Lookup& config) {
  Launch l{config.Get({"num_warps"}), config.Get({"num_stages"})};
  if (!(l.num_warps > 0)) l.num_warps = 4;
  if (!(l.num_stages > 0)) l.num_stages = 3;
  return l;
}

double ElementBytes(const Problem& problem) {
  const std::string& d = problem.dtype;
  if (d == "fp32" || d == "float32" || d == "tf32") return 4;
  // torch's spellings too (float8_e4m3fn, float8_e5m2): what a library kernel's problem records.
  if (d.rfind("fp8", 0) == 0 || d.rfind("float8", 0) == 0 || d == "int8" || d == "uint8") return 1;
  return 2;  // The recorded kernels are fp16; so are most tuned ones.
}

// ---------------------------------------------------------------------------------------------
// The family table: how each known kernel family turns a problem and config into estimates.
// Spellings of each role follow the Triton tutorials and the recorded tables.

constexpr std::initializer_list<const char*> kBlockM = {"BLOCK_M", "BLOCK_SIZE_M"};
constexpr std::initializer_list<const char*> kBlockN = {"BLOCK_N", "BLOCK_SIZE_N"};
constexpr std::initializer_list<const char*> kBlockK = {"BLOCK_K", "BLOCK_SIZE_K"};
constexpr std::initializer_list<const char*> kBlock = {"BLOCK", "BLOCK_SIZE"};
constexpr std::initializer_list<const char*> kGroup = {"GROUP_M", "GROUP_SIZE_M"};
constexpr std::initializer_list<const char*> kSplitK = {"SPLIT_K"};

// C = A·B with M x K and K x N operands, one program per BLOCK_M x BLOCK_N tile looping over K;
// with SPLIT_K > 1, SPLIT_K programs per tile, each over its share of K, adding into C (zeroed
// first) with atomics: SPLIT_K times the programs and the output traffic, 1/SPLIT_K of the loop.
bool EstimateMatmul(const Problem& problem, const Lookup& shape, const Lookup& config,
                    const DeviceDescription& dev, KernelEstimate* e) {
  const double m = shape.Get({"M"}), n = shape.Get({"N"}), k = shape.Get({"K"});
  const double bm = config.Get(kBlockM), bn = config.Get(kBlockN), bk = config.Get(kBlockK);
  if (!(m > 0 && n > 0 && k > 0 && bm > 0 && bn > 0 && bk > 0)) return false;
  const double split_k = config.Get(kSplitK) > 1 ? config.Get(kSplitK) : 1.0;
  const Launch launch = LaunchOf(config);
  const double es = ElementBytes(problem);
  const double tiles_m = CeilDiv(m, bm), tiles_n = CeilDiv(n, bn);
  const double k_iters = CeilDiv(CeilDiv(k, bk), split_k);
  e->programs = tiles_m * tiles_n * split_k;
  e->flops = 2 * m * n * k;
  e->bytes = es * (m * k + k * n + m * n);  // The problem's, whatever the config.
  e->loop_iters = k_iters;
  e->tile_flops = 2 * bm * bn * bk * k_iters;
  // A split-K program reads and writes its tile of C (the atomic add) instead of writing it.
  e->tile_bytes = es * ((bm + bn) * bk * k_iters + bm * bn * (split_k > 1 ? 2 : 1));
  e->padding_waste = 1 - e->flops / (e->programs * e->tile_flops);
  e->elems_per_thread = bm * bn / (32 * launch.num_warps);
  // fp32 accumulators, plus operand fragments in registers for the mma.sync path (set below).
  e->regs_per_thread = e->elems_per_thread + 32;
  // Measured on the H200 tables (exact for all 5,042 ok rows): wgmma pipelines keep num_stages
  // operand buffers, the older mma pipelines num_stages - 1.
  e->warpgroup_mma = dev.has_warpgroup_mma && launch.num_warps >= 4 && bm >= 64;
  const double buffers = e->warpgroup_mma ? launch.num_stages : std::max(1.0, launch.num_stages - 1);
  e->smem_bytes = (bm + bn) * bk * es * buffers;
  if (!e->warpgroup_mma) e->regs_per_thread += (bm + bn) * bk * es / 4 / (32 * launch.num_warps);
  e->stage_bytes = (bm + bn) * bk * es;
  e->buffers = std::min(buffers, k_iters);
  e->dot_steps = 1;  // The accumulating dot waits for its operands' stage.
  e->tensor_cores = true;
  return true;
}

// Flash-attention forward: one program per BLOCK_M query rows of one (batch, head), looping over
// BLOCK_N keys (up to the diagonal when causal).
bool EstimateAttention(const Problem& problem, const Lookup& shape, const Lookup& config,
                       const DeviceDescription& dev, KernelEstimate* e) {
  const double z = shape.Get({"Z", "BATCH"}), h = shape.Get({"H", "HEADS"});
  const double ctx = shape.Get({"N_CTX", "SEQ_LEN"}), d = shape.Get({"HEAD_DIM", "D"});
  double causal = shape.Get({"CAUSAL"});
  const double bm = config.Get(kBlockM), bn = config.Get(kBlockN);
  if (!(ctx > 0 && d > 0 && bm > 0 && bn > 0)) return false;
  const double heads = (z > 0 ? z : 1) * (h > 0 ? h : 1);
  causal = causal > 0 ? 1 : 0;
  const Launch launch = LaunchOf(config);
  const double es = ElementBytes(problem);
  const double tiles_m = CeilDiv(ctx, bm);
  // Key blocks visited, summed over the query blocks of one head.
  double key_blocks = 0;
  if (causal) {
    for (double i = 0; i < tiles_m; ++i) key_blocks += CeilDiv(std::min((i + 1) * bm, ctx), bn);
  } else {
    key_blocks = tiles_m * CeilDiv(ctx, bn);
  }
  e->programs = tiles_m * heads;
  e->flops = 4 * heads * ctx * ctx * d * (causal ? 0.5 : 1.0);
  e->bytes = 4 * heads * ctx * d * es;
  e->loop_iters = key_blocks / tiles_m;
  e->tile_flops = 4 * bm * bn * d * e->loop_iters;
  e->tile_sfu_ops = (bm * bn + bm) * e->loop_iters;  // exp2 of every score, and of the rescale.
  e->tile_bytes = es * (2 * bm * d + 2 * bn * d * e->loop_iters);
  e->padding_waste = std::max(0.0, 1 - e->flops / (e->programs * e->tile_flops));
  e->elems_per_thread = (bm * d + bm * bn) / (32 * launch.num_warps);
  // fp32 output accumulator and scores, the fp16 probabilities, the row statistics.
  e->regs_per_thread = (bm * d + 1.5 * bm * bn) / (32 * launch.num_warps) + 32;
  e->warpgroup_mma = dev.has_warpgroup_mma && launch.num_warps >= 4 && bm >= 64;
  // Q stays resident; K and V tiles are multi-buffered. Fitted to the H200 tables (exact for the
  // wgmma rows; the mma rows also stage the P tile).
  const double q = bm * d * es, kv = 2 * bn * d * es;
  const double stages = launch.num_stages;
  if (e->warpgroup_mma) {
    e->smem_bytes = stages <= 1 ? q + kv / 2 : q + stages * kv;
  } else {
    e->smem_bytes = (stages <= 1 ? q + kv / 2 : q + (stages - 1) * kv) + (bm < 64 ? bm * bn * es : 0);
  }
  e->stage_bytes = kv;
  e->buffers = std::min(e->loop_iters, e->warpgroup_mma ? stages : std::max(1.0, stages - 1));
  // Q·Kᵀ, then the row maximum, exponentials and sums it waits for, then P·V: two dependent dots
  // and the reductions between them, about half a step more.
  e->dot_steps = 2.5;
  e->tensor_cores = true;
  return true;
}

// Row-wise kernels (softmax, rmsnorm): one program per row, looping over BLOCK columns `passes`
// times; `flops_per_elem` is the arithmetic per element.
bool EstimateRowwise(const Problem& problem, const Lookup& shape, const Lookup& config, double passes,
                     double flops_per_elem, double sfu_per_elem, KernelEstimate* e) {
  const double rows = shape.Get({"rows", "n_rows", "M"}), cols = shape.Get({"cols", "n_cols", "N"});
  const double block = config.Get(kBlock);
  if (!(rows > 0 && cols > 0 && block > 0)) return false;
  const Launch launch = LaunchOf(config);
  const double es = ElementBytes(problem);
  const double iters = CeilDiv(cols, block);
  e->programs = rows;
  e->flops = flops_per_elem * rows * cols;
  e->bytes = 2 * es * rows * cols;
  e->loop_iters = passes * iters;
  e->tile_flops = flops_per_elem * iters * block;
  e->tile_sfu_ops = sfu_per_elem * iters * block;
  e->tile_bytes = es * cols * (passes + 1);
  e->padding_waste = 1 - cols / (iters * block);
  e->elems_per_thread = block / (32 * launch.num_warps);
  // About three fp32 values live per element (the loaded chunk and the running statistics).
  e->regs_per_thread = 3 * e->elems_per_thread + 16;
  e->warpgroup_mma = false;
  e->smem_bytes = launch.num_warps > 1 ? 8 * launch.num_warps : 0;  // Cross-warp reduction scratch.
  e->stage_bytes = es * block;
  e->buffers = 1;  // The loop carries a reduction; loads are not software-pipelined.
  e->tensor_cores = false;
  return true;
}

bool EstimateSoftmax(const Problem& problem, const Lookup& shape, const Lookup& config,
                     const DeviceDescription&, KernelEstimate* e) {
  // Three exponentials per element: two in the online max/sum pass, one in the output pass.
  return EstimateRowwise(problem, shape, config, /*passes=*/2, /*flops_per_elem=*/5, /*sfu_per_elem=*/3, e);
}

bool EstimateRmsnorm(const Problem& problem, const Lookup& shape, const Lookup& config,
                     const DeviceDescription&, KernelEstimate* e) {
  return EstimateRowwise(problem, shape, config, /*passes=*/2, /*flops_per_elem=*/4, /*sfu_per_elem=*/0, e);
}

// True for the parameter names that have their own features (blocks, group, warps, stages).
bool IsRole(const std::string& name) {
  for (const auto& role : {kBlockM, kBlockN, kBlockK, kBlock, kGroup, kSplitK})
    for (const char* spelling : role)
      if (name == spelling) return true;
  return name == "num_warps" || name == "num_stages";
}

struct FamilyModel {
  const char* family;
  int one_hot;  // Position of the family's indicator feature.
  bool (*estimate)(const Problem&, const Lookup&, const Lookup&, const DeviceDescription&, KernelEstimate*);
};

constexpr FamilyModel kFamilies[] = {
    {"matmul", kFamilyMatmul, EstimateMatmul},
    {"attention", kFamilyAttention, EstimateAttention},
    {"softmax", kFamilySoftmax, EstimateSoftmax},
    {"rmsnorm", kFamilyRmsnorm, EstimateRmsnorm},
};

// The problem's numeric shape dimensions are exactly `names` (a string such as a dtype is not one).
bool ShapeIs(const Problem& problem, std::initializer_list<const char*> names) {
  size_t numeric = 0;
  for (const auto& [key, value] : problem.shape) {
    if (std::holds_alternative<std::string>(value)) continue;
    ++numeric;
    if (std::none_of(names.begin(), names.end(), [&](const char* n) { return key == n; })) return false;
  }
  return numeric == names.size();
}

// The family model of `problem`: its family's by name; else, with `by_shape`, matmul's for a shape
// of exactly M x N x K (whose estimate still needs BLOCK_M, BLOCK_N and BLOCK_K in the config).
const FamilyModel* FindFamily(const Problem& problem, bool by_shape) {
  for (const auto& f : kFamilies)
    if (problem.family == f.family) return &f;
  if (by_shape && ShapeIs(problem, {"M", "N", "K"})) return &kFamilies[0];
  return nullptr;
}

// `d` with its special-function and L2 rates scaled from the H200's by SMs x boost clock (the H200:
// 132 SMs at 1.98 GHz).
DeviceDescription AtClock(DeviceDescription d, double boost_ghz) {
  const double ratio = d.sm_count * boost_ghz / (132 * 1.98);
  d.sfu_tops *= ratio;
  d.l2_tb_per_s *= ratio;
  return d;
}

// The models KnownDevice() knows, each with the text torch's device name contains, in the order
// they are matched.
const std::vector<std::pair<std::string, DeviceDescription>>& KnownDevices() {
  // Data-sheet figures over the H200's (the defaults); mma.sync is the whole tensor-core rate of a
  // GPU without warp-group MMA. Blackwell's asynchronous MMA pipelines as Hopper's does.
  static const std::vector<std::pair<std::string, DeviceDescription>> known = {
      {"H200", DeviceDescription{}},
      {"H100 PCIe", AtClock({.name = "NVIDIA H100 PCIe", .sm_count = 114, .peak_tflops = 756, .dram_tb_per_s = 2.0,
                             .fp32_tflops = 51},
                            1.755)},
      // SXM5: the H200's chip with HBM3.
      {"H100", {.name = "NVIDIA H100", .dram_tb_per_s = 3.35}},
      // SXM4 80 GB: 164 KB of shared memory an SM, 163 a block.
      {"A100", AtClock({.name = "NVIDIA A100", .sm_count = 108, .smem_per_block = 166912, .smem_per_sm = 167936,
                        .has_warpgroup_mma = false, .peak_tflops = 312, .dram_tb_per_s = 2.039,
                        .mma_sync_fraction = 1.0, .fp32_tflops = 19.5},
                       1.41)},
      // Ada: 100 KB of shared memory, 1536 threads and 24 blocks an SM.
      {"L40S", AtClock({.name = "NVIDIA L40S", .sm_count = 142, .smem_per_block = 101376, .smem_per_sm = 102400,
                        .max_threads_per_sm = 1536, .max_blocks_per_sm = 24, .has_warpgroup_mma = false,
                        .peak_tflops = 362, .dram_tb_per_s = 0.864, .mma_sync_fraction = 1.0, .fp32_tflops = 91.6},
                       2.52)},
      {"B200", AtClock({.name = "NVIDIA B200", .sm_count = 148, .peak_tflops = 2250, .dram_tb_per_s = 8.0,
                        .fp32_tflops = 75},
                       1.965)}};
  return known;
}

}  // namespace

const DeviceDescription* KnownDevice(const std::string& name) {
  for (const auto& [text, device] : KnownDevices())
    if (name.find(text) != std::string::npos) return &device;
  return nullptr;
}

const DeviceDescription& FeatureExtractor::DeviceOf(const Problem& problem) const {
  if (problem.device.empty()) return device_;
  const DeviceDescription* known = KnownDevice(problem.device);
  for (const auto& [model, described] : others_)
    if (model == known) return described;
  return device_;  // Not a known model, or the model's own.
}

double DeviceDescription::RooflineMs(double flops, double bytes) const {
  const double compute_ms = flops / (peak_tflops * 1e9);
  const double memory_ms = bytes / (dram_tb_per_s * 1e9);
  return std::max(compute_ms, memory_ms) + launch_overhead_ms;
}

double FeatureExtractor::AnalyticMs(const KernelEstimate& e, double num_warps,
                                    const DeviceDescription& device) const {
  if (!e.known) return kNaN;
  const double sms = device.sm_count;
  // Resident programs per SM by shared memory, threads and (estimated) registers.
  double resident = std::floor(device.max_threads_per_sm / (32 * num_warps));
  if (e.smem_bytes > 0) resident = std::min(resident, std::floor(device.smem_per_sm / e.smem_bytes));
  const double regs = std::min<double>(e.regs_per_thread, device.max_regs_per_thread);
  if (regs > 0 && !e.tensor_cores)
    resident = std::min(resident, std::floor(device.regs_per_sm / (regs * 32 * num_warps)));
  resident = std::clamp(resident, 1.0, static_cast<double>(device.max_blocks_per_sm));
  // Compute: the busiest SM runs ceil(P / SMs) programs at its share of the peak rates. Tensor
  // cores run at full rate from one warp group; CUDA cores and SFUs need many resident warps.
  const double per_sm = std::ceil(e.programs / sms);
  const double occupancy = std::min(1.0, resident * num_warps / device.warps_to_saturate);
  double compute_ms;
  if (e.tensor_cores) {
    const double rate = device.peak_tflops * (e.warpgroup_mma ? 1.0 : device.mma_sync_fraction) * 1e9 / sms;
    compute_ms = per_sm * e.tile_flops / rate;
  } else {
    compute_ms = per_sm * e.tile_flops / (device.fp32_tflops * 1e9 / sms * occupancy);
  }
  const double sfu_ms =
      per_sm * e.tile_sfu_ops / (device.sfu_tops * 1e9 / sms * (e.tensor_cores ? 1.0 : occupancy));
  compute_ms = e.tensor_cores ? std::max(compute_ms, sfu_ms) : compute_ms + sfu_ms;
  // Memory: the fewest bytes from DRAM, and every tile's loads through L2; bandwidth is capped by
  // the bytes in flight (Little's law).
  const double inflight = std::min(e.programs, sms * resident) * e.buffers * e.stage_bytes;
  const double dram = std::min(device.dram_tb_per_s * 1e9, inflight / (device.memory_latency_us * 1e-3));
  // Spilled registers go to local memory and back once per loop iteration, through L2.
  const double spills = std::max(0.0, e.regs_per_thread - device.max_regs_per_thread);
  const double spill_bytes = e.programs * 32 * num_warps * spills * 4 * 2 * std::max(1.0, e.loop_iters);
  const double memory_ms = std::max(e.bytes / std::max(dram, 1.0),
                                    (e.programs * e.tile_bytes + spill_bytes) / (device.l2_tb_per_s * 1e9));
  // Latency: every iteration of the loop waits on its chain of dependent dots, which only other
  // resident programs hide (registers count here, as they bound how many programs are resident).
  double latency_ms = 0;
  if (e.dot_steps > 0 && device.dot_step_latency_us > 0) {
    double hiding = resident;
    if (regs > 0) hiding = std::min(hiding, std::floor(device.regs_per_sm / (regs * 32 * num_warps)));
    hiding = std::max(hiding, 1.0);
    latency_ms = std::ceil(per_sm / hiding) * std::max(1.0, e.loop_iters) * e.dot_steps *
                 device.dot_step_latency_us * 1e-3;
  }
  return std::max({compute_ms, memory_ms, latency_ms}) + device.launch_overhead_ms;
}

bool FeatureExtractor::AnalyticTwins(const Problem& problem, const NamedValues& a, const NamedValues& b) const {
  const KernelEstimate x = Estimate(problem, a), y = Estimate(problem, b);
  if (!x.known || !y.known) return false;
  const Launch la = LaunchOf(Lookup(a)), lb = LaunchOf(Lookup(b));
  if (la.num_warps != lb.num_warps || la.num_stages != lb.num_stages) return false;
  auto fields = [](const KernelEstimate& e) {
    return std::array{e.programs,   e.tile_flops,       e.tile_sfu_ops,    e.tile_bytes, e.padding_waste,
                      e.loop_iters, e.elems_per_thread, e.regs_per_thread, e.smem_bytes, e.stage_bytes,
                      e.buffers,    e.dot_steps};
  };
  const auto xs = fields(x), ys = fields(y);
  for (size_t i = 0; i < xs.size(); ++i)
    if (std::abs(xs[i] - ys[i]) > 1e-9 * std::max(std::abs(xs[i]), std::abs(ys[i]))) return false;
  return x.warpgroup_mma == y.warpgroup_mma && x.tensor_cores == y.tensor_cores;
}

StaticFeatures StaticFeatures::From(const Measurement& m) {
  StaticFeatures s;
  s.n_regs = m.n_regs;
  s.n_spills = m.n_spills;
  s.shared = m.shared;
  return s;
}

FeatureExtractor::FeatureExtractor(DeviceDescription device) : device_(std::move(device)) {
  // Another model's limits and tensor-core path, this device's rates: a model learns from the
  // tables of its own device, where the rates never vary, and reads another device's times as
  // another problem's size. On eight H200-table problems recorded on an H100, the H100's bandwidth
  // in the features cost the shipped agent and the leave-one-problem-out agents measurements
  // (geomean 1.98 -> 2.51, 3.27 -> 4.00), though it helped families held out (4.15 -> 3.14), whose
  // prior is the analytic time alone (benchmarks/agent.md, "Tables from another GPU").
  const DeviceDescription* own = KnownDevice(device_.name);
  for (const auto& [text, known] : KnownDevices()) {
    if (&known == own) continue;
    DeviceDescription d = device_;
    d.name = known.name;
    d.sm_count = known.sm_count;
    d.smem_per_block = known.smem_per_block;
    d.smem_per_sm = known.smem_per_sm;
    d.regs_per_sm = known.regs_per_sm;
    d.max_threads_per_sm = known.max_threads_per_sm;
    d.max_blocks_per_sm = known.max_blocks_per_sm;
    d.has_warpgroup_mma = known.has_warpgroup_mma;
    d.mma_sync_fraction = known.mma_sync_fraction;
    d.max_regs_per_thread = known.max_regs_per_thread;
    others_.emplace_back(&known, std::move(d));
  }
}

size_t FeatureExtractor::size() { return kCount; }

const std::vector<std::string>& FeatureExtractor::names() {
  static const std::vector<std::string> names = MakeNames();
  return names;
}

std::vector<std::string> FeatureExtractor::KnownFamilies() {
  std::vector<std::string> out;
  for (const auto& f : kFamilies) out.push_back(f.family);
  return out;
}

FeatureExtractor FeatureExtractor::ByShape() const {
  FeatureExtractor out = *this;
  out.by_shape_ = true;
  return out;
}

size_t FeatureIndex(const std::string& name) {
  const auto& names = FeatureExtractor::names();
  const auto it = std::find(names.begin(), names.end(), name);
  if (it == names.end()) throw std::out_of_range("there is no cost-model feature called '" + name + "'");
  return static_cast<size_t>(it - names.begin());
}

KernelEstimate FeatureExtractor::Estimate(const Problem& problem, const NamedValues& config) const {
  KernelEstimate e;
  if (const FamilyModel* family = FindFamily(problem, by_shape_))
    e.known = family->estimate(problem, Lookup(problem.shape), Lookup(config), DeviceOf(problem), &e);
  if (!e.known) e = KernelEstimate{};
  return e;
}

double FeatureExtractor::LogRooflineMs(const Problem& problem) const {
  const FamilyModel* family = FindFamily(problem, by_shape_);
  if (!family) return 0;
  // The problem's flops and bytes do not depend on the config; any config that names the blocks
  // will do, so ask with blocks of 64 (and BLOCK for row-wise kernels).
  const NamedValues probe = {
      {"BLOCK_M", int64_t{64}}, {"BLOCK_N", int64_t{64}}, {"BLOCK_K", int64_t{64}}, {"BLOCK", int64_t{1024}}};
  KernelEstimate e;
  const DeviceDescription& device = DeviceOf(problem);
  if (!family->estimate(problem, Lookup(problem.shape), Lookup(probe), device, &e)) return 0;
  return std::log(device.RooflineMs(e.flops, e.bytes));
}

std::vector<double> FeatureExtractor::Extract(const Problem& problem, const NamedValues& config,
                                              const StaticFeatures* static_features) const {
  std::vector<double> out(kCount);
  Extract(problem, config, static_features, out.data());
  return out;
}

void FeatureExtractor::Extract(const Problem& problem, const NamedValues& config,
                               const StaticFeatures* static_features, double* out) const {
  std::fill(out, out + kCount, 0.0);
  const DeviceDescription& device = DeviceOf(problem);
  const Lookup cfg(config);
  const FamilyModel* family = FindFamily(problem, by_shape_);

  // Generic: log2 of every numeric value, by position (bools stay 0/1, strings 0).
  auto slot = [](const Value& v) {
    if (std::holds_alternative<std::string>(v)) return 0.0;
    if (std::holds_alternative<bool>(v)) return ToDouble(v);
    return Log2(ToDouble(v));
  };
  // Slots follow the names' alphabetical order, so that a space that lists its parameters in
  // another order than the recorded tables still gets the same features. Config slots take only
  // the parameters without a named feature below: the same slot holding BLOCK_K for one family
  // and BLOCK_M for another taught trees false lessons across families.
  auto fill_sorted = [&](const NamedValues& values, int first, int slots, bool skip_roles) {
    const NamedValue* sorted[16];
    size_t n = 0;
    for (size_t i = 0; i < values.size() && n < 16; ++i)
      if (!skip_roles || !IsRole(values[i].first)) sorted[n++] = &values[i];
    std::sort(sorted, sorted + n,
              [](const NamedValue* a, const NamedValue* b) { return a->first < b->first; });
    for (size_t i = 0; i < n && i < static_cast<size_t>(slots); ++i) out[first + i] = slot(sorted[i]->second);
  };
  fill_sorted(config, kConfig0, feature::kMaxConfigSlots, /*skip_roles=*/true);
  fill_sorted(problem.shape, kShape0, feature::kMaxShapeSlots, /*skip_roles=*/false);

  // Generic: the launch parameters and block sizes by their usual names.
  const Launch launch = LaunchOf(cfg);
  out[kNumWarpsLog2] = Log2(launch.num_warps);
  out[kNumStages] = launch.num_stages;
  out[kBlockMLog2] = Log2(cfg.Get(kBlockM));
  out[kBlockNLog2] = Log2(cfg.Get(kBlockN));
  out[kBlockKLog2] = Log2(cfg.Get(kBlockK));
  out[kBlockLog2] = Log2(cfg.Get(kBlock));
  out[kGroupLog2] = Log2(cfg.Get(kGroup));
  // Product of every BLOCK* parameter: the tile's element count for kernels the table lacks.
  double block_product = 1;
  for (const auto& [name, value] : config)
    if (name.rfind("BLOCK", 0) == 0 && !std::holds_alternative<std::string>(value))
      block_product *= std::max(1.0, ToDouble(value));
  out[kBlockProductLog2] = Log2(block_product);
  double elems_per_thread = block_product / (32 * launch.num_warps);

  // Derived, for families the table knows.
  KernelEstimate e;
  if (family) e.known = family->estimate(problem, Lookup(problem.shape), cfg, device, &e);
  // Matched by shape, a config that does not name the model's blocks is a kernel not known.
  const bool described = family && (e.known || problem.family == family->family);
  out[described ? family->one_hot : kFamilyOther] = 1;
  const double sms = device.sm_count;
  double blocks_per_sm_smem = device.max_blocks_per_sm;
  if (e.known) {
    out[kProblemFlopsLog2] = Log2(e.flops);
    out[kProblemBytesLog2] = Log2(e.bytes);
    out[kProblemIntensityLog2] = Log2(e.flops / e.bytes);
    out[kRooflineMsLog2] = Log2(device.RooflineMs(e.flops, e.bytes));
    out[kProgramsLog2] = Log2(e.programs);
    const double waves = e.programs / sms;
    out[kWaves] = waves;
    out[kTailEfficiency] = e.programs / (std::ceil(waves) * sms);
    out[kTileFlopsLog2] = Log2(e.tile_flops);
    out[kTileBytesLog2] = Log2(e.tile_bytes);
    out[kTileIntensityLog2] = Log2(e.tile_flops / e.tile_bytes);
    out[kTrafficRatioLog2] = Log2(e.programs * e.tile_bytes / e.bytes);
    out[kPaddingWaste] = e.padding_waste;
    out[kLoopItersLog2] = Log2(e.loop_iters);
    elems_per_thread = e.elems_per_thread;
    out[kSmemEstimateLog2] = Log2(e.smem_bytes);
    out[kSmemFraction] = e.smem_bytes / device.smem_per_block;
    out[kSmemOverLimit] = e.smem_bytes > device.smem_per_block ? 1 : 0;
    if (e.smem_bytes > 0)
      blocks_per_sm_smem =
          std::min<double>(device.max_blocks_per_sm, std::floor(device.smem_per_sm / e.smem_bytes));
    out[kWarpgroupMma] = e.warpgroup_mma ? 1 : 0;
    out[kSmFill] = std::min(1.0, e.programs / sms);
    const double resident_by_smem = std::max(
        1.0, std::min(blocks_per_sm_smem, std::floor(device.max_threads_per_sm / (32 * launch.num_warps))));
    out[kInflightBytesLog2] = Log2(std::min(e.programs, sms * resident_by_smem) * e.buffers * e.stage_bytes);
    const double analytic = AnalyticMs(e, launch.num_warps, device);
    out[kAnalyticMsLog2] = Log2(analytic);
    out[kAnalyticOverRooflineLog2] = Log2(analytic / device.RooflineMs(e.flops, e.bytes));
    out[kRegsEstimate] = e.regs_per_thread;
    out[kSpillEstimateLog2] = std::log2(1.0 + std::max(0.0, e.regs_per_thread - device.max_regs_per_thread));
  }
  out[kElemsPerThreadLog2] = Log2(elems_per_thread);
  out[kBlocksPerSmBySmem] = blocks_per_sm_smem;

  // Occupancy: resident blocks per SM from shared memory, registers (when known) and threads.
  const double threads = 32 * launch.num_warps;
  double resident = std::min(blocks_per_sm_smem, std::floor(device.max_threads_per_sm / threads));
  if (static_features && static_features->known()) {
    const StaticFeatures& s = *static_features;
    out[kRegs] = s.n_regs;
    out[kSpillsLog2] = std::log2(1.0 + std::max(0, s.n_spills));
    out[kSharedLog2] = std::log2(1.0 + std::max<int64_t>(0, s.shared));
    const double regs_per_block = std::max(1, s.n_regs) * threads;
    const double by_regs = std::floor(device.regs_per_sm / regs_per_block);
    out[kBlocksPerSmByRegs] = by_regs;
    if (s.shared > 0)
      resident = std::min(resident, std::floor(static_cast<double>(device.smem_per_sm) / s.shared));
    resident = std::min(resident, by_regs);
  } else {
    out[kStaticMissing] = 1;
    out[kRegs] = -1;
    out[kSpillsLog2] = -1;
    out[kSharedLog2] = -1;
    out[kBlocksPerSmByRegs] = -1;
  }
  resident = std::max(resident, 0.0);
  out[kResidentWarpsPerSm] = resident * launch.num_warps;
  if (e.known) out[kResidentWaves] = resident > 0 ? e.programs / (sms * resident) : 1e3;
}

}  // namespace dr_kernel
