// Cost of one proposal of the PPO agent (observation, mask and a greedy policy step) and of
// building its prior for a problem.
#include <benchmark/benchmark.h>

#include "dr_kernel/agent/agent.h"
#include "dr_kernel/env.h"

namespace dr_kernel {
namespace {

struct Fixture {
  std::vector<ProblemTable> tables;
  std::shared_ptr<agent::Agent> agent;
  Fixture() {
    const std::string dir = DR_KERNEL_DATA_DIR;
    tables = ReadTables({dir + "/matmul.jsonl", dir + "/softmax.jsonl", dir + "/attention.jsonl"});
    agent::TrainOptions options;
    options.pretrain.bc_episodes = 100;
    options.pretrain.ppo_steps = 0;
    options.synthetic_tasks = 0;
    agent = std::make_shared<agent::Agent>(agent::TrainAgent(tables, options));
  }
};

const Fixture& Get() {
  static const Fixture f;
  return f;
}

// A session on the 4096^3 matmul space (1,440 configs) after 30 measurements, then one proposal.
void BM_Proposal(benchmark::State& state) {
  const auto& f = Get();
  const ProblemTable& table = f.tables[3];
  const Space space = agent::TableSpace(table);
  const agent::Prior prior = agent::PriorFromModel(f.agent->model.get(), table.problem, space);
  ReplayEnv env(table);
  agent::Session session(space, prior, agent::ProblemFeaturesFor(f.agent->model.get(), table.problem, space), 100);
  Rng rng(1);
  UniqueSampler sampler(space, rng);
  for (int i = 0; i < 30; ++i) {
    const auto c = *sampler.Next();
    const Measurement* m = env.Lookup(c);
    session.TakeMeasured({c, true}, m ? *m : Measurement{});
  }
  Eigen::MatrixXd x(1, agent::kObservationSize);
  rl::MaskMatrix mask(1, agent::kNumActions);
  for (auto _ : state) {
    const auto obs = session.Observation();
    const auto allowed = session.Mask();
    for (int i = 0; i < agent::kObservationSize; ++i) x(0, i) = obs[i];
    for (int i = 0; i < agent::kNumActions; ++i) mask(0, i) = allowed[i];
    benchmark::DoNotOptimize(f.agent->policy.Greedy(x, mask));
  }
}
BENCHMARK(BM_Proposal)->Unit(benchmark::kMicrosecond);

// As BM_Proposal, but every proposal follows a new measurement, so that the jump target (96
// candidates with corrected predictions and failure beliefs) is recomputed: a copy of the session
// after 30 measurements records a 31st, then proposes. The copy is part of the time.
void BM_ProposalAfterMeasurement(benchmark::State& state) {
  const auto& f = Get();
  const ProblemTable& table = f.tables[3];
  const Space space = agent::TableSpace(table);
  const agent::Prior prior = agent::PriorFromModel(f.agent->model.get(), table.problem, space);
  ReplayEnv env(table);
  agent::Session session(space, prior, agent::ProblemFeaturesFor(f.agent->model.get(), table.problem, space), 100);
  Rng rng(1);
  UniqueSampler sampler(space, rng);
  for (int i = 0; i < 30; ++i) {
    const auto c = *sampler.Next();
    const Measurement* m = env.Lookup(c);
    session.TakeMeasured({c, true}, m ? *m : Measurement{});
  }
  const auto next = *sampler.Next();
  const Measurement* next_m = env.Lookup(next);
  Eigen::MatrixXd x(1, agent::kObservationSize);
  rl::MaskMatrix mask(1, agent::kNumActions);
  for (auto _ : state) {
    agent::Session s = session;
    s.TakeMeasured({next, true}, next_m ? *next_m : Measurement{});
    const auto obs = s.Observation();
    const auto allowed = s.Mask();
    for (int i = 0; i < agent::kObservationSize; ++i) x(0, i) = obs[i];
    for (int i = 0; i < agent::kNumActions; ++i) mask(0, i) = allowed[i];
    benchmark::DoNotOptimize(f.agent->policy.Greedy(x, mask));
  }
}
BENCHMARK(BM_ProposalAfterMeasurement)->Unit(benchmark::kMicrosecond);

// The prior of a whole space: one cost-model prediction per config, then ranking.
void BM_Prior(benchmark::State& state) {
  const auto& f = Get();
  const ProblemTable& table = f.tables[3];
  const Space space = agent::TableSpace(table);
  for (auto _ : state) benchmark::DoNotOptimize(agent::PriorFromModel(f.agent->model.get(), table.problem, space));
}
BENCHMARK(BM_Prior)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace dr_kernel

BENCHMARK_MAIN();
