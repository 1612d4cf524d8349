// The session's trust in its prior: the rank correlation of its predictions with its measurements,
// and what low trust does to its jumps. On a recorded table, with priors made from its true times.
#include "dr_kernel/agent/session.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "dr_kernel/agent/tuning_env.h"
#include "dr_kernel/table.h"

namespace dr_kernel::agent {
namespace {

struct Truth {
  ProblemTable table;
  Space space;
  std::vector<double> log_ms;  // By Space::Index; the slowest ok time where a config is not ok.
  std::vector<uint8_t> ok;
};

const Truth& Softmax() {
  static const Truth truth = [] {
    Truth t{ReadTables({std::string(DR_KERNEL_DATA_DIR) + "/softmax_2048x16384_fp16.jsonl"})[0], Space{}, {}, {}};
    t.space = TableSpace(t.table);
    t.log_ms.assign(t.space.product_size(), 0.0);
    t.ok.assign(t.space.product_size(), 0);
    for (const auto& row : t.table.rows) {
      const uint64_t i = t.space.Index(*t.space.Find(row.config));
      if (row.measurement.ok()) {
        t.log_ms[i] = std::log(row.measurement.ms);
        t.ok[i] = 1;
      }
    }
    return t;
  }();
  return truth;
}

Measurement MeasurementOf(const Truth& t, const Config& c) {
  for (const auto& row : t.table.rows)
    if (t.space.Find(row.config) == c) return row.measurement;
  return Measurement{};
}

// A prior whose predicted log time is the truth (sign = +1) or its mirror image (sign = -1: it
// ranks the fastest configs slowest), plus noise.
Prior PriorOf(const Truth& t, double sign, double noise, uint64_t seed) {
  std::vector<double> log_ms = t.log_ms;
  for (auto& v : log_ms) v *= sign;
  Prior prior = NoisyPrior(log_ms, t.ok, noise, seed);
  prior.trust = 0.5;
  prior.Rank(t.space);
  return prior;
}

// Measures `n` configs by jumping, as a session does before it has a position worth walking from.
void Jump(Session* s, const Truth& t, int n) {
  for (int i = 0; i < n; ++i) {
    const auto move = s->Resolve(kJump);
    ASSERT_TRUE(move.has_value());
    s->TakeMeasured(*move, MeasurementOf(t, move->config));
  }
}

TEST(SessionTrustTest, AGoodPriorIsTrustedMoreAndAMirroredOneLess) {
  const Truth& t = Softmax();
  const Prior good = PriorOf(t, 1, 0.05, 1), mirrored = PriorOf(t, -1, 0.05, 1);
  Session trusting(t.space, good, {}, 100, {}, 7), doubting(t.space, mirrored, {}, 100, {}, 7);
  EXPECT_DOUBLE_EQ(trusting.trust(), 0.5);  // Nothing measured: the prior's own trust.
  EXPECT_EQ(trusting.ranked_pairs(), 0);
  Jump(&trusting, t, 20);
  Jump(&doubting, t, 20);
  EXPECT_GT(trusting.ranked_pairs(), 10);
  EXPECT_GT(trusting.rank_correlation(), 0.5);
  EXPECT_GT(trusting.trust(), 0.5);
  EXPECT_LE(doubting.rank_correlation(), 0.0);
  EXPECT_LT(doubting.trust(), 0.2);
  EXPECT_GT(doubting.random_jump_probability(), 0.6);
  EXPECT_LT(trusting.random_jump_probability(), 0.25);
}

TEST(SessionTrustTest, LowTrustTurnsJumpsIntoRandomSearchOverUntriedConfigs) {
  // A session whose prior ranks the table backwards measures its predicted best first, sees the
  // ranking fail, and then spreads its jumps over the space; with a good prior the jumps stay among
  // the prior's first choices.
  const Truth& t = Softmax();
  const Prior good = PriorOf(t, 1, 0.05, 2), mirrored = PriorOf(t, -1, 0.05, 2);
  auto share_outside_top = [&](const Prior& prior) {
    Session s(t.space, prior, {}, 100, {}, 3);
    Jump(&s, t, 10);
    const std::set<uint64_t> top(prior.order.begin(), prior.order.begin() + 60);
    int outside = 0;
    for (int i = 0; i < 30; ++i) {
      const auto move = s.Resolve(kJump);
      EXPECT_TRUE(move && move->measure && !s.Measured(move->config));
      outside += top.count(t.space.Index(move->config)) == 0;
      s.TakeMeasured(*move, MeasurementOf(t, move->config));
    }
    return outside / 30.0;
  };
  EXPECT_EQ(share_outside_top(good), 0.0);
  // The top 60 of 192 configs: uniform draws land outside them about two times in three.
  EXPECT_GT(share_outside_top(mirrored), 0.4);
}

TEST(SessionTrustTest, PredictedDifferencesInTheObservationScaleWithTrust) {
  const Truth& t = Softmax();
  const Prior mirrored = PriorOf(t, -1, 0.05, 4);
  Session s(t.space, mirrored, {}, 100, {}, 5);
  Jump(&s, t, 1);
  const auto before = s.Observation();
  EXPECT_DOUBLE_EQ(before[10], 0.5);
  EXPECT_DOUBLE_EQ(before[12], 0.5);
  Jump(&s, t, 15);
  const auto after = s.Observation();
  EXPECT_NEAR(after[10], s.trust(), 1e-12);
  EXPECT_LT(after[11], 0);
  EXPECT_LT(s.trust(), 0.25);
  EXPECT_LE(std::abs(after[7]), s.trust() + 1e-12);
}

TEST(SessionSeedTest, TheSeedChangesUncertainJumpsAndOnlyTheSeed) {
  const Truth& t = Softmax();
  const Prior prior = PriorOf(t, 1, 0.3, 6);
  auto trace = [&](uint64_t seed) {
    Session s(t.space, prior, {}, 100, {}, seed);
    std::vector<uint64_t> out;
    for (int i = 0; i < 12; ++i) {
      const auto move = s.Resolve(kJump);
      out.push_back(t.space.Index(move->config));
      s.TakeMeasured(*move, MeasurementOf(t, move->config));
    }
    return out;
  };
  EXPECT_EQ(trace(1), trace(1));
  std::set<std::vector<uint64_t>> distinct;
  for (uint64_t seed = 0; seed < 6; ++seed) distinct.insert(trace(seed));
  EXPECT_GE(distinct.size(), 5u);
}

}  // namespace
}  // namespace dr_kernel::agent
