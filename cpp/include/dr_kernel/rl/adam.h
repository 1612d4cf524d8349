// The Adam optimiser with optional clipping of the gradient's global norm.
#ifndef DR_KERNEL_RL_ADAM_H_
#define DR_KERNEL_RL_ADAM_H_

#include <Eigen/Dense>
#include <cstdint>

namespace dr_kernel::rl {

// Adam's hyper-parameters (Kingma & Ba 2015).
struct AdamConfig {
  double learning_rate = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  // When positive, a gradient whose Euclidean norm exceeds this is scaled down to it before the
  // step; zero or negative turns clipping off.
  double max_grad_norm = 0.0;
};

// Minimises a loss over one flat parameter vector. The moment estimates belong to that vector: use
// one Adam per parameter vector.
class Adam {
 public:
  Adam() = default;
  Adam(Eigen::Index num_params, AdamConfig config);

  // Moves `params` one step against `grad` (both num_params() long; throws std::invalid_argument
  // otherwise). Returns the gradient's norm before clipping.
  double Step(const Eigen::VectorXd& grad, Eigen::VectorXd* params);

  // Forgets the moments and the step count, as if freshly constructed.
  void Reset();

  const AdamConfig& config() const { return config_; }
  // For schedules (e.g. linear annealing); takes effect at the next Step.
  void set_learning_rate(double learning_rate) { config_.learning_rate = learning_rate; }
  Eigen::Index num_params() const { return m_.size(); }
  int64_t steps() const { return t_; }

 private:
  AdamConfig config_;
  Eigen::VectorXd m_;  // First-moment (mean) estimate.
  Eigen::VectorXd v_;  // Second-moment (uncentred variance) estimate.
  int64_t t_ = 0;
};

}  // namespace dr_kernel::rl

#endif  // DR_KERNEL_RL_ADAM_H_
