#include "dr_kernel/model/evaluation.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

namespace dr_kernel {

namespace {

std::vector<double> Ranks(const std::vector<double>& v) {
  std::vector<size_t> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
  std::vector<double> ranks(v.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && v[order[j + 1]] == v[order[i]]) ++j;
    const double average = 0.5 * static_cast<double>(i + j);
    for (size_t k = i; k <= j; ++k) ranks[order[k]] = average;
    i = j + 1;
  }
  return ranks;
}

}  // namespace

double SpearmanCorrelation(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size() || a.size() < 2) return kNaN;
  const std::vector<double> ra = Ranks(a), rb = Ranks(b);
  const double n = static_cast<double>(a.size());
  const double mean = (n - 1) / 2;
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    sab += (ra[i] - mean) * (rb[i] - mean);
    saa += (ra[i] - mean) * (ra[i] - mean);
    sbb += (rb[i] - mean) * (rb[i] - mean);
  }
  if (saa == 0 || sbb == 0) return kNaN;
  return sab / std::sqrt(saa * sbb);
}

namespace {

std::vector<CostPrediction> PredictTable(const CostModel& model, const ProblemTable& table) {
  std::vector<CostPrediction> out;
  out.reserve(table.rows.size());
  for (const auto& row : table.rows) {
    const StaticFeatures st = StaticFeatures::From(row.measurement);
    out.push_back(model.Predict(table.problem, row.config, &st));
  }
  return out;
}

std::vector<size_t> OrderOf(const std::vector<CostPrediction>& predictions) {
  std::vector<size_t> order(predictions.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const bool fa = predictions[a].p_fail >= 0.5, fb = predictions[b].p_fail >= 0.5;
    if (fa != fb) return fb;
    return predictions[a].log_ms < predictions[b].log_ms;
  });
  return order;
}

}  // namespace

std::vector<size_t> PredictedOrder(const CostModel& model, const ProblemTable& table) {
  return OrderOf(PredictTable(model, table));
}

RankingFigures EvaluateRanking(const CostModel& model, const ProblemTable& table, double within) {
  RankingFigures f;
  f.problem = table.problem.Label();
  f.configs = table.rows.size();
  const std::vector<CostPrediction> predictions = PredictTable(model, table);
  const std::vector<size_t> order = OrderOf(predictions);
  const double oracle = table.oracle_ms();

  std::vector<double> predicted, measured;
  std::vector<size_t> ok;
  size_t good = 0;
  for (size_t i = 0; i < table.rows.size(); ++i) {
    const Measurement& m = table.rows[i].measurement;
    const bool fails = predictions[i].p_fail >= 0.5;
    if (m.ok()) {
      ok.push_back(i);
      predicted.push_back(predictions[i].log_ms);
      measured.push_back(std::log(m.ms));
      if (m.ms <= within * oracle) ++good;
      if (fails) ++f.false_alarms;
    } else if (m.status != Status::kInvalid) {
      ++f.failures;
      if (fails) ++f.failures_caught;
    }
  }
  f.ok_configs = ok.size();
  if (ok.empty()) return f;
  double se = 0, sd = 0, bias = 0;
  for (size_t j = 0; j < ok.size(); ++j) {
    se += (predicted[j] - measured[j]) * (predicted[j] - measured[j]);
    sd += predictions[ok[j]].log_ms_std;
    bias += (predicted[j] - measured[j]) / ok.size();
  }
  f.rmse_log_ms = std::sqrt(se / ok.size());
  f.centred_rmse_log_ms = std::sqrt(std::max(0.0, se / ok.size() - bias * bias));
  f.mean_std_log_ms = sd / ok.size();
  f.spearman = SpearmanCorrelation(predicted, measured);

  // The true top 10 among the ok configs.
  std::vector<size_t> by_time = ok;
  std::stable_sort(by_time.begin(), by_time.end(), [&](size_t a, size_t b) {
    return table.rows[a].measurement.ms < table.rows[b].measurement.ms;
  });
  const size_t top = std::min<size_t>(10, by_time.size());
  const size_t head = std::min<size_t>(50, order.size());
  size_t hits = 0;
  for (size_t i = 0; i < top; ++i)
    if (std::find(order.begin(), order.begin() + head, by_time[i]) != order.begin() + head) ++hits;
  f.top10_in_top50 = static_cast<double>(hits) / top;

  f.top1_over_oracle = table.rows[order.front()].measurement.objective() / oracle;
  f.evals_to_within = static_cast<int64_t>(order.size()) + 1;
  for (size_t i = 0; i < order.size(); ++i)
    if (table.rows[order[i]].measurement.objective() <= within * oracle) {
      f.evals_to_within = static_cast<int64_t>(i) + 1;
      break;
    }
  f.random_evals_to_within = static_cast<double>(f.configs + 1) / static_cast<double>(good + 1);
  return f;
}

OnlineFigures TuneOnline(CostModel& model, const ProblemTable& table, const OnlineSettings& settings) {
  OnlineFigures f;
  const double oracle = table.oracle_ms();
  std::vector<char> measured(table.rows.size(), 0);
  int64_t evals = 0;
  double best = kInf, refit_s = 0;
  f.evals_to_within = settings.budget + 1;
  while (evals < settings.budget) {
    const std::vector<size_t> order = PredictedOrder(model, table);
    std::vector<std::pair<NamedValues, Measurement>> batch;
    for (size_t i : order) {
      if (measured[i]) continue;
      if (static_cast<int>(batch.size()) == settings.batch || evals == settings.budget) break;
      measured[i] = 1;
      ++evals;
      const Measurement& m = table.rows[i].measurement;
      batch.emplace_back(table.rows[i].config, m);
      best = std::min(best, m.objective());
      if (best <= settings.within * oracle && f.evals_to_within > settings.budget) f.evals_to_within = evals;
    }
    if (batch.empty() || f.evals_to_within <= settings.budget) break;
    const auto start = std::chrono::steady_clock::now();
    model.Update(table.problem, batch, settings.weight);
    refit_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++f.refits;
  }
  f.best_over_oracle = best / oracle;
  f.mean_refit_s = f.refits ? refit_s / f.refits : 0;
  return f;
}

std::vector<LeaveOneOutResult> LeaveOneProblemOut(const std::vector<ProblemTable>& tables,
                                                  const CostModelOptions& options,
                                                  const std::vector<std::string>& families, double within,
                                                  const OnlineSettings* online) {
  std::vector<LeaveOneOutResult> out;
  for (size_t held = 0; held < tables.size(); ++held) {
    const std::string& family = tables[held].problem.family;
    if (!families.empty() && std::find(families.begin(), families.end(), family) == families.end()) continue;
    CostModel model(options);
    for (size_t i = 0; i < tables.size(); ++i)
      if (i != held) model.Add(tables[i]);
    const auto start = std::chrono::steady_clock::now();
    model.Fit();
    const auto stop = std::chrono::steady_clock::now();
    LeaveOneOutResult r;
    r.train_rows = model.num_rows();
    r.fit_s = std::chrono::duration<double>(stop - start).count();
    r.figures = EvaluateRanking(model, tables[held], within);
    if (online) r.online = TuneOnline(model, tables[held], *online);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace dr_kernel
