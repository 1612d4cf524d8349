// Helpers shared by the tests of the reinforcement-learning room.
#ifndef DR_KERNEL_SRC_RL_TEST_UTIL_H_
#define DR_KERNEL_SRC_RL_TEST_UTIL_H_

#include <Eigen/Dense>
#include <algorithm>
#include <functional>

#include "dr_kernel/rl/policy.h"
#include "dr_kernel/rng.h"

namespace dr_kernel::rl::testing {

// The gradient of f at x by central differences with step h.
inline Eigen::VectorXd NumericGradient(const std::function<double(const Eigen::VectorXd&)>& f,
                                       Eigen::VectorXd x, double h = 1e-5) {
  Eigen::VectorXd grad(x.size());
  for (Eigen::Index i = 0; i < x.size(); ++i) {
    const double saved = x(i);
    x(i) = saved + h;
    const double up = f(x);
    x(i) = saved - h;
    const double down = f(x);
    x(i) = saved;
    grad(i) = (up - down) / (2 * h);
  }
  return grad;
}

// ||a - b|| / max(||a||, ||b||): the relative error of one gradient against another.
inline double RelativeError(const Eigen::VectorXd& a, const Eigen::VectorXd& b) {
  const double scale = std::max(a.norm(), b.norm());
  return scale == 0 ? 0.0 : (a - b).norm() / scale;
}

// A matrix of standard normal draws.
inline Eigen::MatrixXd RandomMatrix(Eigen::Index rows, Eigen::Index cols, Rng& rng) {
  Eigen::MatrixXd m(rows, cols);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = rng.Normal();
  return m;
}

// A random mask with every row allowing at least one action (about `allowed` of them on average).
inline MaskMatrix RandomMask(Eigen::Index rows, Eigen::Index cols, double allowed, Rng& rng) {
  MaskMatrix mask(rows, cols);
  for (Eigen::Index i = 0; i < rows; ++i) {
    for (Eigen::Index j = 0; j < cols; ++j) mask(i, j) = rng.Uniform() < allowed ? 1 : 0;
    mask(i, static_cast<Eigen::Index>(rng.Below(cols))) = 1;
  }
  return mask;
}

// One allowed action per row, uniformly among the allowed ones.
inline std::vector<int> RandomAllowedActions(const MaskMatrix& mask, Rng& rng) {
  std::vector<int> actions(mask.rows());
  for (Eigen::Index i = 0; i < mask.rows(); ++i) {
    std::vector<int> allowed;
    for (Eigen::Index j = 0; j < mask.cols(); ++j) {
      if (mask(i, j)) allowed.push_back(static_cast<int>(j));
    }
    actions[i] = allowed[rng.Below(allowed.size())];
  }
  return actions;
}

}  // namespace dr_kernel::rl::testing

#endif  // DR_KERNEL_SRC_RL_TEST_UTIL_H_
