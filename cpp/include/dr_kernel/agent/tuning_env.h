// Simulated tuning episodes for training the agent: each episode tunes one task (a problem whose
// true times are known: a recorded table, or a landscape drawn from the cost model) from the prior
// the agent would have had, for a random budget of measurements.
#ifndef DR_KERNEL_AGENT_TUNING_ENV_H_
#define DR_KERNEL_AGENT_TUNING_ENV_H_

#include <memory>
#include <string>
#include <vector>

#include "dr_kernel/agent/walk.h"
#include "dr_kernel/rl/episode_env.h"
#include "dr_kernel/table.h"

namespace dr_kernel::agent {

// One problem to practise on: its space, the agent's prior, and the truth by Space::Index.
struct Task {
  std::string label;
  std::shared_ptr<const Space> space;
  std::shared_ptr<const Prior> prior;
  std::vector<double> problem_features;
  std::vector<Measurement> truth;  // Indexed by Space::Index; kInvalid where nothing is known.
  double oracle_ms = kInf;

  // The task of a recorded table, with the given prior (which must cover the table's space: the
  // product of the table's values, as ReplayEnv builds it).
  static Task FromTable(const ProblemTable& table, Prior prior, std::vector<double> problem_features);
};

// The space ReplayEnv replays a table in (shared so that tasks and priors agree on indices).
Space TableSpace(const ProblemTable& table);

struct EpisodeOptions {
  int min_budget = 20;   // Measurements per episode, drawn uniformly from [min, max].
  int max_budget = 60;
  RewardConfig rewards;
  // Walk::SetAlikeWidth of the practice walks (0: off). A session's walk corrects its beliefs with
  // it (the ppo option `alike`); practising with the same width shows the policy the beliefs it
  // will act on.
  double alike_width = 0;
};

class TuningEpisodeEnv : public rl::EpisodeEnv {
 public:
  TuningEpisodeEnv(std::shared_ptr<const std::vector<Task>> tasks, EpisodeOptions options = {});

  int observation_size() const override { return kObservationSize; }
  int num_actions() const override { return kNumActions; }
  std::vector<double> Reset(uint64_t seed) override;
  std::vector<uint8_t> Mask() const override { return walk_->Mask(); }
  rl::EpisodeStep Step(int action) override;
  std::unique_ptr<rl::EpisodeEnv> Clone() const override;

  // What a tuner that knew the truth would do: measure the neighbour that improves most on the
  // best so far, or jump to the most promising unmeasured config when no neighbour improves.
  int ExpertAction() const;

  const Task& task() const { return *task_; }
  const Walk& walk() const { return *walk_; }
  // Measurements so far at which the best-so-far first came within `within` x the oracle (0: not yet).
  int64_t evals_to_within(double within) const;

 private:
  std::shared_ptr<const std::vector<Task>> tasks_;
  EpisodeOptions options_;
  const Task* task_ = nullptr;
  std::unique_ptr<Walk> walk_;
  int64_t budget_ = 0;
  int64_t steps_ = 0;
  double best_ms_ = kInf;
  std::vector<double> best_after_eval_;  // Best-so-far ms after each measurement.
};

}  // namespace dr_kernel::agent

#endif  // DR_KERNEL_AGENT_TUNING_ENV_H_
