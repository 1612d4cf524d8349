// Cost of one replay evaluation, amortised over whole tuning sessions.
#include <benchmark/benchmark.h>

#include <stdexcept>

#include "dr_kernel/replay.h"
#include "dr_kernel/strategy.h"
#include "first_tables.h"

namespace dr_kernel {
namespace {

// The four matmul tables: two first recorded, two recorded again.
const std::vector<ProblemTable>& Tables() {
  const std::string dir = DR_KERNEL_DATA_DIR;
  static const auto tables = ReadTables(FirstMatmulFiles(dir));
  return tables;
}

// The 4096^3 matmul table.
const ProblemTable& Matmul4096() {
  for (const auto& t : Tables())
    if (t.problem.Label() == "matmul M=4096 N=4096 K=4096") return t;
  throw std::runtime_error("matmul.jsonl has no 4096^3 problem");
}

// One session of `budget` random evaluations on the 4096^3 matmul table (1,440 configs): the
// evaluator's bookkeeping, the environment's lookup and the sampler, per evaluation.
void BM_RandomSessionPerEvaluation(benchmark::State& state) {
  const int64_t budget = state.range(0);
  ReplayEnv env(Matmul4096());
  uint64_t seed = 0;
  for (auto _ : state) {
    Evaluator evaluator(env, Budget{budget});
    RunStrategy("random", evaluator, seed++);
    benchmark::DoNotOptimize(evaluator.best_ms());
  }
  state.SetItemsProcessed(state.iterations() * budget);
}
BENCHMARK(BM_RandomSessionPerEvaluation)->Arg(100)->Arg(300);

// The environment alone: one recorded lookup plus its simulated cost.
void BM_ReplayStep(benchmark::State& state) {
  ReplayEnv env(Matmul4096());
  std::vector<Config> configs;
  env.space().ForEach([&](const Config& c) {
    configs.push_back(c);
    return true;
  });
  size_t i = 0;
  for (auto _ : state) {
    auto result = env.Step({configs[i++ % configs.size()]});
    benchmark::DoNotOptimize(result);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ReplayStep);

// Every strategy's whole replay (budget 300, 10 runs) over the four matmul tables.
void BM_ReplayStrategy(benchmark::State& state, const char* strategy) {
  ReplaySettings s;
  s.strategy = strategy;
  s.budget = 300;
  s.repeats = 10;
  for (auto _ : state) benchmark::DoNotOptimize(Replay(Tables(), s));
  state.SetItemsProcessed(state.iterations() * 300 * 10 * Tables().size());
}
BENCHMARK_CAPTURE(BM_ReplayStrategy, random, "random")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ReplayStrategy, anneal, "anneal")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ReplayStrategy, genetic, "genetic")->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace dr_kernel

BENCHMARK_MAIN();
