#include "dr_kernel/rl/adam.h"

#include <gtest/gtest.h>

#include <cmath>

namespace dr_kernel::rl {
namespace {

TEST(AdamTest, MinimisesAQuadratic) {
  // f(x) = 0.5 * sum a_i (x_i - c_i)^2 with very different curvatures.
  const Eigen::VectorXd a = (Eigen::VectorXd(3) << 100.0, 1.0, 0.01).finished();
  const Eigen::VectorXd c = (Eigen::VectorXd(3) << 1.0, -2.0, 3.0).finished();
  Eigen::VectorXd x = Eigen::VectorXd::Zero(3);
  Adam adam(3, AdamConfig{0.05});
  for (int i = 0; i < 5000; ++i) adam.Step(a.cwiseProduct(x - c), &x);
  EXPECT_LT((x - c).cwiseAbs().maxCoeff(), 1e-3);
  EXPECT_EQ(adam.steps(), 5000);
}

TEST(AdamTest, FirstStepHasTheLearningRateAsItsSize) {
  Eigen::VectorXd x = Eigen::VectorXd::Zero(3);
  Adam adam(3, AdamConfig{0.1});
  adam.Step((Eigen::VectorXd(3) << 5.0, -0.001, 300.0).finished(), &x);
  EXPECT_NEAR(x(0), -0.1, 1e-6);
  EXPECT_NEAR(x(1), 0.1, 1e-3);
  EXPECT_NEAR(x(2), -0.1, 1e-6);
}

TEST(AdamTest, ClipsTheGlobalNorm) {
  const Eigen::VectorXd g = (Eigen::VectorXd(2) << 6.0, 8.0).finished();  // Norm 10.
  AdamConfig clipped_config{0.01};
  clipped_config.max_grad_norm = 1.0;
  Adam clipped(2, clipped_config), plain(2, AdamConfig{0.01});
  Eigen::VectorXd x = Eigen::VectorXd::Ones(2), y = Eigen::VectorXd::Ones(2);
  for (int i = 0; i < 3; ++i) {
    EXPECT_DOUBLE_EQ(clipped.Step(g * (i + 1), &x), 10.0 * (i + 1));
    plain.Step(g * (i + 1) / (10.0 * (i + 1)), &y);  // What clipping should have fed it.
  }
  EXPECT_LT((x - y).cwiseAbs().maxCoeff(), 1e-15);
  // A gradient under the limit passes untouched.
  Adam under(2, clipped_config), reference(2, AdamConfig{0.01});
  Eigen::VectorXd u = Eigen::VectorXd::Zero(2), v = Eigen::VectorXd::Zero(2);
  under.Step(g / 20.0, &u);
  reference.Step(g / 20.0, &v);
  EXPECT_EQ(u, v);
}

TEST(AdamTest, RejectsMismatchedSizesAndResets) {
  Adam adam(2, AdamConfig{});
  Eigen::VectorXd x = Eigen::VectorXd::Zero(3);
  EXPECT_THROW(adam.Step(Eigen::VectorXd::Zero(3), &x), std::invalid_argument);
  Eigen::VectorXd y = Eigen::VectorXd::Zero(2), z = Eigen::VectorXd::Zero(2);
  adam.Step(Eigen::VectorXd::Ones(2), &y);
  adam.Reset();
  EXPECT_EQ(adam.steps(), 0);
  // After a reset the step is a first step again: the same as a fresh optimiser's.
  Adam fresh(2, AdamConfig{});
  const Eigen::VectorXd before = y;
  adam.Step(Eigen::VectorXd::Ones(2), &y);
  fresh.Step(Eigen::VectorXd::Ones(2), &z);
  EXPECT_LT((y - before - z).cwiseAbs().maxCoeff(), 1e-15);
}

}  // namespace
}  // namespace dr_kernel::rl
