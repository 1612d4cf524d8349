// The one place that owns a tuning budget. Strategies propose; the evaluator measures through the
// environment, charges the budget, remembers every result and raises one stop signal.
#ifndef DR_KERNEL_EVALUATOR_H_
#define DR_KERNEL_EVALUATOR_H_

#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <string>
#include <unordered_map>
#include <vector>

#include "dr_kernel/env.h"

namespace dr_kernel {

// The budget of one tuning session: evaluations and (simulated or real) seconds.
struct Budget {
  int64_t max_evals = 100;
  double max_seconds = std::numeric_limits<double>::infinity();
};

// Thrown by the evaluator when the budget is spent. Every strategy obeys it the same way: by letting
// it propagate; RunStrategy catches it.
class StopTuning : public std::exception {
 public:
  const char* what() const noexcept override { return "the tuning budget is spent"; }
};

// One evaluation as it happened in the session.
struct Trial {
  Config config;
  Measurement measurement;
  double cost_s = 0;     // Tuning seconds this evaluation took.
  double elapsed_s = 0;  // Tuning seconds of the session up to and including it.
  int64_t batch = 0;     // Which call of Evaluate measured it (configs of one batch run in parallel).
  std::string why;       // Why the strategy proposed it, where it says ("climb", "jump", ...).
};

class Evaluator {
 public:
  Evaluator(Env& env, Budget budget);

  Env& env() { return env_; }
  const Space& space() const { return env_.space(); }
  const Budget& budget() const { return budget_; }

  // Measures the configs the session has not measured yet (one evaluation each) and returns every
  // config's result in order; repeated configs cost nothing. Configs that break the space's
  // constraints are not measured, cost nothing and come back invalid. Throws StopTuning when the
  // budget runs out before the whole batch was measured; what was measured stays in history().
  // `why`, when given, holds one reason per config (Trial::why).
  std::vector<Measurement> Evaluate(const std::vector<Config>& configs, const std::vector<std::string>* why = nullptr);
  Measurement Evaluate(const Config& config);

  // The result of a config measured in this session, or nullptr.
  const Measurement* Lookup(const Config& config) const;
  bool Seen(const Config& config) const { return Lookup(config) != nullptr; }

  int64_t evals() const { return static_cast<int64_t>(history_.size()); }
  int64_t evals_left() const;
  double seconds() const { return seconds_; }
  // True when no further evaluation fits the budget.
  bool exhausted() const;
  const std::vector<Trial>& history() const { return history_; }
  // The fastest ok trial, or nullptr when none is ok yet.
  const Trial* best() const { return best_ < 0 ? nullptr : &history_[best_]; }
  double best_ms() const { return best_ < 0 ? kInf : history_[best_].measurement.ms; }

  // Called after every evaluation (progress bars, the results store).
  void OnTrial(std::function<void(const Trial&)> callback) { on_trial_ = std::move(callback); }

 private:
  Env& env_;
  Budget budget_;
  std::vector<Trial> history_;
  std::unordered_map<uint64_t, size_t> seen_;  // Space::Index -> position in history_.
  double seconds_ = 0;
  int64_t best_ = -1;
  int64_t batches_ = 0;
  std::function<void(const Trial&)> on_trial_;
};

}  // namespace dr_kernel

#endif  // DR_KERNEL_EVALUATOR_H_
