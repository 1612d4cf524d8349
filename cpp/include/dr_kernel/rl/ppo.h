// Proximal policy optimisation (Schulman et al. 2017) with generalised advantage estimation, and
// behaviour cloning for offline pre-training from recorded tuning histories.
#ifndef DR_KERNEL_RL_PPO_H_
#define DR_KERNEL_RL_PPO_H_

#include <Eigen/Dense>
#include <cstdint>
#include <vector>

#include "dr_kernel/rl/adam.h"
#include "dr_kernel/rl/policy.h"
#include "dr_kernel/rng.h"

namespace dr_kernel::rl {

// Everything PPO needs to know, from network shape to the update's hyper-parameters. The defaults
// are the common ones for small discrete tasks (cf. Huang et al., "The 37 implementation details of
// PPO", 2022).
struct PpoConfig {
  // Hidden layer widths of the actor and of the critic.
  std::vector<int> hidden = {64, 64};
  // Environments stepped in lockstep, and steps each takes per rollout; a rollout holds
  // num_envs * num_steps transitions.
  int num_envs = 16;
  int num_steps = 128;
  // Discount and GAE's lambda.
  double gamma = 0.99;
  double gae_lambda = 0.95;
  // Passes over each rollout, and transitions per gradient step.
  int epochs = 4;
  int minibatch_size = 512;
  // The surrogate's clipping range: the probability ratio is kept within [1 - clip, 1 + clip].
  double clip = 0.2;
  // When positive, the value loss is also clipped: a value may move at most this far from the value
  // recorded in the rollout, and the larger of the clipped and unclipped errors counts.
  double value_clip = 0.0;
  // Weights of the value loss and of the entropy bonus in the total loss.
  double value_coef = 0.5;
  double entropy_coef = 0.01;
  // Adam's step size, annealed linearly to zero over training when anneal_learning_rate is set.
  double learning_rate = 3e-4;
  bool anneal_learning_rate = false;
  // Gradient clipping: global norm of each network's gradient (0 = off).
  double max_grad_norm = 0.5;
  // When positive, an update stops early once a minibatch's approximate KL divergence from the
  // rollout's policy exceeds this.
  double target_kl = 0.0;
  // Advantages are shifted and scaled to mean 0 and standard deviation 1 over each rollout.
  bool normalize_advantages = true;
  // Threads for gradient computation and, in rl::Train, for stepping the environments (0: one per
  // core). Each minibatch is split into the same fixed shards whatever the thread count and their
  // gradients are summed in a fixed order, and each environment steps on its own state, so results
  // depend on the seed alone, never on this.
  int threads = 1;
};

// The generalised advantage estimate over a rollout laid out as num_steps rows of num_envs
// transitions (transition t * num_envs + e is step t of environment e). dones marks the last
// transition of an episode; truncated marks those episode ends that were cut short (by a time limit)
// rather than reaching a terminal state, and for them bootstrap_values holds the value of the
// observation the episode was cut at, which stands in for the missing future. last_values holds
// the value of each environment's observation after the rollout's last step. Fills `advantages`
// and `returns` (= advantages + values).
void ComputeGae(const Eigen::VectorXd& rewards, const Eigen::VectorXd& values,
                const std::vector<uint8_t>& dones, const std::vector<uint8_t>& truncated,
                const Eigen::VectorXd& bootstrap_values, const Eigen::VectorXd& last_values, int num_envs,
                double gamma, double lambda, Eigen::VectorXd* advantages, Eigen::VectorXd* returns);

// The transitions of one rollout of num_envs environments over num_steps lockstep steps.
class RolloutBuffer {
 public:
  RolloutBuffer(int num_steps, int num_envs, int obs_size, int num_actions);

  // Appends one lockstep step: row e of every argument belongs to environment e. `bootstrap_values`
  // is read only where `truncated` is set (see ComputeGae). Throws std::logic_error when the buffer
  // is full and std::invalid_argument on a shape mismatch.
  void Add(const Eigen::MatrixXd& obs, const MaskMatrix& mask, const std::vector<int>& actions,
           const Eigen::VectorXd& log_probs, const Eigen::VectorXd& values, const Eigen::VectorXd& rewards,
           const std::vector<uint8_t>& dones, const std::vector<uint8_t>& truncated,
           const Eigen::VectorXd& bootstrap_values);
  // Fills advantages() and returns() once the buffer is full (see ComputeGae).
  void ComputeAdvantages(const Eigen::VectorXd& last_values, double gamma, double lambda);
  // Empties the buffer for the next rollout.
  void Clear() { steps_ = 0; }
  // Adds to the reward of an earlier step (0 <= step < steps added) of one environment.
  void AddReward(int step, int env, double reward) {
    rewards_(static_cast<Eigen::Index>(step) * num_envs_ + env) += reward;
  }

  int num_steps() const { return num_steps_; }
  int num_envs() const { return num_envs_; }
  int steps() const { return steps_; }
  bool full() const { return steps_ == num_steps_; }
  Eigen::Index size() const { return static_cast<Eigen::Index>(num_steps_) * num_envs_; }

  const Eigen::MatrixXd& obs() const { return obs_; }
  const MaskMatrix& mask() const { return mask_; }
  const std::vector<int>& actions() const { return actions_; }
  const Eigen::VectorXd& log_probs() const { return log_probs_; }
  const Eigen::VectorXd& values() const { return values_; }
  const Eigen::VectorXd& rewards() const { return rewards_; }
  const std::vector<uint8_t>& dones() const { return dones_; }
  const std::vector<uint8_t>& truncated() const { return truncated_; }
  const Eigen::VectorXd& advantages() const { return advantages_; }
  const Eigen::VectorXd& returns() const { return returns_; }

