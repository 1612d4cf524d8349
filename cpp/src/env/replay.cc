#include "dr_kernel/replay.h"

#include <algorithm>
#include <cmath>

#include "dr_kernel/interrupt.h"
#include "dr_kernel/strategy.h"

namespace dr_kernel {

double Quantile(std::vector<double> values, double q) {
  if (values.empty()) return kNaN;
  std::sort(values.begin(), values.end());
  const double pos = q * (values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos)), hi = static_cast<size_t>(std::ceil(pos));
  if (lo == hi || values[lo] == values[hi]) return values[lo];
  if (std::isinf(values[hi])) return kInf;
  return values[lo] + (pos - lo) * (values[hi] - values[lo]);
}

ReplayReport Replay(const std::vector<ProblemTable>& tables, const ReplaySettings& settings) {
  FindStrategy(settings.strategy);  // Fail before any work on an unknown name.
  ReplayReport report{settings, {}};
  const int64_t budget = settings.budget;
  static const int64_t kCheckpoints[] = {10, 20, 50, 100};

  for (const auto& table : tables) {
    ReplayEnv env(table, settings.cost);
    ProblemReport pr;
    pr.problem = table.problem;
    pr.configs = table.rows.size();
    pr.oracle_ms = env.oracle_ms();
    const double target = settings.within * pr.oracle_ms;

    std::vector<std::vector<double>> curves;  // Per run: best-so-far / oracle after each evaluation.
    std::vector<double> seconds_to_within, used, final;
    for (int r = 0; r < settings.repeats; ++r) {
      PollInterrupt();
      env.Reset(settings.seed + r);
      Evaluator evaluator(env, Budget{budget});
      RunStrategy(settings.strategy, evaluator, settings.seed + r, settings.options);

      std::vector<double> curve;
      curve.reserve(budget);
      double best = kInf;
      int64_t reached = budget + 1;
      double reached_s = kInf;
      if (settings.trace) pr.traces.emplace_back();
      for (const auto& trial : evaluator.history()) {
        if (settings.trace)
          pr.traces.back().push_back({env.space().Named(trial.config), trial.measurement.status,
                                      trial.measurement.objective() / pr.oracle_ms, trial.why});
        best = std::min(best, trial.measurement.objective());
        curve.push_back(best / pr.oracle_ms);
        if (reached > budget && std::isfinite(best) && best <= target) {  // Nothing ran: never.
          reached = static_cast<int64_t>(curve.size());
          reached_s = trial.elapsed_s;
        }
      }
      used.push_back(static_cast<double>(curve.size()));
      final.push_back(curve.empty() ? kInf : curve.back());
      // A strategy that ended early (the whole space measured) keeps its best for the rest.
      curve.resize(budget, curve.empty() ? kInf : curve.back());
      pr.evals_to_within.push_back(reached);
      seconds_to_within.push_back(reached_s);
      curves.push_back(std::move(curve));
    }

    std::vector<double> evals(pr.evals_to_within.begin(), pr.evals_to_within.end());
    pr.evals_quantiles = {Quantile(evals, 0.5), Quantile(evals, 0.25), Quantile(evals, 0.75)};
    pr.tuning_s_to_within = Quantile(seconds_to_within, 0.5);
    pr.evaluations_used = {Quantile(used, 0.5), Quantile(used, 0.25), Quantile(used, 0.75)};
    pr.final_over_oracle = Quantile(final, 0.5);
    pr.median_curve.resize(budget);
    std::vector<double> column(curves.size());
    for (int64_t e = 0; e < budget; ++e) {
      for (size_t r = 0; r < curves.size(); ++r) column[r] = curves[r][e];
      pr.median_curve[e] = Quantile(column, 0.5);
    }
    for (int64_t k : kCheckpoints)
      if (k <= budget) pr.best_over_oracle[k] = pr.median_curve[k - 1];
    report.problems.push_back(std::move(pr));
  }
  return report;
}

namespace {

std::string Number(double v) { return std::isfinite(v) ? ToJson(Value(v)) : "null"; }

}  // namespace

std::string ReplayReport::ToJson() const {
  using dr_kernel::ToJson;
  std::string out = "{\"strategy\":" + ToJson(Value(settings.strategy)) +
                    ",\"budget\":" + std::to_string(settings.budget) + ",\"within\":" + Number(settings.within) +
                    ",\"repeats\":" + std::to_string(settings.repeats) + ",\"seed\":" + std::to_string(settings.seed) +
                    ",\"problems\":[";
  for (size_t i = 0; i < problems.size(); ++i) {
    const auto& p = problems[i];
    if (i) out += ",";
    out += "{\"family\":" + ToJson(Value(p.problem.family)) + ",\"shape\":" + ToJson(p.problem.shape) +
           ",\"configs\":" + std::to_string(p.configs) + ",\"oracle_ms\":" + Number(p.oracle_ms) +
           ",\"evals_to_within\":{\"median\":" + Number(p.evals_quantiles.median) +
           ",\"p25\":" + Number(p.evals_quantiles.p25) + ",\"p75\":" + Number(p.evals_quantiles.p75) + ",\"runs\":[";
    for (size_t r = 0; r < p.evals_to_within.size(); ++r) out += (r ? "," : "") + std::to_string(p.evals_to_within[r]);
    out += "]},\"best_over_oracle\":{";
    bool first = true;
    for (const auto& [k, v] : p.best_over_oracle) {
      out += (first ? "\"" : ",\"") + std::to_string(k) + "\":" + Number(v);
      first = false;
    }
    out += "},\"tuning_s_to_within\":" + Number(p.tuning_s_to_within) +
           ",\"evaluations_used\":{\"median\":" + Number(p.evaluations_used.median) +
           ",\"p25\":" + Number(p.evaluations_used.p25) + ",\"p75\":" + Number(p.evaluations_used.p75) +
           "},\"final_over_oracle\":" + Number(p.final_over_oracle);
    if (settings.trace) {
      out += ",\"traces\":[";
      for (size_t r = 0; r < p.traces.size(); ++r) {
        out += r ? ",[" : "[";
        for (size_t k = 0; k < p.traces[r].size(); ++k) {
          const auto& step = p.traces[r][k];
          out += (k ? ",{\"config\":" : "{\"config\":") + ToJson(step.config) + ",\"status\":" +
                 ToJson(Value(std::string(ToString(step.status)))) + ",\"over_best\":" + Number(step.over_best) +
                 ",\"why\":" + ToJson(Value(step.why)) + "}";
        }
        out += "]";
      }
      out += "]";
    }
    out += "}";
  }
  return out + "]}";
}

}  // namespace dr_kernel
