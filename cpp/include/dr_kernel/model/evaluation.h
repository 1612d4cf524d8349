// How well the cost model ranks the configurations of a problem it was not trained on: rank
// correlation, top-k recall, and the "cost-model-only baseline" (measure configs in predicted
// order until one is within a factor of the oracle).
#ifndef DR_KERNEL_MODEL_EVALUATION_H_
#define DR_KERNEL_MODEL_EVALUATION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "dr_kernel/model/cost_model.h"
#include "dr_kernel/table.h"

namespace dr_kernel {

// Spearman's rank correlation of paired values (tied values share their average rank); NaN when
// there are fewer than two pairs or one side is constant.
double SpearmanCorrelation(const std::vector<double>& a, const std::vector<double>& b);

// Figures of one problem's recorded configs against a model's predictions.
struct RankingFigures {
  std::string problem;    // The problem's label.
  size_t configs = 0;     // Recorded configs (any status).
  size_t ok_configs = 0;  // Of which ok.
  // Spearman correlation of predicted and measured log time over the ok configs.
  double spearman = kNaN;
  // Fraction of the 10 fastest ok configs among the first 50 of the predicted order.
  double top10_in_top50 = kNaN;
  // Measured time of the first config of the predicted order over the oracle (+inf if it failed).
  double top1_over_oracle = kInf;
  // Configs measured in predicted order until one is within `within` x oracle (configs + 1: never).
  int64_t evals_to_within = 0;
  // The same for measuring in random order: expected value, (n + 1) / (good + 1).
  double random_evals_to_within = 0;
  // Calibration over the ok configs: root-mean-square error of the predicted log ms, and the mean
  // predicted standard deviation (bagging's spread; well calibrated when the two are close).
  double rmse_log_ms = kNaN;
  double centred_rmse_log_ms = kNaN;  // The same after removing the mean error (a problem-wide bias).
  double mean_std_log_ms = kNaN;
  // Failure prediction: recorded failures with p_fail >= 0.5, and ok configs with p_fail >= 0.5.
  size_t failures = 0, failures_caught = 0, false_alarms = 0;
};

// The order in which a "measure the top predicted" baseline would measure the table's configs:
// configs predicted to work (p_fail < 0.5) fastest first, then the rest fastest first. When the
// model uses static features it is given each row's recorded ones, as a compile step would.
std::vector<size_t> PredictedOrder(const CostModel& model, const ProblemTable& table);

// Figures of one table against a fitted model; `within` is the "near the oracle" factor.
RankingFigures EvaluateRanking(const CostModel& model, const ProblemTable& table, double within = 1.05);

// The cost-model baseline tuning online: measure the `batch` configs predicted best that are not
// measured yet, add their measurements to the model with `weight`, refit, and repeat.
struct OnlineSettings {
  int batch = 8;
  double weight = 10.0;  // Rows of the problem being tuned count this many times.
  int64_t budget = 200;  // Evaluations at most.
  double within = 1.05;
};

// What the online baseline achieved on one problem.
struct OnlineFigures {
  int64_t evals_to_within = 0;     // budget + 1 when never within.
  double best_over_oracle = kInf;  // At the end.
  int refits = 0;
  double mean_refit_s = 0;  // Wall seconds per Update.
};

// Runs the online baseline on `table` starting from `model` (fitted; updated in place).
OnlineFigures TuneOnline(CostModel& model, const ProblemTable& table, const OnlineSettings& settings);

// One held-out problem of a leave-one-problem-out evaluation.
struct LeaveOneOutResult {
  RankingFigures figures;
  size_t train_rows = 0;  // Rows of the other problems the model was fitted on.
  double fit_s = 0;       // Wall seconds of the fit.
  OnlineFigures online;   // When asked for.
};

// For each table whose family is in `families` (all when empty): fits a model with `options` on
// every other table and evaluates it on the held-out one.
std::vector<LeaveOneOutResult> LeaveOneProblemOut(const std::vector<ProblemTable>& tables,
                                                  const CostModelOptions& options,
                                                  const std::vector<std::string>& families = {},
                                                  double within = 1.05,
                                                  const OnlineSettings* online = nullptr);

}  // namespace dr_kernel

#endif  // DR_KERNEL_MODEL_EVALUATION_H_
