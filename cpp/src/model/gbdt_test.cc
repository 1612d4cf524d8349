#include "dr_kernel/model/gbdt.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

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

}  // namespace
}  // namespace dr_kernel
