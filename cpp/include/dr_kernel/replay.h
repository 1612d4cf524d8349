// Replaying strategies over recorded tables: how many evaluations each needs to come near the
// table's best, and how close it gets after a given number.
#ifndef DR_KERNEL_REPLAY_H_
#define DR_KERNEL_REPLAY_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "dr_kernel/env.h"
#include "dr_kernel/table.h"

namespace dr_kernel {

struct ReplaySettings {
  std::string strategy = "random";
  int64_t budget = 100;
  int repeats = 10;
  double within = 1.05;  // "Near" means best-so-far <= within x oracle.
  uint64_t seed = 0;     // Run r of every problem uses seed + r.
  std::map<std::string, double> options;
  ReplayCost cost;
  bool trace = false;  // Keep every run's measurements in order (ProblemReport::traces).
};

struct Quantiles {
  double median = 0, p25 = 0, p75 = 0;
};

// One measurement of a traced run: the config, how it ended, and its time over the table's best
// (+inf when it did not run).
struct TraceStep {
  NamedValues config;
  Status status = Status::kInvalid;
  double over_best = kInf;
  std::string why;  // Why the strategy proposed it (Trial::why), empty where it does not say.
};

struct ProblemReport {
  Problem problem;
  uint64_t configs = 0;  // Recorded rows of the problem.
  double oracle_ms = kInf;
  std::vector<int64_t> evals_to_within;  // Per run; budget + 1 when never.
  Quantiles evals_quantiles;
  std::map<int64_t, double> best_over_oracle;  // Median over runs at 10, 20, 50, 100 evaluations.
  double tuning_s_to_within = kInf;            // Median simulated seconds; +inf when most runs never got there.
  // Evaluations the runs used: the budget, or fewer when the strategy stopped early (ppo's `stop`)
  // or measured the whole space; and the best found over the table's best at the end (median).
  Quantiles evaluations_used;
  double final_over_oracle = kInf;
  std::vector<double> median_curve;            // Median best-so-far / oracle after 1..budget evaluations.
  std::vector<std::vector<TraceStep>> traces;  // Per run, with ReplaySettings::trace only.
};

struct ReplayReport {
  ReplaySettings settings;
  std::vector<ProblemReport> problems;

  // The JSON object of `dr-kernel replay --json` (infinite values are written as null).
  std::string ToJson() const;
};

// Runs the strategy `repeats` times on each table. Throws StrategyError for an unknown strategy.
ReplayReport Replay(const std::vector<ProblemTable>& tables, const ReplaySettings& settings);

// Linear-interpolated quantile (q in [0, 1]) of values; +inf values sort last.
double Quantile(std::vector<double> values, double q);

}  // namespace dr_kernel

#endif  // DR_KERNEL_REPLAY_H_
