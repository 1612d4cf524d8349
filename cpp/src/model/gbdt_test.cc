#include "dr_kernel/model/gbdt.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "dr_kernel/rng.h"

namespace dr_kernel {
namespace {

// y = sin(3 x0) + x1^2 - 0.5 * x0 * x2 + (x3 > 0.3 ? 1 : 0), plus small noise; x4 is irrelevant.
double Target(const double* x) {
  return std::sin(3 * x[0]) + x[1] * x[1] - 0.5 * x[0] * x[2] + (x[3] > 0.3 ? 1.0 : 0.0);
}

Dataset MakeData(size_t n, uint64_t seed, double noise) {
  Rng rng(seed);
  Dataset d;
  d.num_features = 5;
  double x[5];
  for (size_t i = 0; i < n; ++i) {
    for (double& v : x) v = 2 * rng.Uniform() - 1;
    d.Add(x, Target(x) + noise * rng.Normal());
  }
  return d;
}

double RSquared(const Gbdt& model, const Dataset& test) {
  double mean = 0;
  for (double y : test.y) mean += y;
  mean /= test.num_rows();
  double ss_res = 0, ss_tot = 0;
  for (size_t i = 0; i < test.num_rows(); ++i) {
    const double e = model.Predict(test.row(i)) - test.y[i];
    ss_res += e * e;
    ss_tot += (test.y[i] - mean) * (test.y[i] - mean);
  }
  return 1 - ss_res / ss_tot;
}

TEST(GbdtTest, FitsANonlinearFunctionOnHeldOutRows) {
  const Dataset train = MakeData(3000, 1, 0.05), test = MakeData(1000, 2, 0.0);
  Gbdt model;
  GbdtOptions o;
  o.num_trees = 300;
  o.max_depth = 5;
  model.Fit(train, o);
  EXPECT_GT(RSquared(model, test), 0.9);
  EXPECT_EQ(model.num_trees(), 300u);
  // The irrelevant feature earns far less split gain than the relevant ones.
  const auto gains = model.SplitGains();
  EXPECT_LT(gains[4], 0.1 * gains[0]);
}

std::vector<double> PredictAll(const Gbdt& model, const Dataset& data) {
  std::vector<double> out;
  for (size_t i = 0; i < data.num_rows(); ++i) out.push_back(model.Predict(data.row(i)));
  return out;
}

TEST(GbdtTest, IsDeterministicForASeedAndVariesWithIt) {
  const Dataset train = MakeData(1000, 3, 0.1), test = MakeData(200, 4, 0.0);
  GbdtOptions o;
  o.num_trees = 50;
  o.seed = 7;
  Gbdt a, b, c;
  a.Fit(train, o);
  b.Fit(train, o);
  o.seed = 8;
  c.Fit(train, o);
  EXPECT_EQ(PredictAll(a, test), PredictAll(b, test));
  EXPECT_NE(PredictAll(a, test), PredictAll(c, test));
}

TEST(GbdtTest, SaveLoadRoundTripGivesIdenticalPredictions) {
  const Dataset train = MakeData(800, 5, 0.1), test = MakeData(200, 6, 0.0);
  GbdtOptions o;
  o.num_trees = 37;  // Not a multiple of the interleaved group, to exercise the remainder.
  Gbdt model;
  model.Fit(train, o);
  std::stringstream stream;
  model.Save(stream);
  const Gbdt loaded = Gbdt::Load(stream);
  EXPECT_EQ(loaded.num_trees(), model.num_trees());
  EXPECT_EQ(PredictAll(loaded, test), PredictAll(model, test));
}

TEST(GbdtTest, LoadRejectsATruncatedStream) {
  const Dataset train = MakeData(200, 5, 0.1);
  Gbdt model;
  model.Fit(train, GbdtOptions{});
  std::stringstream stream;
  model.Save(stream);
  const std::string text = stream.str();
  std::stringstream cut(text.substr(0, text.size() / 2));
  EXPECT_THROW(Gbdt::Load(cut), ModelError);
}

TEST(GbdtTest, LogisticLossSeparatesClasses) {
  // Class 1 inside a disc: not linearly separable.
  Rng rng(9);
  Dataset train, test;
  train.num_features = test.num_features = 2;
  for (int i = 0; i < 3000; ++i) {
    const double x[2] = {2 * rng.Uniform() - 1, 2 * rng.Uniform() - 1};
    (i < 2000 ? train : test).Add(x, x[0] * x[0] + x[1] * x[1] < 0.4 ? 1.0 : 0.0);
  }
  GbdtOptions o;
  o.loss = Loss::kLogistic;
  o.num_trees = 100;
  o.max_depth = 4;
  Gbdt model;
  model.Fit(train, o);
  int right = 0;
  for (size_t i = 0; i < test.num_rows(); ++i) {
    const double p = model.PredictProbability(test.row(i));
    EXPECT_GE(p, 0.0);
    EXPECT_LE(p, 1.0);
    right += (p >= 0.5) == (test.y[i] > 0.5);
  }
  EXPECT_GT(right, 0.95 * test.num_rows());
}

TEST(GbdtTest, WeightsActLikeRepeatedRows) {
  // Two rows at the same x with targets 0 and 1, the second weighted 3: the fit is their weighted
  // mean, 0.75, as if the second row were there three times.
  Dataset d;
  d.num_features = 1;
  const double x = 1.0;
  d.Add(&x, 0.0, 1.0);
  d.Add(&x, 1.0, 3.0);
  GbdtOptions o;
  o.num_trees = 1;
  o.learning_rate = 1.0;
  o.l2 = 0.0;
  o.subsample = 1.0;
  o.min_samples_leaf = 1;
  Gbdt model;
  model.Fit(d, o);
  EXPECT_NEAR(model.Predict(&x), 0.75, 1e-12);
}

TEST(FeatureBinsTest, FewDistinctValuesGetOneBinEachAndManyGetQuantiles) {
  Dataset d;
  d.num_features = 2;
  for (int i = 0; i < 1000; ++i) {
    const double x[2] = {static_cast<double>(i % 4), static_cast<double>(i)};
    d.Add(x, 0.0);
  }
  const FeatureBins bins = FeatureBins::Fit(d, 64);
  ASSERT_EQ(bins.edges(0).size(), 3u);
  EXPECT_DOUBLE_EQ(bins.edges(0)[0], 0.5);
  EXPECT_EQ(bins.Bin(0, 0.0), 0);
  EXPECT_EQ(bins.Bin(0, 3.0), 3);
  EXPECT_LE(bins.edges(1).size(), 63u);
  EXPECT_GE(bins.edges(1).size(), 60u);
  EXPECT_EQ(bins.Bin(1, -5.0), 0);
  EXPECT_EQ(bins.Bin(1, 5000.0), bins.edges(1).size());
}

}  // namespace
}  // namespace dr_kernel
