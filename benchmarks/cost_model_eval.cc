// Leave-one-problem-out evaluation of the cost model over the bundled H200 tables, plus fit,
// update and prediction timings. Prints the markdown tables of benchmarks/cost_model.md.
//
//   cost_model_eval [--data DIR] [--static 0|1|both] [--members K] [--trees N] [--depth D] [--lr X]
//                   [--leaf N] [--l2 X] [--subsample X] [--colsample X] [--seed S] [--timing 0|1]
//   cost_model_eval --family-unseen 1    # every bundled table: its family seen against never seen
//   cost_model_eval --kernel-unknown 1 [--generic W]   # each family held out, ranked as a kernel never seen
//   cost_model_eval --unestimated-seen 1   # unestimated problems held out: main against generic ensemble
//   cost_model_eval --analytic-only 1 [--dot-step-latency-us X] [--memory-latency-us X]
//                                        # the analytic time's ranking of every table it models
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "dr_kernel/model/cost_model.h"
#include "dr_kernel/model/evaluation.h"
#include "dr_kernel/table.h"
#include "first_tables.h"

namespace {

using dr_kernel::CostModel;
using dr_kernel::CostModelOptions;
using dr_kernel::ProblemTable;

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// CPU seconds of this process: steadier than wall time on a shared machine.
double CpuSeconds() { return static_cast<double>(std::clock()) / CLOCKS_PER_SEC; }

std::string Fixed(double v, int digits) {
  if (std::isinf(v)) return "failed";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

void PrintLeaveOneOut(const std::vector<ProblemTable>& tables, const CostModelOptions& options,
                      const dr_kernel::OnlineSettings* online) {
  const auto results = dr_kernel::LeaveOneProblemOut(tables, options, {}, 1.05, online);
  std::printf("\n### Leave one problem out, %s static features\n\n",
              options.use_static_features ? "with" : "without");
  std::printf(
      "| held-out problem | configs (ok) | Spearman | top-10 in top-50 | predicted best / oracle | "
      "evals to 1.05x: model | random (expected) | failures caught | false alarms | RMSE log ms (centred) | "
      "mean std | "
      "fit s |%s\n",
      online ? " evals to 1.05x: online | refit s |" : "");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|%s\n", online ? "---|---|" : "");
  double spearman = 0, recall = 0, hits = 0;
  std::vector<double> evals, online_evals;
  for (const auto& r : results) {
    const auto& f = r.figures;
    std::printf(
        "| %s | %zu (%zu) | %.3f | %.1f | %s | %lld | %.0f | %zu / %zu | %zu | %.2f (%.2f) | %.2f | %.2f |",
        f.problem.c_str(), f.configs, f.ok_configs, f.spearman, f.top10_in_top50,
        Fixed(f.top1_over_oracle, 3).c_str(), static_cast<long long>(f.evals_to_within),
        f.random_evals_to_within, f.failures_caught, f.failures, f.false_alarms, f.rmse_log_ms,
        f.centred_rmse_log_ms, f.mean_std_log_ms, r.fit_s);
    if (online) {
      std::printf(" %lld | %.2f |", static_cast<long long>(r.online.evals_to_within), r.online.mean_refit_s);
      online_evals.push_back(static_cast<double>(r.online.evals_to_within));
    }
    std::printf("\n");
    spearman += f.spearman;
    recall += f.top10_in_top50;
    hits += f.top1_over_oracle <= 1.05 ? 1 : 0;
    evals.push_back(static_cast<double>(f.evals_to_within));
  }
  const double n = static_cast<double>(results.size());
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  };
  std::printf(
      "| **mean over %zu problems** | | **%.3f** | **%.2f** | %.0f of %zu within 1.05x | median %.1f | | | | "
      "|",
      results.size(), spearman / n, recall / n, hits, results.size(), median(evals));
  if (online) std::printf(" median %.1f | |", median(online_evals));
  std::printf("\n");
}

void PrintTimings(const std::vector<ProblemTable>& tables, const CostModelOptions& options) {
  CostModel model(options);
  for (const auto& t : tables) model.Add(t);
  auto start = std::chrono::steady_clock::now();
  double cpu0 = CpuSeconds();
  model.Fit();
  const double fit_s = Seconds(start, std::chrono::steady_clock::now());
  const double fit_cpu_s = CpuSeconds() - cpu0;

  // Online update: 8 new measurements (here: rows already known, re-added) then a full refit.
  const ProblemTable& t = tables.front();
  std::vector<std::pair<dr_kernel::NamedValues, dr_kernel::Measurement>> batch;
  for (size_t i = 0; i < 8 && i < t.rows.size(); ++i)
    batch.emplace_back(t.rows[i].config, t.rows[i].measurement);
  start = std::chrono::steady_clock::now();
  cpu0 = CpuSeconds();
  model.Update(t.problem, batch);
  const double update_s = Seconds(start, std::chrono::steady_clock::now());
  const double update_cpu_s = CpuSeconds() - cpu0;

  // Prediction: every config of every table, repeatedly; features included and excluded.
  std::vector<dr_kernel::ModelInput> inputs;
  for (const auto& table : tables)
    for (const auto& row : table.rows) inputs.push_back(model.Input(table.problem, row.config));
  double sink = 0;
  const int reps = 5;
  double cpu = CpuSeconds();
  for (int r = 0; r < reps; ++r)
    for (const auto& table : tables)
      for (const auto& row : table.rows) sink += model.Predict(table.problem, row.config).log_ms;
  const double full_us = (CpuSeconds() - cpu) * 1e6 / (reps * inputs.size());
  cpu = CpuSeconds();
  for (int r = 0; r < reps; ++r)
    for (const auto& in : inputs) sink += model.Predict(in).log_ms;
  const double trees_us = (CpuSeconds() - cpu) * 1e6 / (reps * inputs.size());

  const std::string threads = options.threads > 0 ? std::to_string(options.threads) : "one per core";
  std::printf("\n### Timings (all %zu rows, %d members x %d trees of depth %d, threads: %s)\n\n",
              model.num_rows(), options.ensemble_size, options.time_trees.num_trees,
              options.time_trees.max_depth, threads.c_str());
  std::printf("| what | wall | CPU (all threads) |\n|---|---|---|\n");
  std::printf("| Fit (all rows) | %.0f ms | %.0f ms |\n", fit_s * 1e3, fit_cpu_s * 1e3);
  std::printf("| Update (8 rows + refit) | %.0f ms | %.0f ms |\n", update_s * 1e3, update_cpu_s * 1e3);
  std::printf("| Predict one config (features + trees) | | %.2f us |\n", full_us);
  std::printf("| Predict one config (trees only, features kept) | | %.2f us |\n", trees_us);
  if (sink == 12345.678) std::printf("\n");
}

// The spread of the leave-one-out figures over model seeds.
void PrintSeedSpread(const std::vector<ProblemTable>& tables, CostModelOptions options, int seeds) {
  std::map<std::string, std::vector<dr_kernel::RankingFigures>> by_problem;
  std::vector<std::string> order;
  for (int s = 0; s < seeds; ++s) {
    options.seed = static_cast<uint64_t>(s);
    for (const auto& r : dr_kernel::LeaveOneProblemOut(tables, options)) {
      if (!by_problem.count(r.figures.problem)) order.push_back(r.figures.problem);
      by_problem[r.figures.problem].push_back(r.figures);
    }
  }
  std::printf("\n### Spread over %d model seeds (without static features)\n\n", seeds);
  std::printf(
      "| held-out problem | Spearman mean (min - max) | predicted best within 1.05x | "
      "evals to 1.05x (min - max) |\n|---|---|---|---|\n");
  for (const auto& name : order) {
    const auto& v = by_problem[name];
    double mean = 0, lo = 1, hi = -1;
    int within = 0;
    int64_t emin = INT64_MAX, emax = 0;
    for (const auto& f : v) {
      mean += f.spearman / v.size();
      lo = std::min(lo, f.spearman);
      hi = std::max(hi, f.spearman);
      within += f.top1_over_oracle <= 1.05;
      emin = std::min(emin, f.evals_to_within);
      emax = std::max(emax, f.evals_to_within);
    }
    std::printf("| %s | %.3f (%.3f - %.3f) | %d of %zu | %lld - %lld |\n", name.c_str(), mean, lo, hi, within,
                v.size(), static_cast<long long>(emin), static_cast<long long>(emax));
  }
}

// A model fitted on every table but the held-out one.
CostModel FitAllBut(const std::vector<ProblemTable>& tables, const CostModelOptions& options, size_t held) {
  CostModel model(options);
  for (size_t i = 0; i < tables.size(); ++i)
    if (i != held) model.Add(tables[i]);
  model.Fit();
  return model;
}

// For diagnosis: the first `show` configs of the predicted order of each held-out problem.
void PrintPredictedHeads(const std::vector<ProblemTable>& tables, const CostModelOptions& options, int show) {
  for (size_t held = 0; held < tables.size(); ++held) {
    const CostModel model = FitAllBut(tables, options, held);
    const ProblemTable& t = tables[held];
    const auto order = dr_kernel::PredictedOrder(model, t);
    std::printf("\n%s (oracle %.4f ms)\n", t.problem.Label().c_str(), t.oracle_ms());
    for (int i = 0; i < show && i < static_cast<int>(order.size()); ++i) {
      const auto& row = t.rows[order[i]];
      const auto p = model.Predict(t.problem, row.config);
      std::printf("  %-80s predicted %.4f +- %.2f  measured/oracle %s\n",
                  dr_kernel::ToJson(row.config).c_str(), p.ms(), p.log_ms_std,
                  Fixed(row.measurement.objective() / t.oracle_ms(), 3).c_str());
    }
    for (const auto& row : t.rows) {
      const auto p = model.Predict(t.problem, row.config);
      if (row.measurement.ok() == (p.p_fail < 0.5)) continue;
      std::printf("  wrong failure call: %-70s p_fail %.2f, status %s, smem estimate %.0f\n",
                  dr_kernel::ToJson(row.config).c_str(), p.p_fail,
                  dr_kernel::ToString(row.measurement.status),
                  model.features().Estimate(t.problem, row.config).smem_bytes);
    }
  }
}

// Every bundled table held out in turn: how the model fitted on every other table ranks it (its
// family seen, when the family has other tables) against the same model without the family's rows
// (CostModel::WithoutFamily: what it would predict for a family it has never seen). Where a family
// was learned from few shapes, one can mislead it on another (the ppo option second_opinion).
void PrintSeenAgainstUnseen(const std::vector<ProblemTable>& tables, const CostModelOptions& options) {
  std::printf("\n### The held-out problem's family seen (its other shapes) against never seen\n\n");
  std::printf("| held-out problem | other shapes of its family | Spearman: seen | never seen | "
              "evals to 1.05x: seen | never seen |\n|---|---:|---:|---:|---:|---:|\n");
  for (size_t held = 0; held < tables.size(); ++held) {
    const CostModel model = FitAllBut(tables, options, held);
    const ProblemTable& t = tables[held];
    const size_t shapes = model.FamilyShapes(t.problem.family);
    const auto seen = dr_kernel::EvaluateRanking(model, t);
    const auto without = model.WithoutFamily(t.problem.family);
    if (shapes == 0 || !without) continue;
    const auto unseen = dr_kernel::EvaluateRanking(*without, t);
    std::printf("| %s | %zu | %.3f | %.3f | %lld | %lld |\n", t.problem.Label().c_str(), shapes, seen.spearman,
                unseen.spearman, static_cast<long long>(seen.evals_to_within),
                static_cast<long long>(unseen.evals_to_within));
  }
}

// Every family held out in turn, its tables ranked as a kernel the feature table does not know
// (the family renamed: generic features only, as for a user's new kernel) by the model fitted on
// every other family's tables: how well the trees rank configs of a kernel they have never seen.
// Compare with `--generic W` (CostModelOptions::generic_rows) and without.
void PrintKernelUnknown(const std::vector<ProblemTable>& tables, const CostModelOptions& options) {
  std::printf("\n### Each family held out, ranked as a kernel never seen (generic rows weight %.2f)\n\n",
              options.generic_rows);
  std::printf("| held-out problem | configs (ok) | Spearman | predicted best / oracle | evals to 1.05x | random "
              "(expected) |\n|---|---:|---:|---:|---:|---:|\n");
  std::set<std::string> families;
  for (const auto& t : tables) families.insert(t.problem.family);
  double log_evals = 0, log_ratio = 0;
  int counted = 0;
  for (const auto& family : families) {
    CostModel model(options);
    model.SetDescribeByShape(false);  // Generic features only, an M x N x K GEMM too.
    for (const auto& t : tables)
      if (t.problem.family != family) model.Add(t);
    model.Fit();
    for (const auto& t : tables) {
      if (t.problem.family != family) continue;
      ProblemTable renamed = t;
      renamed.problem.family = "new kernel " + family;
      const auto r = dr_kernel::EvaluateRanking(model, renamed);
      std::printf("| %s | %zu (%zu) | %.3f | %s | %lld | %.1f |\n", t.problem.Label().c_str(), r.configs,
                  r.ok_configs, r.spearman, Fixed(r.top1_over_oracle, 3).c_str(),
                  static_cast<long long>(r.evals_to_within), r.random_evals_to_within);
      log_evals += std::log(static_cast<double>(r.evals_to_within));
      log_ratio += std::log(static_cast<double>(r.evals_to_within) / r.random_evals_to_within);
      ++counted;
    }
  }
  if (counted > 0)
    std::printf("\nGeomean evaluations to 1.05x in the predicted order %.2f (%.2f of random's expected) over %d "
                "tables.\n", std::exp(log_evals / counted), std::exp(log_ratio / counted), counted);
}

// Leave-one-problem-out on the families the feature table does not estimate (the held-out
// problem's family seen through its other shapes): the main ensemble, which predicts them now,
// against the generic one (CostModelOptions::generic_rows), over model seeds 0 and 1.
void PrintUnestimatedSeenGeneric(const std::vector<ProblemTable>& tables, CostModelOptions options) {
  std::printf("\n### Unestimated families, problem held out: main ensemble against the generic one\n\n");
  std::printf("| held-out problem | seed | evals to 1.05x: main | generic |\n|---|---:|---:|---:|\n");
  const auto known = dr_kernel::FeatureExtractor::KnownFamilies();
  double log_main = 0, log_generic = 0;
  int counted = 0;
  for (size_t held = 0; held < tables.size(); ++held) {
    const ProblemTable& t = tables[held];
    if (std::find(known.begin(), known.end(), t.problem.family) != known.end()) continue;
    for (uint64_t seed = 0; seed < 2; ++seed) {
      options.seed = seed;
      CostModel model = FitAllBut(tables, options, held);
      model.SetDescribeByShape(false);  // The renamed family gets generic features, as its rows did.
      // Renamed, the family is one the model has no row of: the same features, the generic ensemble.
      ProblemTable renamed = t;
      renamed.problem.family = "new kernel " + t.problem.family;
      const int64_t main = dr_kernel::EvaluateRanking(model, t).evals_to_within;
      const int64_t generic = dr_kernel::EvaluateRanking(model, renamed).evals_to_within;
      std::printf("| %s | %llu | %lld | %lld |\n", t.problem.Label().c_str(), static_cast<unsigned long long>(seed),
                  static_cast<long long>(main), static_cast<long long>(generic));
      log_main += std::log(static_cast<double>(main));
      log_generic += std::log(static_cast<double>(generic));
      ++counted;
    }
  }
  if (counted > 0)
    std::printf("\nGeomean evaluations to 1.05x: main %.2f, generic %.2f (%d held-out problems x seeds).\n",
                std::exp(log_main / counted), std::exp(log_generic / counted), counted);
}

// The analytic time alone (no training): how far first principles get.
void PrintAnalytic(const std::vector<ProblemTable>& tables, const dr_kernel::DeviceDescription& device = {}) {
  const dr_kernel::FeatureExtractor fx(device);
  double spearman_sum = 0, log_evals = 0;
  int counted = 0;
  std::printf("\n### Analytic time alone (FeatureExtractor::AnalyticMs, no training)\n\n");
  std::printf("| problem | Spearman | predicted best / oracle | evals to 1.05x |\n|---|---|---|---|\n");
  for (const auto& t : tables) {
    if (t.rows.empty() || !fx.Estimate(t.problem, t.rows.front().config).known) continue;  // No analytic model.
    std::vector<double> predicted, measured;
    std::vector<std::pair<double, double>> order;  // (analytic, objective)
    for (const auto& row : t.rows) {
      const auto e = fx.Estimate(t.problem, row.config);
      const dr_kernel::Value* w = dr_kernel::Find(row.config, "num_warps");
      double a = fx.AnalyticMs(e, w ? dr_kernel::ToDouble(*w) : 4.0);
      if (e.smem_bytes > fx.device().smem_per_block) a = 1e30;  // Predicted to fail.
      order.emplace_back(a, row.measurement.objective());
      if (row.measurement.ok()) {
        predicted.push_back(a);
        measured.push_back(row.measurement.ms);
      }
    }
    std::stable_sort(order.begin(), order.end(), [](auto& x, auto& y) { return x.first < y.first; });
    size_t evals = order.size() + 1;
    for (size_t i = 0; i < order.size(); ++i)
      if (order[i].second <= 1.05 * t.oracle_ms()) {
        evals = i + 1;
        break;
      }
    const double rho = dr_kernel::SpearmanCorrelation(predicted, measured);
    std::printf("| %s | %.3f | %s | %zu |\n", t.problem.Label().c_str(), rho,
                Fixed(order.front().second / t.oracle_ms(), 3).c_str(), evals);
    spearman_sum += rho;
    log_evals += std::log(static_cast<double>(evals));
    ++counted;
  }
  if (counted > 0)
    std::printf("\nMean Spearman %.3f, evaluations to 1.05x in the analytic order %.2f (geomean) over %d tables.\n",
                spearman_sum / counted, std::exp(log_evals / counted), counted);
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> args;
  for (int i = 1; i + 1 < argc; i += 2) args[argv[i]] = argv[i + 1];
  auto get = [&](const char* key, const std::string& fallback) {
    const auto it = args.find(key);
    return it == args.end() ? fallback : it->second;
  };
  const std::string dir = get("--data", DR_KERNEL_DATA_DIR);
  CostModelOptions options;
  options.ensemble_size = std::stoi(get("--members", std::to_string(options.ensemble_size)));
  options.time_trees.num_trees = std::stoi(get("--trees", std::to_string(options.time_trees.num_trees)));
  options.time_trees.max_depth = std::stoi(get("--depth", std::to_string(options.time_trees.max_depth)));
  options.time_trees.learning_rate = std::stod(get("--lr", std::to_string(options.time_trees.learning_rate)));
  options.time_trees.min_samples_leaf =
      std::stoi(get("--leaf", std::to_string(options.time_trees.min_samples_leaf)));
  options.time_trees.l2 = std::stod(get("--l2", std::to_string(options.time_trees.l2)));
  options.time_trees.subsample = std::stod(get("--subsample", std::to_string(options.time_trees.subsample)));
  options.time_trees.colsample = std::stod(get("--colsample", std::to_string(options.time_trees.colsample)));
  options.failure_trees.min_samples_leaf =
      std::stoi(get("--fail-leaf", std::to_string(options.failure_trees.min_samples_leaf)));
  options.failure_trees.max_depth =
      std::stoi(get("--fail-depth", std::to_string(options.failure_trees.max_depth)));
  options.failure_trees.num_trees =
      std::stoi(get("--fail-trees", std::to_string(options.failure_trees.num_trees)));
  options.seed = std::stoull(get("--seed", "0"));
  options.threads = std::stoi(get("--threads", "0"));
  const std::string baseline = get("--baseline", "analytic");
  options.baseline = baseline == "analytic" ? dr_kernel::TimeBaseline::kAnalytic
                     : baseline == "none"   ? dr_kernel::TimeBaseline::kNone
                                            : dr_kernel::TimeBaseline::kRoofline;
  const std::string use_static = get("--static", "both");

  // The modes over every bundled table: `print` gets them read; a table that cannot be read ends it.
  auto on_all_tables = [&](auto print) {
    try {
      print(dr_kernel::ReadTables(AllTableFiles(dir)));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 1;
    }
    return 0;
  };
  if (get("--analytic-only", "0") == "1") {
    // Every bundled table of a family with an analytic model, under device constants given here.
    dr_kernel::DeviceDescription device;
    device.dot_step_latency_us = std::stod(get("--dot-step-latency-us", std::to_string(device.dot_step_latency_us)));
    device.memory_latency_us = std::stod(get("--memory-latency-us", std::to_string(device.memory_latency_us)));
    return on_all_tables([&](const std::vector<ProblemTable>& all) { PrintAnalytic(all, device); });
  }
  options.generic_rows = std::stod(get("--generic", std::to_string(options.generic_rows)));
  if (get("--unestimated-seen", "0") == "1")
    return on_all_tables([&](const std::vector<ProblemTable>& all) { PrintUnestimatedSeenGeneric(all, options); });
  if (get("--kernel-unknown", "0") == "1")
    return on_all_tables([&](const std::vector<ProblemTable>& all) { PrintKernelUnknown(all, options); });
  if (get("--family-unseen", "0") == "1")
    return on_all_tables([&](const std::vector<ProblemTable>& all) { PrintSeenAgainstUnseen(all, options); });
  std::vector<ProblemTable> tables;
  try {
    // The first 8 problems (first_tables.h).
    auto files = FirstMatmulFiles(dir);
    files.insert(files.end(), {dir + "/attention.jsonl", dir + "/softmax.jsonl"});
    tables = dr_kernel::ReadTables(files);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  std::printf("## Cost model: leave-one-problem-out on the bundled H200 tables\n\n");
  std::printf(
      "Options: %d members, %d trees, depth %d, learning rate %.3g, min leaf %d, l2 %.3g, subsample %.2f, "
      "colsample %.2f, seed %llu, baseline %s.\n",
      options.ensemble_size, options.time_trees.num_trees, options.time_trees.max_depth,
      options.time_trees.learning_rate, options.time_trees.min_samples_leaf, options.time_trees.l2,
      options.time_trees.subsample, options.time_trees.colsample,
      static_cast<unsigned long long>(options.seed), baseline.c_str());
  if (const int show = std::stoi(get("--show", "0")); show > 0) {
    options.use_static_features = use_static == "1";
    PrintPredictedHeads(tables, options, show);
    return 0;
  }
  for (const bool with_static : {false, true}) {
    if (use_static != "both" && (use_static == "1") != with_static) continue;
    options.use_static_features = with_static;
    dr_kernel::OnlineSettings online;
    online.weight = std::stod(get("--online-weight", "10"));
    PrintLeaveOneOut(tables, options, get("--online", "1") == "1" ? &online : nullptr);
  }
  if (const int seeds = std::stoi(get("--seeds", "5")); seeds > 1) {
    options.use_static_features = false;
    PrintSeedSpread(tables, options, seeds);
  }
  PrintAnalytic(tables);
  if (get("--timing", "1") == "1") {
    options.use_static_features = false;
    PrintTimings(tables, options);
  }
  return 0;
}
