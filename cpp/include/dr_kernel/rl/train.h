// The PPO training loop over many instances of an episodic environment stepped in lockstep.
#ifndef DR_KERNEL_RL_TRAIN_H_
#define DR_KERNEL_RL_TRAIN_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "dr_kernel/rl/episode_env.h"
#include "dr_kernel/rl/policy.h"
#include "dr_kernel/rl/ppo.h"

namespace dr_kernel::rl {

// Progress after one rollout and update.
struct TrainLog {
  int64_t steps = 0;     // Environment steps so far, over all instances.
  int64_t episodes = 0;  // Episodes finished so far.
  // Mean undiscounted return and length of the episodes that finished during this rollout (NaN
  // when none did).
  double mean_return = 0;
  double mean_length = 0;
  PpoStats update;
};

// What training produced.
struct TrainResult {
  ActorCritic model;
  int64_t steps = 0;
  int64_t episodes = 0;
  std::vector<TrainLog> log;  // One entry per update.
};

// Trains an actor-critic with PPO on config.num_envs instances of `env` (the env itself and
// num_envs - 1 clones) that step in lockstep with one batched forward pass per step, for at least
// `steps` environment steps (whole rollouts of num_envs * num_steps; none for 0). Starts from `initial` (e.g.
// a behaviour-cloned model) when given, else from a fresh network drawn from the seed. Everything random
// (initial weights, episode seeds, actions, minibatch order) comes from `seed`: the same seed gives the same
// parameters. `on_update`, when given, is called after every update.
TrainResult Train(EpisodeEnv& env, const PpoConfig& config, int64_t steps, uint64_t seed,
                  const ActorCritic* initial = nullptr,
                  const std::function<void(const TrainLog&)>& on_update = nullptr);

// Returns of a policy on fresh episodes.
struct EvalResult {
  double mean_return = 0;
  double mean_length = 0;
  std::vector<double> returns;
};

// Runs `episodes` episodes of `env` with the policy's greedy action, or with sampled actions when
// `greedy` is false; episode i starts from env.Reset(the i-th draw of Rng(seed)) either way. An
// episode still running after `max_steps` steps counts as it stands.
EvalResult Evaluate(EpisodeEnv& env, const ActorCritic& model, int episodes, uint64_t seed,
                    bool greedy = true, int max_steps = 100000);

}  // namespace dr_kernel::rl

#endif  // DR_KERNEL_RL_TRAIN_H_
