#include "dr_kernel/model/features.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "dr_kernel/table.h"

namespace dr_kernel {
namespace {

double At(const std::vector<double>& f, const char* name) { return f[FeatureIndex(name)]; }

// The recorded 4096^3 matmul row of data/README.md: BLOCK 128 x 256 x 64, GROUP_M 8, 8 warps,
// 3 stages, 220 registers, no spills, 147,456 B of shared memory.
TEST(FeaturesTest, RecordedMatmulRowMatchesHandComputedValues) {
  const auto tables = ReadTables({DR_KERNEL_FIRST_MATMUL});
  const TableRow* row = nullptr;
  const ProblemTable* table = nullptr;
  for (const auto& t : tables)
    for (const auto& r : t.rows)
      if (ToDouble(*Find(t.problem.shape, "M")) == 4096 &&
          ToJson(r.config) ==
              R"({"BLOCK_M":128,"BLOCK_N":256,"BLOCK_K":64,"GROUP_M":8,"num_warps":8,"num_stages":3})") {
        row = &r;
        table = &t;
      }
  ASSERT_NE(row, nullptr);
  ASSERT_EQ(row->measurement.shared, 147456);
  const FeatureExtractor fx;
  const StaticFeatures st = StaticFeatures::From(row->measurement);
  const std::vector<double> f = fx.Extract(table->problem, row->config, &st);
  ASSERT_EQ(f.size(), FeatureExtractor::size());

  EXPECT_EQ(At(f, "family_matmul"), 1);
  EXPECT_EQ(At(f, "family_other"), 0);
  // Every parameter has a named feature, so the extra slots stay empty.
  EXPECT_DOUBLE_EQ(At(f, "block_k_log2"), 6);
  EXPECT_DOUBLE_EQ(At(f, "block_n_log2"), 8);
  EXPECT_DOUBLE_EQ(At(f, "group_log2"), 3);
  EXPECT_DOUBLE_EQ(At(f, "extra_param0_log2"), 0);
  EXPECT_DOUBLE_EQ(At(f, "shape0_log2"), 12);  // K, M, N.
  EXPECT_DOUBLE_EQ(At(f, "num_warps_log2"), 3);
  EXPECT_DOUBLE_EQ(At(f, "num_stages"), 3);
  EXPECT_DOUBLE_EQ(At(f, "block_m_log2"), 7);
  EXPECT_DOUBLE_EQ(At(f, "block_product_log2"), 21);  // 128 * 256 * 64.
  // Problem: 2 M N K flops, 2 bytes x (MK + KN + MN).
  EXPECT_DOUBLE_EQ(At(f, "problem_flops_log2"), 37);
  EXPECT_DOUBLE_EQ(At(f, "problem_bytes_log2"), std::log2(2.0 * 3 * 4096 * 4096));
  // 32 x 16 = 512 tiles over 132 SMs: 3.88 waves, the last one 88 % full.
  EXPECT_DOUBLE_EQ(At(f, "programs_log2"), 9);
  EXPECT_DOUBLE_EQ(At(f, "waves"), 512.0 / 132);
  EXPECT_DOUBLE_EQ(At(f, "tail_efficiency"), 512.0 / (4 * 132));
  EXPECT_DOUBLE_EQ(At(f, "sm_fill"), 1);
  // Per tile: 2 * 128 * 256 * 4096 flops; loads (128 + 256) * 4096 and stores 128 * 256 halves.
  EXPECT_DOUBLE_EQ(At(f, "tile_flops_log2"), 28);
  EXPECT_DOUBLE_EQ(At(f, "tile_bytes_log2"), std::log2(2.0 * (384 * 4096 + 128 * 256)));
  EXPECT_DOUBLE_EQ(At(f, "padding_waste"), 0);
  EXPECT_DOUBLE_EQ(At(f, "loop_iters_log2"), 6);
  EXPECT_DOUBLE_EQ(At(f, "elems_per_thread_log2"), 7);  // 128 * 256 / 256 threads.
  // wgmma (8 warps, BLOCK_M >= 64) keeps num_stages buffers: (128 + 256) * 64 * 2 B * 3, which is
  // exactly the recorded shared memory.
  EXPECT_EQ(At(f, "warpgroup_mma"), 1);
  EXPECT_DOUBLE_EQ(At(f, "smem_estimate_log2"), std::log2(147456.0));
  EXPECT_DOUBLE_EQ(At(f, "smem_fraction"), 147456.0 / 232448);
  EXPECT_EQ(At(f, "smem_over_limit"), 0);
  EXPECT_EQ(At(f, "blocks_per_sm_by_smem"), 1);
  // Static analysis as recorded.
  EXPECT_EQ(At(f, "static_missing"), 0);
  EXPECT_EQ(At(f, "n_regs"), 220);
  EXPECT_EQ(At(f, "n_spills_log2"), 0);
  EXPECT_DOUBLE_EQ(At(f, "shared_log2"), std::log2(147457.0));
  EXPECT_EQ(At(f, "blocks_per_sm_by_regs"), 1);  // 65536 / (220 * 256).
  EXPECT_EQ(At(f, "resident_warps_per_sm"), 8);
}

TEST(FeaturesTest, SharedMemoryEstimateMatchesEveryRecordedMatmulRow) {
  const auto tables = ReadTables({DR_KERNEL_FIRST_MATMUL});
  const FeatureExtractor fx;
  int checked = 0;
  for (const auto& t : tables)
    for (const auto& r : t.rows)
      if (r.measurement.ok()) {
        ASSERT_EQ(fx.Estimate(t.problem, r.config).smem_bytes, r.measurement.shared) << ToJson(r.config);
        ++checked;
      } else if (r.measurement.status == Status::kOutOfResources) {
        EXPECT_GT(fx.Estimate(t.problem, r.config).smem_bytes, fx.device().smem_per_block);
      }
  EXPECT_GT(checked, 5000);
}

TEST(FeaturesTest, MissingStaticFeaturesAreMarked) {
  const Problem p{"matmul", {{"M", int64_t{1000}}, {"N", int64_t{1000}}, {"K", int64_t{1000}}}, "", ""};
  const NamedValues c = {{"BLOCK_M", int64_t{64}}, {"BLOCK_N", int64_t{64}}, {"BLOCK_K", int64_t{32}}};
  const FeatureExtractor fx;
  const auto f = fx.Extract(p, c);
  EXPECT_EQ(At(f, "static_missing"), 1);
  EXPECT_EQ(At(f, "n_regs"), -1);
  // 1000 / 64 rounds up to 16 tiles a side: 1 - 1000^2 / 1024^2 of each tile is padding (K = 1000
  // pads to 1024 too).
  EXPECT_NEAR(At(f, "padding_waste"), 1 - std::pow(1000.0 / 1024, 3), 1e-12);
  // Defaults of Triton when the config omits them: 4 warps, 3 stages.
  EXPECT_EQ(At(f, "num_warps_log2"), 2);
  EXPECT_EQ(At(f, "num_stages"), 3);
}

TEST(FeaturesTest, ParameterOrderDoesNotMatter) {
  const Problem p{"attention",
                  {{"Z", int64_t{2}},
                   {"H", int64_t{8}},
                   {"N_CTX", int64_t{2048}},
                   {"HEAD_DIM", int64_t{64}},
                   {"CAUSAL", true}},
                  "",
                  ""};
  Problem q = p;
  std::reverse(q.shape.begin(), q.shape.end());
  const NamedValues a = {{"BLOCK_M", int64_t{128}},
                         {"BLOCK_N", int64_t{64}},
                         {"num_warps", int64_t{4}},
                         {"num_stages", int64_t{3}}};
  NamedValues b = a;
  std::reverse(b.begin(), b.end());
  const FeatureExtractor fx;
  EXPECT_EQ(fx.Extract(p, a), fx.Extract(q, b));
  // Causal attention visits about half the key blocks.
  const auto f = fx.Extract(p, a);
  EXPECT_EQ(At(f, "family_attention"), 1);
  EXPECT_GT(At(f, "padding_waste"), 0);
  EXPECT_LT(At(f, "padding_waste"), 0.1);
}

// The deep-K problem the H200 run found slow (16 tiles of 128 x 128 for 132 SMs): split-K gives
// each tile 8 programs over an eighth of K; a config without SPLIT_K (the recorded tables) is 1.
TEST(FeaturesTest, SplitKMultipliesProgramsAndDividesTheLoop) {
  const Problem p{"matmul", {{"M", int64_t{512}}, {"N", int64_t{512}}, {"K", int64_t{32768}}}, "NVIDIA H200",
                  "fp16"};
  const NamedValues plain = {{"BLOCK_M", int64_t{128}}, {"BLOCK_N", int64_t{128}}, {"BLOCK_K", int64_t{64}},
                             {"GROUP_M", int64_t{8}},   {"num_warps", int64_t{4}},  {"num_stages", int64_t{3}}};
  NamedValues one = plain, eight = plain;
  one.emplace_back("SPLIT_K", int64_t{1});
  eight.emplace_back("SPLIT_K", int64_t{8});
  const FeatureExtractor fx;
  EXPECT_EQ(fx.Extract(p, plain), fx.Extract(p, one));
  const KernelEstimate a = fx.Estimate(p, plain), b = fx.Estimate(p, eight);
  ASSERT_TRUE(a.known && b.known);
  EXPECT_EQ(a.programs, 16);
  EXPECT_EQ(b.programs, 128);
  EXPECT_EQ(a.loop_iters, 512);
  EXPECT_EQ(b.loop_iters, 64);
  EXPECT_EQ(a.flops, b.flops);  // The problem's own figures do not change.
  EXPECT_EQ(a.bytes, b.bytes);
  EXPECT_GT(b.tile_bytes * b.programs, a.tile_bytes * a.programs);  // The atomics' extra traffic.
  // SPLIT_K is a role the matmul model reads, not a generic slot.
  const auto f = fx.Extract(p, eight);
  EXPECT_EQ(At(f, "extra_param0_log2"), 0);
  EXPECT_LT(At(f, "analytic_ms_log2"), At(fx.Extract(p, plain), "analytic_ms_log2"));
}

// Position of the table's fastest config when its ok rows are sorted by the analytic time.
size_t AnalyticRankOfBest(const ProblemTable& t, const FeatureExtractor& fx) {
  std::vector<std::pair<double, double>> rows;  // (analytic ms, measured ms)
  for (const auto& r : t.rows) {
    if (r.measurement.status != Status::kOk) continue;
    const KernelEstimate e = fx.Estimate(t.problem, r.config);
    double warps = 4;
    for (const auto& [name, v] : r.config)
      if (name == "num_warps") warps = static_cast<double>(std::get<int64_t>(v));
    rows.emplace_back(fx.AnalyticMs(e, warps), r.measurement.ms);
  }
  const auto best = std::min_element(rows.begin(), rows.end(), [](auto& a, auto& b) { return a.second < b.second; });
  size_t faster = 0;
  for (const auto& r : rows) faster += r.first < best->first;
  return faster;
}

// Causal attention at 2048 keys is bound by the latency of each loop iteration's chain of two dots
// and a softmax: BLOCK_N 16 runs four times the iterations of BLOCK_N 64 and is 1.4x slower on the
// H200, which a throughput model alone does not see. The latency term moves the table's fastest
// config (64 x 64, 4 warps, 3 stages) up the analytic order, and makes BLOCK_N 16 slower than 64.
TEST(FeaturesTest, LoopLatencyMovesTheCausalAttentionBestUp) {
  const auto tables = ReadTables({std::string(DR_KERNEL_DATA_DIR) + "/attention_2x16x2048x128_causal_fp16.jsonl"});
  ASSERT_EQ(tables.size(), 1u);
  DeviceDescription throughput_only;
  throughput_only.dot_step_latency_us = 0;
  const FeatureExtractor with, without(throughput_only);
  const size_t rank_with = AnalyticRankOfBest(tables[0], with), rank_without = AnalyticRankOfBest(tables[0], without);
  EXPECT_LE(rank_with + 10, rank_without) << rank_with << " vs " << rank_without;

  const Problem& p = tables[0].problem;
  auto config = [](int64_t bn) {
    return NamedValues{
        {"BLOCK_M", int64_t{128}}, {"BLOCK_N", bn}, {"num_warps", int64_t{8}}, {"num_stages", int64_t{3}}};
  };
  EXPECT_GT(with.AnalyticMs(with.Estimate(p, config(16)), 8), with.AnalyticMs(with.Estimate(p, config(64)), 8));
  EXPECT_LE(without.AnalyticMs(without.Estimate(p, config(16)), 8),
            without.AnalyticMs(without.Estimate(p, config(64)), 8));
}

// The analytic estimate of a square matmul cannot tell a tile from its transpose, nor two GROUP_M
// orders of one tile; it tells the transpose apart where the grid differs (4096 x 192: 96 programs
// of 128 x 64 against 128 of 64 x 128), and other launches always.
TEST(FeaturesTest, AnalyticTwinsAreConfigsTheEstimateCannotTellApart) {
  auto matmul = [](int64_t m, int64_t n) {
    return Problem{"matmul", {{"M", m}, {"N", n}, {"K", int64_t{1024}}}, "NVIDIA H200", "fp16"};
  };
  auto tile = [](int64_t bm, int64_t bn, int64_t group, int64_t stages) {
    return NamedValues{{"BLOCK_M", bm},        {"BLOCK_N", bn},          {"BLOCK_K", int64_t{128}},
                       {"GROUP_M", group},     {"num_warps", int64_t{4}}, {"num_stages", stages}};
  };
  const FeatureExtractor fx;
  const Problem square = matmul(1024, 1024), oblong = matmul(4096, 192);
  EXPECT_TRUE(fx.AnalyticTwins(square, tile(128, 64, 1, 4), tile(64, 128, 1, 4)));
  EXPECT_TRUE(fx.AnalyticTwins(square, tile(128, 64, 1, 4), tile(64, 128, 8, 4)));
  EXPECT_TRUE(fx.AnalyticTwins(oblong, tile(128, 64, 1, 4), tile(128, 64, 8, 4)));
  EXPECT_FALSE(fx.AnalyticTwins(oblong, tile(128, 64, 1, 4), tile(64, 128, 1, 4)));
  EXPECT_FALSE(fx.AnalyticTwins(square, tile(128, 64, 1, 4), tile(64, 128, 1, 3)));
  NamedValues eight = tile(64, 128, 1, 4);
  eight[4].second = int64_t{8};
  EXPECT_FALSE(fx.AnalyticTwins(square, tile(128, 64, 1, 4), eight));
  const Problem unknown{"my_kernel", {{"n", int64_t{1 << 20}}}, "", ""};
  EXPECT_FALSE(fx.AnalyticTwins(unknown, {{"BLOCK_SIZE", int64_t{1024}}}, {{"BLOCK_SIZE", int64_t{1024}}}));
}

// By shape (FeatureExtractor::ByShape), a GEMM of another family name, the recorded fp8_matmul's
// M x N x K and block names, is described as a matmul: its 61 rows fill one 64-row tile but only
// half of a 128-row one. By name (the default) it is a kernel the table does not know.
TEST(FeaturesTest, ByShapeAnMnkFamilyIsDescribedAsAMatmul) {
  const FeatureExtractor by_name;
  const FeatureExtractor fx = by_name.ByShape();
  EXPECT_FALSE(by_name.by_shape());
  EXPECT_TRUE(fx.by_shape());
  const NamedValues mnk = {{"M", int64_t{61}}, {"N", int64_t{8192}}, {"K", int64_t{8192}}};
  auto tile = [](int64_t m, int64_t n) {
    return NamedValues{{"BLOCK_M", m}, {"BLOCK_N", n}, {"BLOCK_K", int64_t{128}}, {"GROUP_M", int64_t{8}},
                       {"num_warps", int64_t{8}}, {"num_stages", int64_t{4}}};
  };
  const Problem fp8{"fp8_matmul", mnk, "", "bf16"};
  EXPECT_FALSE(by_name.Estimate(fp8, tile(64, 64)).known);
  EXPECT_EQ(At(by_name.Extract(fp8, tile(64, 64)), "family_other"), 1);
  const KernelEstimate big = fx.Estimate(fp8, tile(128, 256)), small = fx.Estimate(fp8, tile(64, 64));
  ASSERT_TRUE(big.known && small.known);
  EXPECT_DOUBLE_EQ(big.programs, 32);
  EXPECT_DOUBLE_EQ(small.programs, 128);
  EXPECT_NEAR(big.padding_waste, 1 - 61.0 / 128, 1e-12);
  EXPECT_NEAR(small.padding_waste, 1 - 61.0 / 64, 1e-12);
  // Its features are those of a problem of that name, to the analytic time.
  const Problem named{"matmul", mnk, "", "bf16"};
  EXPECT_EQ(fx.Extract(fp8, tile(64, 64)), by_name.Extract(named, tile(64, 64)));
  EXPECT_NE(fx.LogRooflineMs(fp8), 0);
  EXPECT_TRUE(fx.AnalyticTwins(fp8, tile(64, 64), tile(64, 64)));
  // Operands of one byte, as a library's FP8 GEMM records its dtype (torch's spelling): 64 x 64
  // tiles of BLOCK_K 256 in 4 stages take 128 KiB of shared memory, not the 256 KiB of fp16's.
  NamedValues deep = tile(64, 64);
  deep[2].second = int64_t{256};
  const Problem fp8_operands{"my_gemm", mnk, "", "float8_e4m3fn"}, fp16_operands{"my_gemm", mnk, "", "float16"};
  EXPECT_DOUBLE_EQ(fx.Estimate(fp8_operands, deep).smem_bytes, 128.0 * 256 * 4);
  EXPECT_DOUBLE_EQ(fx.Estimate(fp16_operands, deep).smem_bytes, 128.0 * 256 * 2 * 4);
  // Not by shape: another shape (a grouped GEMM's G, or rows and columns), or a config without
  // the three blocks.
  NamedValues grouped = mnk;
  grouped.emplace_back("G", int64_t{8});
  EXPECT_FALSE(fx.Estimate(Problem{"grouped_matmul", grouped, "", ""}, tile(64, 64)).known);
  const Problem norm{"my_norm", {{"rows", int64_t{8}}, {"cols", int64_t{8}}}, "", ""};
  EXPECT_FALSE(fx.Estimate(norm, tile(64, 64)).known);
  const NamedValues one_block = {{"BLOCK_SIZE", int64_t{1024}}, {"num_warps", int64_t{4}}};
  EXPECT_FALSE(fx.Estimate(fp8, one_block).known);
  EXPECT_EQ(fx.Extract(fp8, one_block), by_name.Extract(fp8, one_block));  // A kernel not known.
  // A dtype among the shape's values is not a dimension.
  NamedValues typed = mnk;
  typed.emplace_back("dtype", std::string("fp8"));
  EXPECT_TRUE(fx.Estimate(Problem{"my_gemm", typed, "", ""}, tile(64, 64)).known);
}

TEST(FeaturesTest, UnknownFamiliesGetGenericFeaturesOnly) {
  const Problem p{"my_kernel", {{"n", int64_t{1 << 20}}, {"dtype", std::string("fp16")}}, "", ""};
  const NamedValues c = {{"BLOCK_SIZE", int64_t{1024}}, {"num_warps", int64_t{8}}, {"UNROLL", int64_t{4}}};
  const FeatureExtractor fx;
  const auto f = fx.Extract(p, c);
  EXPECT_EQ(At(f, "family_other"), 1);
  EXPECT_FALSE(fx.Estimate(p, c).known);
  EXPECT_EQ(At(f, "programs_log2"), 0);
  EXPECT_EQ(fx.LogRooflineMs(p), 0);
  EXPECT_DOUBLE_EQ(At(f, "block_log2"), 10);            // BLOCK_SIZE is the 1-D block.
  EXPECT_DOUBLE_EQ(At(f, "extra_param0_log2"), 2);      // UNROLL.
  EXPECT_DOUBLE_EQ(At(f, "elems_per_thread_log2"), 2);  // 1024 / (32 * 8).
  EXPECT_DOUBLE_EQ(At(f, "shape0_log2"), 0);            // dtype (a string) sorts first.
  EXPECT_DOUBLE_EQ(At(f, "shape1_log2"), 20);
  for (double v : f) EXPECT_TRUE(std::isfinite(v));
}

TEST(FeaturesTest, NamesAreUniqueAndDeviceIsNotHardWired) {
  const auto& names = FeatureExtractor::names();
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size());
  EXPECT_THROW(FeatureIndex("no_such_feature"), std::out_of_range);
  DeviceDescription small;
  small.sm_count = 66;
  const Problem p{"softmax", {{"rows", int64_t{132}}, {"cols", int64_t{4096}}}, "", ""};
  const NamedValues c = {{"BLOCK", int64_t{1024}}, {"num_warps", int64_t{4}}};
  EXPECT_DOUBLE_EQ(At(FeatureExtractor().Extract(p, c), "waves"), 1.0);
  EXPECT_DOUBLE_EQ(At(FeatureExtractor(small).Extract(p, c), "waves"), 2.0);
}

// A problem recorded on another GPU is described with that GPU's limits and tensor-core path (its
// SMs, shared memory, threads), and with the rates of the model's own device, on which the model
// learned what times mean. The model's own device stays in charge of its own model's problems, and
// of problems on a device it does not know.
TEST(FeaturesTest, EachProblemIsDescribedWithTheLimitsOfTheGpuItRecords) {
  const FeatureExtractor fx;
  Problem h200{"softmax", {{"rows", int64_t{216}}, {"cols", int64_t{8192}}}, "NVIDIA H200", ""};
  const NamedValues c = {{"BLOCK", int64_t{8192}}, {"num_warps", int64_t{8}}};
  const std::vector<double> on_h200 = fx.Extract(h200, c);
  EXPECT_DOUBLE_EQ(At(on_h200, "waves"), 216.0 / 132);
  // The H100 (SXM) is the H200's chip: the same limits, so the same features.
  for (const char* same : {"", "Some GPU this project does not know", "NVIDIA H100 80GB HBM3"}) {
    Problem p = h200;
    p.device = same;
    EXPECT_EQ(fx.Extract(p, c), on_h200) << same;
  }
  Problem a100 = h200, l40s = h200, h100_pcie = h200;
  a100.device = "NVIDIA A100-SXM4-80GB";
  l40s.device = "NVIDIA L40S";
  h100_pcie.device = "NVIDIA H100 PCIe";
  EXPECT_DOUBLE_EQ(At(fx.Extract(a100, c), "waves"), 2.0);  // 216 rows on 108 SMs.
  EXPECT_DOUBLE_EQ(At(fx.Extract(l40s, c), "waves"), 216.0 / 142);
  EXPECT_DOUBLE_EQ(At(fx.Extract(h100_pcie, c), "waves"), 216.0 / 114);
  // The rates are the model's: the roofline is the H200's though the A100's HBM is slower.
  EXPECT_DOUBLE_EQ(At(fx.Extract(a100, c), "roofline_ms_log2"), At(on_h200, "roofline_ms_log2"));
  EXPECT_DOUBLE_EQ(fx.LogRooflineMs(a100), fx.LogRooflineMs(h200));
  EXPECT_DOUBLE_EQ(KnownDevice("NVIDIA A100-SXM4-80GB")->dram_tb_per_s, 2.039);
  // A Hopper-sized matmul tile takes the warp-group MMA on the H200 and mma.sync on the A100; a
  // pipeline of 6 x 32 KB fits the H200's 227 KB a block and not the A100's 163 KB.
  Problem mm{"matmul", {{"M", int64_t{4096}}, {"N", int64_t{4096}}, {"K", int64_t{4096}}}, "NVIDIA H200", ""};
  Problem mm_a100 = mm;
  mm_a100.device = "NVIDIA A100-SXM4-80GB";
  const NamedValues wide = {{"BLOCK_M", int64_t{128}}, {"BLOCK_N", int64_t{256}}, {"BLOCK_K", int64_t{64}},
                            {"GROUP_M", int64_t{8}}, {"num_warps", int64_t{8}}, {"num_stages", int64_t{4}}};
  EXPECT_EQ(At(fx.Extract(mm, wide), "warpgroup_mma"), 1);
  EXPECT_EQ(At(fx.Extract(mm_a100, wide), "warpgroup_mma"), 0);
  const NamedValues deep = {{"BLOCK_M", int64_t{128}}, {"BLOCK_N", int64_t{128}}, {"BLOCK_K", int64_t{64}},
                            {"GROUP_M", int64_t{8}}, {"num_warps", int64_t{2}}, {"num_stages", int64_t{7}}};
  EXPECT_EQ(At(fx.Extract(mm, deep), "smem_over_limit"), 0);
  EXPECT_EQ(At(fx.Extract(mm_a100, deep), "smem_over_limit"), 1);
  // A model of another device than the H200 keeps its own description for problems of its model.
  DeviceDescription small;
  small.sm_count = 66;
  EXPECT_DOUBLE_EQ(At(FeatureExtractor(small).Extract(h200, c), "waves"), 216.0 / 66);
  EXPECT_EQ(KnownDevice("NVIDIA H100 PCIe")->sm_count, 114);
  EXPECT_EQ(KnownDevice("NVIDIA GeForce RTX 4090"), nullptr);
}

}  // namespace
}  // namespace dr_kernel
