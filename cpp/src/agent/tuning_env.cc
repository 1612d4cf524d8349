#include "dr_kernel/agent/tuning_env.h"

#include <cmath>

#include "dr_kernel/env.h"

namespace dr_kernel::agent {

Space TableSpace(const ProblemTable& table) { return ReplayEnv(table).space(); }

Task Task::FromTable(const ProblemTable& table, Prior prior, std::vector<double> problem_features) {
  Task task;
  task.label = table.problem.Label();
  auto space = std::make_shared<Space>(TableSpace(table));
  task.truth.assign(space->product_size(), Measurement{});
  for (const auto& row : table.rows) {
    const auto config = space->Find(row.config);
    task.truth[space->Index(*config)] = row.measurement;
  }
  if (prior.log_ms.size() != space->product_size())
    throw std::invalid_argument("the prior of " + task.label + " covers " + std::to_string(prior.log_ms.size()) +
                                " configs; the table's space has " + std::to_string(space->product_size()));
  if (prior.order.empty()) prior.Rank(*space);
  task.space = space;
  task.prior = std::make_shared<Prior>(std::move(prior));
  task.problem_features = std::move(problem_features);
  task.oracle_ms = table.oracle_ms();
  return task;
}

TuningEpisodeEnv::TuningEpisodeEnv(std::shared_ptr<const std::vector<Task>> tasks, EpisodeOptions options)
    : tasks_(std::move(tasks)), options_(options) {
  if (!tasks_ || tasks_->empty()) throw std::invalid_argument("TuningEpisodeEnv needs at least one task");
}

std::vector<double> TuningEpisodeEnv::Reset(uint64_t seed) {
  Rng rng(seed);
  task_ = &(*tasks_)[rng.Below(tasks_->size())];
  budget_ = options_.min_budget + static_cast<int64_t>(rng.Below(options_.max_budget - options_.min_budget + 1));
  walk_ = std::make_unique<Walk>(*task_->space, *task_->prior, task_->problem_features, budget_, options_.rewards,
                                       rng.Next());
  walk_->SetAlikeWidth(options_.alike_width);
  steps_ = 0;
  best_ms_ = kInf;
  best_after_eval_.clear();
  return walk_->Observation();
}

rl::EpisodeStep TuningEpisodeEnv::Step(int action) {
  rl::EpisodeStep out;
  const auto move = walk_->Resolve(action);
  if (!move) throw std::invalid_argument("TuningEpisodeEnv::Step: action " + std::to_string(action) + " is masked");
  ++steps_;
  StepReward reward;
  if (move->measure) {
    const Measurement& m = task_->truth[task_->space->Index(move->config)];
    reward = walk_->TakeMeasured(*move, m);
    if (m.ok()) best_ms_ = std::min(best_ms_, m.ms);
    best_after_eval_.push_back(best_ms_);
  } else {
    reward = walk_->TakeFree(*move);
  }
  out.reward = reward.reward;
  out.credit_back = std::move(reward.credit_back);
  const auto mask = walk_->Mask();
  bool any = false;
  for (uint8_t m : mask) any = any || m;
  // The episode ends with its budget, when nothing is left to measure, or (a safety net against
  // walking in circles) after four steps per planned measurement.
  out.done = walk_->evals() >= budget_ || !any || steps_ >= 4 * budget_;
  out.truncated = out.done && steps_ >= 4 * budget_ && walk_->evals() < budget_ && any;
  out.obs = walk_->Observation();
  return out;
}

std::unique_ptr<rl::EpisodeEnv> TuningEpisodeEnv::Clone() const {
  return std::make_unique<TuningEpisodeEnv>(tasks_, options_);
}

int TuningEpisodeEnv::ExpertAction() const {
  const Walk& s = *walk_;
  if (!s.has_position()) return kJump;
  int best_action = -1;
  double best_log = s.best_log_ms();
  for (int a = 0; a < kJump; ++a) {
    const auto move = s.Resolve(a);
    if (!move || !move->measure) continue;
    const Measurement& m = task_->truth[task_->space->Index(move->config)];
    if (m.ok() && std::log(m.ms) < best_log) {
      best_log = std::log(m.ms);
      best_action = a;
    }
  }
  if (best_action >= 0) return best_action;
  if (s.JumpTarget()) return kJump;
  // Nothing left to measure: any allowed move.
  const auto mask = s.Mask();
  for (int a = 0; a < kNumActions; ++a)
    if (mask[a]) return a;
  return kJump;
}

int64_t TuningEpisodeEnv::evals_to_within(double within) const {
  for (size_t i = 0; i < best_after_eval_.size(); ++i)
    if (best_after_eval_[i] <= within * task_->oracle_ms) return static_cast<int64_t>(i) + 1;
  return 0;
}

}  // namespace dr_kernel::agent
