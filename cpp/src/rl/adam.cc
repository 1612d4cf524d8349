#include "dr_kernel/rl/adam.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace dr_kernel::rl {

Adam::Adam(Eigen::Index num_params, AdamConfig config)
    : config_(config), m_(Eigen::VectorXd::Zero(num_params)), v_(Eigen::VectorXd::Zero(num_params)) {}

void Adam::Reset() {
  m_.setZero();
  v_.setZero();
  t_ = 0;
}

double Adam::Step(const Eigen::VectorXd& grad, Eigen::VectorXd* params) {
  if (grad.size() != m_.size() || params->size() != m_.size()) {
    throw std::invalid_argument("Adam was built for " + std::to_string(m_.size()) +
                                " parameters but got a gradient of " + std::to_string(grad.size()) +
                                " and parameters of " + std::to_string(params->size()) + ".");
  }
  const double norm = grad.norm();
  double scale = 1.0;
  if (config_.max_grad_norm > 0 && norm > config_.max_grad_norm) scale = config_.max_grad_norm / norm;
  ++t_;
  const double b1 = config_.beta1, b2 = config_.beta2;
  m_ = b1 * m_ + ((1 - b1) * scale) * grad;
  v_ = b2 * v_ + ((1 - b2) * scale * scale) * grad.cwiseAbs2();
  // Bias corrections folded into the step size and epsilon: the same update as
  // m_hat / (sqrt(v_hat) + epsilon) with m_hat = m / c1 and v_hat = v / c2, one pass fewer.
  const double c1 = 1 - std::pow(b1, static_cast<double>(t_));
  const double c2 = 1 - std::pow(b2, static_cast<double>(t_));
  const double step = config_.learning_rate * std::sqrt(c2) / c1;
  const double eps = config_.epsilon * std::sqrt(c2);
  params->array() -= step * m_.array() / (v_.array().sqrt() + eps);
  return norm;
}

}  // namespace dr_kernel::rl
