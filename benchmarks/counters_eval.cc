// The cost model's ranking of held-out problems with and without hardware counters (issue 12;
// benchmarks/cost_model.md, "Hardware counters"). Every bundled H200 table; its probe configs'
// Nsight Compute counters are stored with their measurements (benchmarks/ncu_probes.py, then
// benchmarks/attach_counters.py). For each held-out problem (leave one problem out) or family
// (leave one family out): fit on the rest, rank every recorded config of the held-out problem,
// compare with what the GPU measured. Variants: no counters; the middle probe's counters (the
// one a session would profile); the first and third quartiles' probes instead (robustness).
//
//   counters_eval [--data DIR] [--holdout problem|family|both] [--seeds N] [--probes 0.5,0.25,0.75]
//                 [--rows 0|1]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
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
using dr_kernel::RankingFigures;

struct Variant {
  std::string name;
  bool counters;
  double probe;
};

// Figures of every table held out (alone, or with its whole family), averaged over seeds.
struct Summary {
  std::vector<RankingFigures> per_problem;  // Seed 0's, for the per-problem rows.
  double spearman = 0, top10 = 0, within = 0, log_evals = 0;
  int n = 0;
};

Summary Evaluate(const std::vector<ProblemTable>& tables, const Variant& v, bool by_family, int seeds) {
  Summary s;
  for (int seed = 0; seed < seeds; ++seed) {
    for (size_t held = 0; held < tables.size(); ++held) {
      CostModelOptions options;
      options.use_counters = v.counters;
      options.counter_probe = v.probe;
      options.seed = static_cast<uint64_t>(seed);
      CostModel model(options);
      const ProblemTable& t = tables[held];
      for (size_t i = 0; i < tables.size(); ++i) {
        const bool out = by_family ? tables[i].problem.family == t.problem.family : i == held;
        if (!out) model.Add(tables[i]);
      }
      model.Fit();
      model.SetProblemCounters(t);  // What a session learns from profiling its probe first.
      const RankingFigures f = dr_kernel::EvaluateRanking(model, t, 1.05);
      if (seed == 0) s.per_problem.push_back(f);
      s.spearman += std::isnan(f.spearman) ? 0 : f.spearman;
      s.top10 += std::isnan(f.top10_in_top50) ? 0 : f.top10_in_top50;
      s.within += f.top1_over_oracle <= 1.05 ? 1 : 0;
      s.log_evals += std::log(static_cast<double>(f.evals_to_within));
      ++s.n;
    }
  }
  s.spearman /= s.n;
  s.top10 /= s.n;
  s.within /= seeds;
  s.log_evals /= s.n;
  return s;
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
  const std::string holdout = get("--holdout", "both");
  const int seeds = std::stoi(get("--seeds", "3"));
  const bool rows = get("--rows", "1") == "1";
  std::vector<Variant> variants = {{"without counters", false, 0.5}};
  {
    std::stringstream probes(get("--probes", "0.5,0.25,0.75"));
    for (std::string p; std::getline(probes, p, ',');)
      variants.push_back({"probe " + p, true, std::stod(p)});
  }

  const std::vector<std::string> paths = AllTableFiles(dir);
  std::vector<ProblemTable> tables;
  try {
    tables = dr_kernel::ReadTables(paths);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  size_t with_counters = 0;
  for (const auto& t : tables) with_counters += dr_kernel::ProbeCounters(t, 0.5) != nullptr;
  std::printf("%zu problems from %zu tables in %s, %zu with the middle probe's counters; %d seeds.\n",
              tables.size(), paths.size(), dir.c_str(), with_counters, seeds);

  for (const bool by_family : {false, true}) {
    if (holdout != "both" && (holdout == "family") != by_family) continue;
    std::printf("\n### Leave one %s out\n\n", by_family ? "family" : "problem");
    std::vector<Summary> results;
    for (const auto& v : variants) results.push_back(Evaluate(tables, v, by_family, seeds));
    std::printf("| variant | mean Spearman | top-10 in top-50 | predicted best within 1.05x | evals to 1.05x: geomean |\n");
    std::printf("|---|---:|---:|---:|---:|\n");
    for (size_t i = 0; i < variants.size(); ++i)
      std::printf("| %s | %.3f | %.2f | %.1f of %zu | %.2f |\n", variants[i].name.c_str(), results[i].spearman,
                  results[i].top10, results[i].within, tables.size(), std::exp(results[i].log_evals));
    if (!rows) continue;
    std::printf("\nPer problem (seed 0), Spearman and evals to 1.05x, without | with the middle probe:\n\n");
    std::printf("| held-out problem | Spearman without | with | evals without | with |\n|---|---:|---:|---:|---:|\n");
    for (size_t p = 0; p < tables.size(); ++p) {
      const auto& a = results[0].per_problem[p];
      const auto& b = results[1].per_problem[p];
      std::printf("| %s | %.3f | %.3f | %lld | %lld |\n", a.problem.c_str(), a.spearman, b.spearman,
                  static_cast<long long>(a.evals_to_within), static_cast<long long>(b.evals_to_within));
    }
  }
  return 0;
}
