// Offline pre-training of the tuning agent: behaviour cloning on expert tuning histories, then PPO
// in simulated tuning episodes.
#ifndef DR_KERNEL_AGENT_PRETRAIN_H_
#define DR_KERNEL_AGENT_PRETRAIN_H_

#include <functional>
#include <memory>
#include <vector>

#include "dr_kernel/agent/tuning_env.h"
#include "dr_kernel/rl/ppo.h"
#include "dr_kernel/rl/train.h"

namespace dr_kernel::agent {

struct PretrainOptions {
  int bc_episodes = 1500;   // Expert episodes recorded for behaviour cloning; 0 skips cloning.
  double bc_noise = 0.25;   // Share of random actions while recording, so that the demonstrations
                            // also show how to recover from states the expert never visits.
  // Simulated PPO steps after cloning; 0 skips PPO. Under leave-one-family-out 200,000 steps
  // did better than 10^6 (geomean 5.5-7.7 over 5 training seeds against 7.8): more steps fit the
  // training families, not the user's (benchmarks/agent.md).
  int64_t ppo_steps = 200000;
  rl::PpoConfig ppo = DefaultPpo();
  rl::BcConfig bc;
  EpisodeOptions episodes;
  uint64_t seed = 0;

  static rl::PpoConfig DefaultPpo();
};

struct PretrainReport {
  rl::BcStats bc;
  int64_t demonstrations = 0;
  std::vector<rl::TrainLog> ppo;
  double bc_seconds = 0, ppo_seconds = 0;
};

// Trains a policy on the tasks. Deterministic in options.seed on one machine, whatever its cores;
// not across CPUs, whose C libraries compute exp and log by different code paths.
rl::ActorCritic Pretrain(std::shared_ptr<const std::vector<Task>> tasks, const PretrainOptions& options,
                         PretrainReport* report = nullptr,
                         const std::function<void(const rl::TrainLog&)>& on_update = nullptr);

// Greedy episodes of a policy on one task: measurements until the best-so-far was within `within`
// x the oracle, one per episode (budget + 1 when never), seeds seed, seed + 1, ...
std::vector<int64_t> EvalsToWithin(const rl::ActorCritic& policy, const Task& task, int episodes, int budget,
                                   double within, uint64_t seed);

}  // namespace dr_kernel::agent

#endif  // DR_KERNEL_AGENT_PRETRAIN_H_
