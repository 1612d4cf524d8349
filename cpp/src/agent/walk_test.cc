// The walk's trust in its prior: the rank correlation of its predictions with its measurements,
// and what low trust does to its jumps. On a recorded table, with priors made from its true times.
#include "dr_kernel/agent/walk.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <set>

#include "dr_kernel/agent/agent.h"
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

// Problem `index` of a bundled table file, its space and true times.
Truth LoadTruth(const std::string& file, size_t index) {
  Truth t{ReadTables({std::string(DR_KERNEL_DATA_DIR) + "/" + file})[index], Space{}, {}, {}};
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
}

const Truth& Softmax() {
  static const Truth truth = LoadTruth("softmax_2048x16384_fp16.jsonl", 0);
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

// The recorded softmax's configs by value: BLOCK, num_warps, num_stages.
Config SoftmaxAt(const Truth& t, int block, int warps, int stages) {
  const auto c = t.space.Find({{"BLOCK", Value(int64_t{block})}, {"num_warps", Value(int64_t{warps})},
                               {"num_stages", Value(int64_t{stages})}});
  EXPECT_TRUE(c.has_value()) << block << " " << warps << " " << stages;
  return *c;
}

size_t ParamIndex(const Space& space, const std::string& name) {
  for (size_t p = 0; p < space.num_params(); ++p)
    if (space.params()[p].name == name) return p;
  ADD_FAILURE() << name;
  return 0;
}

// Measures `n` configs by jumping, as a walk does before it has a position worth walking from.
void Jump(Walk* s, const Truth& t, int n) {
  for (int i = 0; i < n; ++i) {
    const auto move = s->Resolve(kJump);
    ASSERT_TRUE(move.has_value());
    s->TakeMeasured(*move, MeasurementOf(t, move->config));
  }
}

// The model's trees score many configs alike; those must not be ordered by the order the user
// listed a parameter's values in (a space read from text once sorted 128 before 16).
TEST(PriorRankTest, TiesAreOrderedByValueNotByTheSpacesListingOrder) {
  const Space ascending({{"BLOCK", {int64_t{16}, int64_t{32}, int64_t{128}}}, {"num_warps", {int64_t{4}, int64_t{8}}}});
  const Space shuffled({{"num_warps", {int64_t{8}, int64_t{4}}}, {"BLOCK", {int64_t{128}, int64_t{16}, int64_t{32}}}});
  auto ranked = [](const Space& space, double slow_block) {
    Prior prior;
    prior.log_ms.assign(space.product_size(), 0.0);
    prior.log_std.assign(space.product_size(), 1.0);
    prior.p_fail.assign(space.product_size(), 0.1);
    space.ForEach([&](const Config& c) {  // One block predicted slower; the rest tie.
      if (ToDouble(*Find(space.Named(c), "BLOCK")) == slow_block) prior.log_ms[space.Index(c)] = 1.0;
      return true;
    });
    prior.Rank(space);
    std::vector<std::string> names;
    for (const uint64_t i : prior.order) {
      NamedValues named = space.Named(space.FromIndex(i));
      std::sort(named.begin(), named.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      names.push_back(ToJson(named));
    }
    return names;
  };
  const auto a = ranked(ascending, 16), b = ranked(shuffled, 16);
  ASSERT_EQ(a.size(), 6u);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.front(), R"({"BLOCK":32,"num_warps":4})");  // Smallest values first among the ties.
  EXPECT_EQ(a[4], R"({"BLOCK":16,"num_warps":4})");       // The slow block last, still by value.
}

TEST(WalkTrustTest, AGoodPriorIsTrustedMoreAndAMirroredOneLess) {
  const Truth& t = Softmax();
  const Prior good = PriorOf(t, 1, 0.05, 1), mirrored = PriorOf(t, -1, 0.05, 1);
  Walk trusting(t.space, good, {}, 100, {}, 7), doubting(t.space, mirrored, {}, 100, {}, 7);
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

TEST(WalkTrustTest, TiedMeasurementsAreNoEvidenceForOrAgainstThePrior) {
  // The recorded softmax's num_stages changes nothing (the same binary, the same time): configs
  // that differ only there tie, and a tie says nothing about how the beliefs rank. The correlation
  // compares only pairs that differ by more than the tie margin.
  const Truth& t = Softmax();
  const Prior prior = PriorOf(t, 1, 0.05, 3);
  Walk s(t.space, prior, {}, 100, {}, 1);
  for (int stages : {1, 2, 3, 4}) {
    const Config c = SoftmaxAt(t, 2048, 8, stages);
    s.TakeMeasured(Move{c, true}, MeasurementOf(t, c));
  }
  EXPECT_EQ(s.ranked_pairs(), 4);
  EXPECT_EQ(s.ranked_comparisons(), 0);
  EXPECT_EQ(s.rank_correlation(), 0.0);
  // Configs whose times differ are compared: with the fast and slow blocks measured, every pair
  // of a different block counts.
  for (int block : {256, 16384}) {
    const Config c = SoftmaxAt(t, block, 8, 1);
    s.TakeMeasured(Move{c, true}, MeasurementOf(t, c));
  }
  EXPECT_GE(s.ranked_comparisons(), 5);
  EXPECT_GT(s.rank_correlation(), 0.5);
}

TEST(WalkTrustTest, LowTrustTurnsJumpsIntoRandomSearchOverUntriedConfigs) {
  // A walk whose prior ranks the table backwards measures its predicted best first, sees the
  // ranking fail, and then spreads its jumps over the space; with a good prior the jumps stay among
  // the prior's first choices.
  const Truth& t = Softmax();
  const Prior good = PriorOf(t, 1, 0.05, 2), mirrored = PriorOf(t, -1, 0.05, 2);
  auto share_outside_top = [&](const Prior& prior) {
    Walk s(t.space, prior, {}, 100, {}, 3);
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
  // With a good prior few jumps leave its top 60: a random jump now and then (trust is below 1),
  // or a candidate from the whole space that the corrected beliefs rank best.
  EXPECT_LE(share_outside_top(good), 0.1);
  // The top 60 of 192 configs: uniform draws land outside them about two times in three.
  EXPECT_GT(share_outside_top(mirrored), 0.4);
}

TEST(WalkTrustTest, RandomJumpsDrawingSeveralConfigsMeasureTheOneBelievedFastest) {
  // Trust held at 0 (the measured correlation never counts): every jump after the first is random.
  // Drawing one config a jump is uniform search; drawing six and measuring the one the beliefs rank
  // first still spreads over the space, but leans towards the fast configs the beliefs know of.
  const Truth& t = Softmax();
  Prior prior = PriorOf(t, 1, 0.2, 2);
  prior.trust = 0;
  auto jumps = [&](int draws) {
    Walk s(t.space, prior, {}, 100, {}, 3, TrustConfig{4, 1000});
    s.SetRandomJumpDraws(draws);
    EXPECT_EQ(s.random_jump_probability(), 1.0);
    std::vector<double> log_ms;
    std::set<uint64_t> seen;
    for (int i = 0; i < 25; ++i) {
      const auto move = s.Resolve(kJump);
      EXPECT_TRUE(move && move->measure && !s.Measured(move->config));
      if (i > 0) log_ms.push_back(t.log_ms[t.space.Index(move->config)]);
      seen.insert(t.space.Index(move->config));
      s.TakeMeasured(*move, MeasurementOf(t, move->config));
    }
    EXPECT_EQ(seen.size(), 25u);
    std::sort(log_ms.begin(), log_ms.end());
    return log_ms;
  };
  const auto uniform = jumps(1), leaning = jumps(6);
  const std::set<uint64_t> top(prior.order.begin(), prior.order.begin() + 24);
  // The median jump of six draws is faster than the median uniform jump...
  EXPECT_LT(leaning[leaning.size() / 2], uniform[uniform.size() / 2] - 0.1);
  // ...and the jumps are still a random spread, not the prior's first 24 in its order.
  Walk s(t.space, prior, {}, 100, {}, 3, TrustConfig{4, 1000});
  s.SetRandomJumpDraws(6);
  int outside = 0;
  for (int i = 0; i < 24; ++i) {
    const auto move = s.Resolve(kJump);
    ASSERT_TRUE(move.has_value());
    outside += top.count(t.space.Index(move->config)) == 0;
    s.TakeMeasured(*move, MeasurementOf(t, move->config));
  }
  std::printf("median jump log ms: %.3f uniform, %.3f with six draws; %d of 24 outside the prior's top 24\n",
              uniform[uniform.size() / 2], leaning[leaning.size() / 2], outside);
  EXPECT_GE(outside, 6);
}

TEST(WalkGainTest, TheChanceOfAGainFallsAsTheBestIsFoundAndStaysHighWhileItIsNot) {
  // With a good prior, the walk's first jumps find the table's best: little is left to gain. With
  // a mirrored prior, what it measured is far from the best and its residuals say its beliefs are
  // wrong: a gain stays likely, and adaptive stopping must not end the session.
  const Truth& t = Softmax();
  const Prior good = PriorOf(t, 1, 0.05, 5), mirrored = PriorOf(t, -1, 0.05, 5);
  Walk finding(t.space, good, {}, 100, {}, 11), lost(t.space, mirrored, {}, 100, {}, 11);
  EXPECT_DOUBLE_EQ(finding.GainChance(0.05), 1.0);  // Nothing ran yet: nothing is known.
  Jump(&finding, t, 12);
  Jump(&lost, t, 12);
  double oracle = 1e9;
  for (size_t i = 0; i < t.log_ms.size(); ++i)
    if (t.ok[i]) oracle = std::min(oracle, t.log_ms[i]);
  ASSERT_LT(finding.best_log_ms() - oracle, std::log(1.05));  // It did find the best.
  const double settled = finding.GainChance(0.05), unsettled = lost.GainChance(0.05);
  EXPECT_LT(settled, 0.1);
  EXPECT_GT(unsettled, 0.3);
  EXPECT_LE(finding.GainChance(0.25), settled);  // A larger gain is less likely.
}

TEST(WalkTrustTest, PredictedDifferencesInTheObservationScaleWithTrust) {
  const Truth& t = Softmax();
  const Prior mirrored = PriorOf(t, -1, 0.05, 4);
  Walk s(t.space, mirrored, {}, 100, {}, 5);
  Jump(&s, t, 1);
  const auto before = s.Observation();
  EXPECT_DOUBLE_EQ(before[10], 0.5);
  EXPECT_DOUBLE_EQ(before[12], 0.5);
  Jump(&s, t, 15);
  const auto after = s.Observation();
  EXPECT_NEAR(after[10], s.trust(), 1e-12);
  // The beliefs that are paired with measurements are corrected by the measurements before them
  // (the residual trend learns part of the mirror), but they still rank poorly.
  EXPECT_NEAR(after[11], s.rank_correlation(), 1e-12);
  EXPECT_LT(after[11], 0.25);
  EXPECT_LT(s.trust(), 0.25);
  EXPECT_LE(std::abs(after[7]), s.trust() + 1e-12);
}

// Spearman rank correlation of two equally long vectors (no ties expected).
double Spearman(const std::vector<double>& a, const std::vector<double>& b) {
  auto ranks = [](const std::vector<double>& v) {
    std::vector<size_t> idx(v.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    std::sort(idx.begin(), idx.end(), [&](size_t x, size_t y) { return v[x] < v[y]; });
    std::vector<double> r(v.size());
    for (size_t i = 0; i < idx.size(); ++i) r[idx[i]] = static_cast<double>(i);
    return r;
  };
  const auto ra = ranks(a), rb = ranks(b);
  const double mean = (a.size() - 1) / 2.0;
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    sab += (ra[i] - mean) * (rb[i] - mean);
    saa += (ra[i] - mean) * (ra[i] - mean);
    sbb += (rb[i] - mean) * (rb[i] - mean);
  }
  return sab / std::sqrt(saa * sbb);
}

TEST(WalkBeliefTest, ATrendTheMeasurementsShowCorrectsFarFromThem) {
  // A prior that is the truth tilted along the first parameter by 3 log units over its range (a
  // systematic error, as of a model that has not seen the family): after 12 measurements the
  // walk's beliefs about the untried configs, most far from any measurement, rank them better
  // than the prior does.
  const Truth& t = Softmax();
  std::vector<double> tilted = t.log_ms;
  t.space.ForEach([&](const Config& c) {
    tilted[t.space.Index(c)] -= 3.0 * t.space.Encode(c)[0];
    return true;
  });
  Prior prior = NoisyPrior(tilted, t.ok, 0.0, 1);
  prior.trust = 0.5;
  prior.Rank(t.space);
  Walk s(t.space, prior, {}, 100, {}, 4);
  Jump(&s, t, 12);
  std::vector<double> truth, believed, prior_log;
  t.space.ForEach([&](const Config& c) {
    const uint64_t i = t.space.Index(c);
    if (!t.ok[i] || s.Measured(c)) return true;
    truth.push_back(t.log_ms[i]);
    believed.push_back(s.Predict(c));
    prior_log.push_back(prior.log_ms[i]);
    return true;
  });
  ASSERT_GT(truth.size(), 100u);
  EXPECT_GT(Spearman(believed, truth), Spearman(prior_log, truth) + 0.1);
}

// A small cost model fitted on the recorded softmax only: to it, an attention kernel is a family it
// has never seen, whose configs the feature table estimates.
std::unique_ptr<CostModel> SoftmaxOnlyModel() {
  CostModelOptions options;
  options.ensemble_size = 2;
  options.time_trees.num_trees = 10;
  options.failure_trees.num_trees = 5;
  auto model = std::make_unique<CostModel>(options);
  model->Add(ReadTables({std::string(DR_KERNEL_DATA_DIR) + "/softmax_2048x16384_fp16.jsonl"})[0]);
  model->Fit();
  return model;
}

TEST(WalkAlikeTest, AMeasurementCorrectsConfigsThatUseTheMachineAlikeWhateverTheirParameters) {
  // The causal attention 2×16×2048×128, whose best config (64×64, 4 warps, 3 stages) lies two
  // parameters away from the 128×64, 8-warp configs a prior of another family's model prefers: the
  // feature table estimates both with as many registers per thread (as many rows per warp), and
  // with alike on, a measurement of one corrects the belief of the other.
  const Truth t = LoadTruth("attention_2x16x2048x128_causal_fp16.jsonl", 0);
  const auto model = SoftmaxOnlyModel();
  const Prior prior = PriorFromModel(model.get(), t.table.problem, t.space);
  auto config = [&](int64_t m, int64_t n, int64_t warps, int64_t stages) {
    return *t.space.Find({{"BLOCK_M", m}, {"BLOCK_N", n}, {"num_warps", warps}, {"num_stages", stages}});
  };
  const Config measured = config(128, 64, 8, 3), alike = config(64, 64, 4, 3), unlike = config(64, 32, 8, 2);
  const ConfigEstimate& a = prior.estimates[t.space.Index(measured)];
  const ConfigEstimate& b = prior.estimates[t.space.Index(alike)];
  const ConfigEstimate& c = prior.estimates[t.space.Index(unlike)];
  ASSERT_TRUE(a.known && b.known && c.known);
  EXPECT_EQ(a.regs, b.regs);
  EXPECT_LT(c.regs, 0.75 * a.regs);

  Measurement fast;
  fast.status = Status::kOk;
  fast.ms = std::exp(prior.log_ms[t.space.Index(measured)] - 1.0);  // The prior was 2.7x too slow here.
  std::vector<double> shift;  // How much the measurement moved the belief of `alike`, of `unlike`.
  for (double width : {0.0, 0.5}) {
    Walk walk(t.space, prior, {}, 100);
    walk.SetAlikeWidth(width);
    const double alike_before = walk.Predict(alike), unlike_before = walk.Predict(unlike);
    walk.Record(measured, fast);
    shift.push_back(walk.Predict(alike) - alike_before);
    shift.push_back(walk.Predict(unlike) - unlike_before);
  }
  // Both are two steps or more from the measurement by parameters; the one that uses the machine
  // alike (its waves and shared memory differ, so by a share of the measured error) moves further
  // with alike on, the other not at all.
  EXPECT_LT(shift[2], shift[0] - 0.04);
  EXPECT_NEAR(shift[3], shift[1], 1e-9);
}

// Simulated training's practice walks take EpisodeOptions::alike_width (off by default): with it,
// what the policy observes after a measurement carries to configs that use the machine alike, as in
// a session with ppo's `alike`.
TEST(WalkAlikeTest, PracticeWalksCorrectTheirBeliefsWithTheWidthTheyAreGiven) {
  const Truth t = LoadTruth("attention_2x16x2048x128_causal_fp16.jsonl", 0);
  const auto model = SoftmaxOnlyModel();
  auto tasks = std::make_shared<std::vector<Task>>();
  tasks->push_back(Task::FromTable(t.table, PriorFromModel(model.get(), t.table.problem, t.space), {}));
  std::vector<std::vector<double>> beliefs;  // Of every config, after the first measurement.
  for (double width : {0.0, 0.0, 0.5}) {
    EpisodeOptions episodes;
    episodes.alike_width = width;
    TuningEpisodeEnv env(tasks, episodes);
    env.Reset(7);
    env.Step(kJump);
    ASSERT_EQ(env.walk().evals(), 1);
    beliefs.emplace_back();
    t.space.ForEach([&](const Config& c) {
      beliefs.back().push_back(env.walk().Predict(c));
      return true;
    });
  }
  EXPECT_EQ(beliefs[0], beliefs[1]);
  double moved = 0;
  for (size_t i = 0; i < beliefs[0].size(); ++i) moved = std::max(moved, std::abs(beliefs[2][i] - beliefs[0][i]));
  EXPECT_GT(moved, 0.05);
}

TEST(WalkBeliefTest, FailuresMakeTheirNeighboursLikelyToFail) {
  const Truth& t = Softmax();
  Prior prior = PriorOf(t, 1, 0.05, 3);
  std::fill(prior.p_fail.begin(), prior.p_fail.end(), 0.1);
  Walk s(t.space, prior, {}, 100, {}, 5);
  // Two neighbouring configs: one fails, the other is then believed more likely to fail; a config
  // far from it keeps the prior's belief.
  Config failed, near, far;
  bool found = false;
  t.space.ForEach([&](const Config& c) {
    for (size_t p = 0; p < t.space.num_params() && !found; ++p) {
      const auto n = t.space.Move(c, p, 1);
      if (!n || !t.space.IsValid(*n)) continue;
      failed = c;
      near = *n;
      found = true;
    }
    return !found;
  });
  ASSERT_TRUE(found);
  const auto at = t.space.Encode(failed);
  double farthest = -1;
  t.space.ForEach([&](const Config& c) {
    const auto e = t.space.Encode(c);
    double d2 = 0;
    for (size_t p = 0; p < e.size(); ++p) d2 += (e[p] - at[p]) * (e[p] - at[p]);
    if (d2 > farthest) {
      farthest = d2;
      far = c;
    }
    return true;
  });
  EXPECT_DOUBLE_EQ(s.PFail(near), 0.1);
  Measurement out_of_resources;
  out_of_resources.status = Status::kOutOfResources;
  s.Record(failed, out_of_resources);
  EXPECT_GT(s.PFail(near), 0.3);
  EXPECT_NEAR(s.PFail(far), 0.1, 0.02);
  EXPECT_GT(s.PFail(failed), 0.5);
}

// The recorded softmax of 2048 x 16384 has nothing for num_stages to pipeline: its sweep copied one
// binary's time to every num_stages (45 groups of 4 alike). Two such pairs make num_stages inert:
// moves along it are masked, and neither a move nor a jump measures a config whose other values
// were measured already. A pair that then differs makes it count again.
TEST(WalkInertTest, AParameterWhoseChangesTimeTheSameBinaryIsNotMeasuredAgain) {
  const Truth& t = Softmax();
  const Prior prior = PriorOf(t, 1, 0.3, 7);
  const size_t stages = ParamIndex(t.space, "num_stages"), block = ParamIndex(t.space, "BLOCK");
  Walk s(t.space, prior, {}, 100, {}, 3);
  s.DetectInert(kInertPairs);
  auto measure = [&](const Config& c) { s.TakeMeasured(Move{c, true}, MeasurementOf(t, c)); };
  measure(SoftmaxAt(t, 2048, 8, 1));
  measure(SoftmaxAt(t, 2048, 8, 2));
  EXPECT_FALSE(s.Inert(stages));  // One pair alike could be the timer's resolution.
  measure(SoftmaxAt(t, 4096, 8, 1));
  EXPECT_FALSE(s.Inert(block));  // BLOCK changed the time.
  measure(SoftmaxAt(t, 4096, 8, 3));
  ASSERT_TRUE(s.Inert(stages));
  s.DetectInert(0);  // Off (simulated training): nothing is inert, nothing covered.
  EXPECT_FALSE(s.Inert(stages));
  EXPECT_FALSE(s.Covered(SoftmaxAt(t, 4096, 8, 4)));
  s.DetectInert(kInertPairs);
  EXPECT_TRUE(s.Covered(SoftmaxAt(t, 4096, 8, 4)));
  EXPECT_FALSE(s.Covered(SoftmaxAt(t, 4096, 16, 4)));  // num_warps 16 was never measured.
  EXPECT_FALSE(s.Resolve(2 * static_cast<int>(stages) + 1).has_value());  // At 4096, 8, 3: 4 is covered.
  for (int i = 0; i < 30; ++i) {
    const auto move = s.Resolve(kJump);
    ASSERT_TRUE(move.has_value());
    EXPECT_FALSE(s.Covered(move->config)) << i;
    measure(move->config);
  }
  const size_t warps = ParamIndex(t.space, "num_warps");
  std::set<std::pair<int32_t, int32_t>> timed;  // (BLOCK, num_warps) of every ok config measured.
  int measured = 0;
  t.space.ForEach([&](const Config& c) {
    if (!s.Measured(c) || !MeasurementOf(t, c).ok()) return true;
    ++measured;
    timed.insert({c[block], c[warps]});
    return true;
  });
  // Besides the two pairs that taught it, every ok config measured is a binary of its own.
  EXPECT_EQ(measured, static_cast<int>(timed.size()) + 2);

  // A pair along num_stages that differs (a kernel that does pipeline somewhere) ends it: one of
  // the (BLOCK, num_warps) never measured, its num_stages 2 recorded 1.5x slower than its 1.
  std::optional<Config> fresh;
  t.space.ForEach([&](const Config& c) {
    if (c[stages] != 0 || !MeasurementOf(t, c).ok() || timed.count({c[block], c[warps]})) return true;
    fresh = c;
    return false;
  });
  ASSERT_TRUE(fresh.has_value());
  measure(*fresh);
  Config next = *fresh;
  next[stages] = 1;
  Measurement slower = MeasurementOf(t, *fresh);
  slower.ms *= 1.5;
  s.Record(next, slower);
  EXPECT_FALSE(s.Inert(stages));
  EXPECT_FALSE(s.Covered(SoftmaxAt(t, 4096, 8, 4)));
}

// A step that made the kernel slower in two pairs of configs, and faster in none, is one the
// policy may not take onto an unmeasured config (Mask), whatever the prior says: the trace of an
// attention shape whose policy stepped BLOCK_M down from every jump, 1.04-2.5x slower each time.
// Times within 2 % are no evidence; a pair where the step won ends it.
TEST(WalkLosingTest, AStepThatLostTwiceAndNeverWonIsMaskedForThePolicy) {
  const Truth& t = Softmax();
  const Prior prior = PriorOf(t, 1, 0.3, 7);
  const size_t block = ParamIndex(t.space, "BLOCK");
  const int down = 2 * static_cast<int>(block), up = down + 1;
  Walk s(t.space, prior, {}, 100, {}, 3);
  s.DetectLosingSteps(2);
  auto record = [&](int b, int w, double ms) {
    Measurement m = MeasurementOf(t, SoftmaxAt(t, b, w, 1));
    ASSERT_TRUE(m.ok());
    m.ms = ms;
    s.Record(SoftmaxAt(t, b, w, 1), m);
  };
  record(4096, 8, 1.0);
  record(2048, 8, 1.3);  // BLOCK down lost, so BLOCK up won.
  EXPECT_FALSE(s.Losing(block, 0));  // Once could be noise.
  record(4096, 4, 1.0);
  record(2048, 4, 1.01);  // Within 2 %: neither.
  EXPECT_FALSE(s.Losing(block, 0));
  record(4096, 2, 1.0);
  record(2048, 2, 1.5);
  ASSERT_TRUE(s.Losing(block, 0));
  EXPECT_FALSE(s.Losing(block, 1));

  // Standing on a config whose BLOCK-down neighbour is unmeasured: the step is resolvable but masked.
  s.TakeMeasured(Move{SoftmaxAt(t, 4096, 16, 1), true}, MeasurementOf(t, SoftmaxAt(t, 4096, 16, 1)));
  ASSERT_TRUE(s.Resolve(down).has_value());
  EXPECT_TRUE(s.Resolve(down)->measure);
  EXPECT_EQ(s.Mask()[down], 0);
  EXPECT_EQ(s.Mask()[up], s.Resolve(up).has_value() ? 1 : 0);
  s.DetectLosingSteps(0);  // Off (simulated training): nothing masked.
  EXPECT_EQ(s.Mask()[down], 1);
  s.DetectLosingSteps(2);
  EXPECT_EQ(s.Mask()[down], 0);

  // A pair where the step made the kernel faster: it no longer loses.
  record(4096, 1, 1.0);
  record(2048, 1, 0.9);
  EXPECT_FALSE(s.Losing(block, 0));
  EXPECT_EQ(s.Mask()[down], 1);
}

// The recorded cumsum: BLOCK_ROWS * BLOCK_COLS must lie within 2 to 32 elements a thread.
const Truth& Cumsum() {
  static const Truth truth = LoadTruth("cumsum.jsonl", 1);  // 8192 x 4096 bf16.
  return truth;
}

TEST(WalkRidgeTest, AStepThatBreaksAConstraintFollowsItsRidgeToTheMostPromisingValidConfig) {
  const Truth& t = Cumsum();
  ASSERT_FALSE(t.space.constraints().empty()) << t.table.problem.Label();
  const Prior prior = PriorOf(t, 1, 0.2, 5);
  Walk s(t.space, prior, {}, 100, {}, 1);
  const size_t rows = ParamIndex(t.space, "BLOCK_ROWS"), cols = ParamIndex(t.space, "BLOCK_COLS"),
               warps = ParamIndex(t.space, "num_warps");
  auto at = [&](int r, int c, int w) {
    const auto config = t.space.Find({{"BLOCK_ROWS", Value(int64_t{r})}, {"BLOCK_COLS", Value(int64_t{c})},
                                      {"num_warps", Value(int64_t{w})}});
    EXPECT_TRUE(config.has_value()) << r << " " << c << " " << w;
    return *config;
  };
  const Config full = at(4, 256, 1);  // 32 elements a thread: the most a thread may hold.
  ASSERT_TRUE(t.space.IsValid(full));
  // Wider columns alone would be 64 a thread: the step also moves one other parameter one step,
  // to the valid config the walk believes fastest.
  ASSERT_FALSE(t.space.IsValid(*t.space.Move(full, cols, 1)));
  const auto wider = s.RidgeStep(full, cols, 1);
  ASSERT_TRUE(wider.has_value());
  EXPECT_TRUE(t.space.IsValid(*wider));
  EXPECT_EQ((*wider)[cols], full[cols] + 1);
  int moved = 0;
  for (size_t p = 0; p < full.size(); ++p)
    if (p != cols) moved += std::abs((*wider)[p] - full[p]);
  EXPECT_EQ(moved, 1);
  for (const Config& other : {at(2, 512, 1), at(4, 512, 2)}) {
    ASSERT_TRUE(t.space.IsValid(other));
    EXPECT_LE(s.Predict(*wider), s.Predict(other));
  }
  // A step the constraints allow is the step itself; one past the end of a range is none.
  EXPECT_EQ(s.RidgeStep(full, warps, 1), t.space.Move(full, warps, 1));
  EXPECT_FALSE(s.RidgeStep(at(1, 256, 1), rows, -1).has_value());
  // Unchecked neighbours hold the ridge step only when asked for it.
  s.TakeMeasured(Move{full, true}, MeasurementOf(t, full));
  const auto plain = s.UncheckedNeighbours();
  const auto ridge = s.UncheckedNeighbours(0, 0, true);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), *wider), 0);
  EXPECT_EQ(std::count(ridge.begin(), ridge.end(), *wider), 1);
  for (const Config& c : plain) EXPECT_EQ(std::count(ridge.begin(), ridge.end(), c), 1);
  EXPECT_GT(ridge.size(), plain.size());
}

