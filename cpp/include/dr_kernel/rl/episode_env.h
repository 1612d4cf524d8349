// The episodic environment PPO trains on: observations as vectors of doubles, a fixed set of
// discrete actions of which a mask allows some, rewards, and episode ends.
#ifndef DR_KERNEL_RL_EPISODE_ENV_H_
#define DR_KERNEL_RL_EPISODE_ENV_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace dr_kernel::rl {

// What one step of an episode gave.
struct EpisodeStep {
  // The observation after the step (when the episode ended: its final observation).
  std::vector<double> obs;
  double reward = 0;
  // The episode is over; the trainer resets the environment before the next step.
  bool done = false;
  // The episode was cut short (a step limit, a spent budget) in a state that is not terminal, so its
  // future value is estimated from `obs` rather than taken as zero. Meaningful only with `done`.
  bool truncated = false;
  // Rewards paid now to earlier steps of the same episode: (steps ago >= 1, reward). Lets an
  // environment credit an exploratory step once what it led to is known; credit for a step before
  // the current rollout is dropped.
  std::vector<std::pair<int, double>> credit_back;
};

// One environment instance. Training runs many instances in lockstep, made with Clone(); each must
// be independent of the others and deterministic given its Reset seed and actions.
class EpisodeEnv {
 public:
  virtual ~EpisodeEnv() = default;

  // Length of every observation.
  virtual int observation_size() const = 0;
  // Number of discrete actions (allowed or not); actions are 0 .. num_actions() - 1.
  virtual int num_actions() const = 0;

  // Starts a new episode, drawing whatever is random from `seed`; returns the first observation.
  virtual std::vector<double> Reset(uint64_t seed) = 0;
  // Which actions are allowed now: num_actions() entries, nonzero = allowed, at least one allowed.
  virtual std::vector<uint8_t> Mask() const = 0;
  // Takes an allowed action.
  virtual EpisodeStep Step(int action) = 0;

  // A new, independent instance of the same environment (its state need not be copied: the trainer
  // resets it before use). Independent also across threads: rl::Train steps the instances on
  // several at once, so whatever they share must be only read.
  virtual std::unique_ptr<EpisodeEnv> Clone() const = 0;
};

}  // namespace dr_kernel::rl

#endif  // DR_KERNEL_RL_EPISODE_ENV_H_