 private:
  int num_steps_, num_envs_;
  int steps_ = 0;
  Eigen::MatrixXd obs_;
  MaskMatrix mask_;
  std::vector<int> actions_;
  Eigen::VectorXd log_probs_, values_, rewards_, bootstrap_values_, advantages_, returns_;
  std::vector<uint8_t> dones_, truncated_;
};

// A minibatch of transitions as PPO's loss sees them.
struct PpoBatch {
  Eigen::MatrixXd obs;
  MaskMatrix mask;
  std::vector<int> actions;
  Eigen::VectorXd old_log_probs;  // log pi_old(action | obs), recorded in the rollout.
  Eigen::VectorXd old_values;     // V_old(obs), recorded in the rollout.
  Eigen::VectorXd advantages;     // Already normalised when normalisation is on.
  Eigen::VectorXd returns;        // Targets of the value function.
};

// The terms of PPO's loss on one minibatch (means over its transitions).
struct PpoLoss {
  double total = 0;          // policy + value_coef * value - entropy_coef * entropy
  double policy = 0;         // Clipped surrogate, negated to be minimised.
  double value = 0;          // 0.5 * squared error (the larger of clipped and unclipped if clipping).
  double entropy = 0;        // Mean entropy of the policy.
  double approx_kl = 0;      // Mean of (r - 1) - log r, r = pi / pi_old: KL(pi_old || pi) estimate.
  double clip_fraction = 0;  // Share of transitions with |r - 1| > clip.
};

// PPO's loss on `batch` and its gradients: ADDS d total / d actor parameters to `actor_grad` and
// d total / d critic parameters to `critic_grad` (each sized like its network). With null gradient
// pointers only the loss is computed.
PpoLoss PpoLossAndGradient(const ActorCritic& model, const PpoBatch& batch, const PpoConfig& config,
                           Eigen::VectorXd* actor_grad, Eigen::VectorXd* critic_grad);

// What one PPO update did (means over the minibatches it took).
struct PpoStats {
  double policy_loss = 0;
  double value_loss = 0;
  double entropy = 0;
  double approx_kl = 0;
  double clip_fraction = 0;
  // 1 - Var(returns - values) / Var(returns) over the rollout: how much of the return the critic
  // explained before the update.
  double explained_variance = 0;
  int epochs = 0;       // Epochs started (fewer than configured when stopped early).
  int minibatches = 0;  // Gradient steps taken.
  bool stopped_early = false;
};

// Owns the optimiser state of PPO for one actor-critic.
class PpoLearner {
 public:
  // The learner trains *model, which must outlive it.
  PpoLearner(ActorCritic* model, const PpoConfig& config);

  // Several epochs of shuffled minibatches over a full buffer whose advantages are computed.
  PpoStats Update(const RolloutBuffer& buffer, Rng& rng);
  void set_learning_rate(double learning_rate);

 private:
  ActorCritic* model_;
  PpoConfig config_;
  Adam actor_optimizer_, critic_optimizer_;
};

// Expert demonstrations for behaviour cloning: observations, masks and the expert's (allowed)
// actions, and optionally a value target per row (e.g. the discounted return that followed in a
// recorded tuning history) to pre-train the critic too.
struct Demonstrations {
  Eigen::MatrixXd obs;
  MaskMatrix mask;
  std::vector<int> actions;
  Eigen::VectorXd value_targets;  // Empty, or one per row.
};

// Behaviour cloning's settings.
struct BcConfig {
  int epochs = 20;
  int minibatch_size = 256;
  double learning_rate = 1e-3;
  double max_grad_norm = 1.0;
  // Weight of the value regression (when targets are given) and of an entropy bonus.
  double value_coef = 0.5;
  double entropy_coef = 0.0;
};

// The terms of the behaviour-cloning loss on a batch (means over its rows).
struct BcLoss {
  double total = 0;          // cross_entropy + value_coef * value - entropy_coef * entropy
  double cross_entropy = 0;  // -log pi(expert action | obs)
  double value = 0;          // 0.5 * squared error against the targets; 0 without targets.
  double entropy = 0;
  double accuracy = 0;  // Share of rows where the greedy action is the expert's.
};

// The behaviour-cloning loss on `batch` and its gradients, ADDED to actor_grad and critic_grad
// (critic_grad is untouched without value targets; null pointers skip the gradients). Throws
// std::invalid_argument when an expert action is out of range or masked out.
BcLoss BcLossAndGradient(const ActorCritic& model, const Demonstrations& batch, const BcConfig& config,
                         Eigen::VectorXd* actor_grad, Eigen::VectorXd* critic_grad);

// What behaviour cloning reached: the loss terms over all demonstrations after the last epoch.
struct BcStats {
  BcLoss final;
  int epochs = 0;
  int minibatches = 0;
};

// Trains `model` to imitate the demonstrations: `config.epochs` passes of shuffled minibatches,
// with fresh Adam optimisers.
BcStats BehaviourCloning(ActorCritic* model, const Demonstrations& data, const BcConfig& config, Rng& rng);

}  // namespace dr_kernel::rl

#endif  // DR_KERNEL_RL_PPO_H_