// The recorded matmul 2048 x 1000 x 16384 (bf16): its deepest tiles need more shared memory than
// the H200 has with 4 or 5 stages, and compile within it with 2 or 3.
const Truth& DeepMatmul() {
  static const Truth truth = LoadTruth("matmul_2048x1000x16384_bf16.jsonl", 0);
  return truth;
}

TEST(WalkStaticTest, ACompileVerdictReplacesTheFailureBeliefOfAnUnmeasuredNeighbour) {
  const Truth& t = DeepMatmul();
  // A measured config with one neighbour that compiled within the limits and one that did not.
  std::optional<Config> from, fits, over;
  for (const auto& row : t.table.rows) {
    if (!row.measurement.ok()) continue;
    const Config c = *t.space.Find(row.config);
    std::optional<Config> ok_one, over_one;
    for (const Config& n : t.space.Neighbours(c)) {
      const Measurement m = MeasurementOf(t, n);
      if (m.ok()) ok_one = n;
      if (m.status == Status::kOutOfResources) over_one = n;
    }
    if (ok_one && over_one) {
      from = c, fits = ok_one, over = over_one;
      break;
    }
  }
  ASSERT_TRUE(from.has_value()) << "no ok config of the table has both kinds of neighbour";
  // A prior that is wrong about both: it believes the fitting one fails and the other fits.
  Prior prior = PriorOf(t, 1, 0.1, 4);
  prior.p_fail[t.space.Index(*fits)] = 0.9;
  prior.p_fail[t.space.Index(*over)] = 0.05;
  Walk s(t.space, prior, {}, 100, {}, 1);
  s.TakeMeasured(Move{*from, true}, MeasurementOf(t, *from));
  auto listed = [&](const Config& c) {
    const auto unchecked = s.UncheckedNeighbours();
    return std::count(unchecked.begin(), unchecked.end(), c);
  };
  EXPECT_EQ(listed(*fits), 0);
  EXPECT_EQ(listed(*over), 1);
  EXPECT_FALSE(s.HasStaticVerdict(*fits));
  const double believed_fits = s.PFail(*fits), believed_over = s.PFail(*over);

  s.SetStaticVerdict(*fits, true);
  s.SetStaticVerdict(*over, false);
  EXPECT_TRUE(s.HasStaticVerdict(*fits) && s.HasStaticVerdict(*over));
  EXPECT_LT(s.PFail(*fits), 0.05);
  EXPECT_EQ(s.PFail(*over), 1.0);
  EXPECT_EQ(listed(*fits), 1);
  EXPECT_EQ(listed(*over), 0);
  // The policy observes the belief without the verdicts, as it was trained.
  EXPECT_EQ(s.PFailWithoutVerdict(*fits), believed_fits);
  EXPECT_EQ(s.PFailWithoutVerdict(*over), believed_over);
  // A verdict outlives a refitted prior: it is about the binary, not the times.
  s.Rebase(prior);
  EXPECT_EQ(s.PFail(*over), 1.0);
}

TEST(WalkSeedTest, TheSeedChangesUncertainJumpsAndOnlyTheSeed) {
  const Truth& t = Softmax();
  const Prior prior = PriorOf(t, 1, 0.3, 6);
  auto trace = [&](uint64_t seed) {
    Walk s(t.space, prior, {}, 100, {}, seed);
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
