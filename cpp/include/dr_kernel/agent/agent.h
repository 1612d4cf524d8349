// The tuning agent as the ppo strategy uses it: a policy and the cost model its prior comes from,
// how to train both from recorded tables, and how they are saved.
#ifndef DR_KERNEL_AGENT_AGENT_H_
#define DR_KERNEL_AGENT_AGENT_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dr_kernel/agent/pretrain.h"
#include "dr_kernel/model/cost_model.h"

namespace dr_kernel::agent {

struct Agent {
  rl::ActorCritic policy;
  std::shared_ptr<const CostModel> model;  // Null: an uninformed prior (every config alike).
};

// The agent the ppo strategy uses unless a session sets its own; null until set.
void SetDefaultAgent(std::shared_ptr<const Agent> agent);
std::shared_ptr<const Agent> DefaultAgent();

// Prior::trust of a model's prior on a family it was trained on; on one it has never seen but
// whose launches the feature table can estimate (waves, traffic, an analytic time); and on a kernel
// it knows nothing of (generic features only: parameter values by name or position). Not 0 for the
// last: on the six families the feature table does not know, the generic model's order was often
// right (measuring in it reached 1.05x within 1 to 11 evaluations on 9 of 14 problems), and the
// session's rank correlation lowers trust within a few measurements where it is not.
inline constexpr double kSeenFamilyTrust = 0.8;
inline constexpr double kUnseenFamilyTrust = 0.6;
inline constexpr double kUnknownKernelTrust = 0.3;

// The prior of every config of `space` for `problem`: the model's predictions, or, without a
// model, the same time for every config with a wide uncertainty (trust 0). Ranked.
Prior PriorFromModel(const CostModel* model, const Problem& problem, const Space& space);
// Problem features for the observation from the model's analytic estimate (zeros when unknown).
std::vector<double> ProblemFeaturesFor(const CostModel* model, const Problem& problem, const Space& space);

struct TrainOptions {
  CostModelOptions model;
  PretrainOptions pretrain;
  int synthetic_tasks = 24;   // Simulated problems between the recorded ones.
  double synthetic_prior_noise = 0.25;  // Log-time error of the agent's prior on them.
  bool use_model = true;      // False: train and tune with an uninformed prior (ablation).
  // Also practise every recorded problem with the priors of a model that has not seen its family,
  // with and without the feature table's knowledge of the kernel (when the tables hold more than
  // one family). Off: under leave-one-family-out with 10^6 PPO steps it made the held-out figures
  // worse (geomean 11.0 against 9.3 without; benchmarks/agent.md) and unknown kernels no better.
  bool family_tasks = false;
  uint64_t seed = 0;
};

struct TrainReport {
  PretrainReport pretrain;
  int table_tasks = 0, synthetic_tasks = 0;
  double model_seconds = 0;
};

// Trains the cost model on every table and the policy on tasks made from them: each recorded
// problem with the prior a model fitted on the *other* problems gives (so that the policy learns
// to act on a prior as wrong as it will be on new problems), plus synthetic problems drawn from the
// model. Deterministic in options.seed.
Agent TrainAgent(const std::vector<ProblemTable>& tables, const TrainOptions& options, TrainReport* report = nullptr,
                 const std::function<void(const rl::TrainLog&)>& on_update = nullptr);

// Saves to / loads from two files; throws ModelError or rl::ModelFormatError naming the file.
void SaveAgent(const Agent& agent, const std::string& policy_path, const std::string& model_path);
Agent LoadAgent(const std::string& policy_path, const std::string& model_path);

}  // namespace dr_kernel::agent

#endif  // DR_KERNEL_AGENT_AGENT_H_
