#include "dr_kernel/model/surrogate_env.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "dr_kernel/table.h"

namespace dr_kernel {
namespace {

std::shared_ptr<const CostModel> FittedModel() {
  static const std::shared_ptr<const CostModel> model = [] {
    CostModelOptions o;
    o.ensemble_size = 3;
    o.time_trees.num_trees = 40;
    o.failure_trees.num_trees = 20;
    auto m = std::make_shared<CostModel>(o);
    for (const auto& t : ReadTables({DR_KERNEL_FIRST_MATMUL})) m->Add(t);
    m->Fit();
    return m;
  }();
  return model;
}

// The recorded matmul space, listed in another order than the tables, with one constraint.
Space MatmulSpace() {
  auto ints = [](std::vector<int64_t> v) {
    std::vector<Value> out;
    for (int64_t x : v) out.emplace_back(x);
    return out;
  };
  return Space({{"num_warps", ints({2, 4, 8})},
                {"num_stages", ints({2, 3, 4, 5})},
                {"BLOCK_M", ints({16, 32, 64, 128, 256})},
                {"BLOCK_N", ints({32, 64, 128, 256})},
                {"BLOCK_K", ints({32, 64, 128})},
                {"GROUP_M", ints({1, 8})}},
               {"BLOCK_M * BLOCK_N <= 128 * 256"});
}

// A shape that no table holds.
Problem SyntheticMatmul() {
  return {"matmul", {{"M", int64_t{3000}}, {"N", int64_t{5000}}, {"K", int64_t{2000}}}, "NVIDIA H200", ""};
}

std::vector<Config> AllConfigs(const Space& space) {
  std::vector<Config> out;
  space.ForEach([&](const Config& c) {
    out.push_back(c);
    return true;
  });
  return out;
}

TEST(SurrogateEnvTest, AnswersEveryConfigOfASyntheticProblem) {
  SurrogateEnv env(FittedModel(), SyntheticMatmul(), MatmulSpace());
  env.Reset(1);
  const auto configs = AllConfigs(env.space());
  ASSERT_GT(configs.size(), 1000u);
  const auto results = env.Step(configs);
  ASSERT_EQ(results.size(), configs.size());
  std::map<Status, int> statuses;
  double best = kInf;
  for (size_t i = 0; i < results.size(); ++i) {
    const Measurement& m = results[i].measurement;
    ++statuses[m.status];
    EXPECT_GT(results[i].cost_s, 0);
    if (m.ok()) {
      ASSERT_TRUE(std::isfinite(m.ms) && m.ms > 0);
      EXPECT_LT(m.ms_p20, m.ms_p80);
      best = std::min(best, m.ms);
    } else {
      EXPECT_FALSE(m.error.empty());
    }
    // Configs whose operand buffers cannot fit in shared memory fail as out of resources.
    const auto e = FittedModel()->features().Estimate(env.problem(), env.space().Named(configs[i]));
    if (e.smem_bytes > 1.2 * FittedModel()->features().device().smem_per_block)
      EXPECT_EQ(m.status, Status::kOutOfResources) << env.space().Format(configs[i]);
  }
  std::printf("synthetic matmul: %d ok, %d out of resources, %d compile timeouts, best %.4f ms\n",
              statuses[Status::kOk], statuses[Status::kOutOfResources], statuses[Status::kCompileTimeout],
              best);
  // Mostly ok, some out of resources: the recorded proportions are 92 % and 8 %.
  EXPECT_GT(statuses[Status::kOk], 0.8 * results.size());
  EXPECT_GT(statuses[Status::kOutOfResources], 0.03 * results.size());
  // 2 * 3000 * 5000 * 2000 flops at roughly the recorded 4096^3 efficiency (~700 TFLOP/s) take
  // ~0.09 ms; the best simulated config should be within a factor of 3 of that.
  EXPECT_GT(best, 0.03);
  EXPECT_LT(best, 0.3);
}

TEST(SurrogateEnvTest, IsDeterministicForASeedAndOrderIndependent) {
  SurrogateEnv a(FittedModel(), SyntheticMatmul(), MatmulSpace());
  SurrogateEnv b(FittedModel(), SyntheticMatmul(), MatmulSpace());
  auto configs = AllConfigs(a.space());
  configs.resize(200);
  a.Reset(42);
  b.Reset(42);
  const auto ra = a.Step(configs), rb = b.Step(configs);
  for (size_t i = 0; i < configs.size(); ++i) {
    EXPECT_EQ(ra[i].measurement.status, rb[i].measurement.status);
    EXPECT_EQ(ra[i].measurement.ms, rb[i].measurement.ms);
    EXPECT_EQ(ra[i].cost_s, rb[i].cost_s);
  }
  // The landscape is a function of (seed, config): asking in reverse order gives the same one.
  std::vector<Config> reversed(configs.rbegin(), configs.rend());
  b.Reset(42);
  b.Step(reversed);
  for (size_t i = 0; i < configs.size(); ++i) {
    const Measurement la = a.Landscape(configs[i]), lb = b.Landscape(configs[i]);
    EXPECT_EQ(la.status, lb.status);
    EXPECT_EQ(la.ms, lb.ms);
  }
  // Another seed draws another landscape.
  b.Reset(43);
  int differ = 0;
  for (const auto& c : configs) differ += a.Landscape(c).ms != b.Landscape(c).ms;
  EXPECT_GT(differ, 100);
}

TEST(SurrogateEnvTest, RejectsInvalidConfigsAndFollowsTheSamplingMode) {
  SurrogateOptions o;
  o.sampling = SurrogateSampling::kMean;
  o.noise_log_std = 0;
  o.sample_failures = false;
  SurrogateEnv env(FittedModel(), SyntheticMatmul(), MatmulSpace(), o);
  const Space& space = env.space();
  // BLOCK_M 256 x BLOCK_N 256 breaks the constraint; an index out of range is not a config at all.
  Config broken = *space.Find({{"num_warps", int64_t{8}},
                               {"num_stages", int64_t{2}},
                               {"BLOCK_M", int64_t{256}},
                               {"BLOCK_N", int64_t{256}},
                               {"BLOCK_K", int64_t{32}},
                               {"GROUP_M", int64_t{1}}});
  Config out_of_range(space.num_params(), 0);
  out_of_range[0] = 99;
  const Config good = *space.Find({{"num_warps", int64_t{8}},
                                   {"num_stages", int64_t{3}},
                                   {"BLOCK_M", int64_t{128}},
                                   {"BLOCK_N", int64_t{256}},
                                   {"BLOCK_K", int64_t{64}},
                                   {"GROUP_M", int64_t{8}}});
  const auto r = env.Step({broken, out_of_range, good, good});
  EXPECT_EQ(r[0].measurement.status, Status::kInvalid);
  EXPECT_EQ(r[0].cost_s, 0);
  EXPECT_EQ(r[1].measurement.status, Status::kInvalid);
  ASSERT_TRUE(r[2].measurement.ok());
  // Mean sampling without noise: exactly the model's mean, every time.
  EXPECT_DOUBLE_EQ(r[2].measurement.ms, env.Prediction(good).ms());
  EXPECT_EQ(r[2].measurement.ms, r[3].measurement.ms);
  // An ok evaluation costs compiling, loading, setting up and 30 launches with flushes.
  EXPECT_NEAR(r[2].cost_s, 0.5 + 0.01 + 0.01 + 30 * (r[2].measurement.ms + 0.07) / 1000, 1e-12);
  // A model with static features cannot drive a simulation.
  CostModelOptions with_static;
  with_static.use_static_features = true;
  auto model = std::make_shared<CostModel>(with_static);
  EXPECT_THROW(SurrogateEnv(model, SyntheticMatmul(), MatmulSpace()), std::invalid_argument);
}

TEST(SurrogateEnvTest, MemberSamplingFollowsOneEnsembleMember) {
  SurrogateOptions o;
  o.sampling = SurrogateSampling::kMember;
  SurrogateEnv env(FittedModel(), SyntheticMatmul(), MatmulSpace(), o);
  const auto configs = AllConfigs(env.space());
  // Different seeds pick different members (3 members; some seed among 0..9 picks another).
  env.Reset(0);
  const double first = env.Landscape(configs[500]).ms;
  bool other = false;
  for (uint64_t seed = 1; seed < 10; ++seed) {
    env.Reset(seed);
    other |= env.Landscape(configs[500]).ms != first;
  }
  EXPECT_TRUE(other);
}

}  // namespace
}  // namespace dr_kernel
