// Cost of one proposal of the PPO agent (observation, mask and a greedy policy step) and of
// building its prior for a problem.
#include <benchmark/benchmark.h>

#include "dr_kernel/agent/agent.h"
#include "dr_kernel/env.h"
#include "first_tables.h"

namespace dr_kernel {
namespace {

struct Fixture {
  std::vector<ProblemTable> tables;
  std::shared_ptr<agent::Agent> agent;
  Fixture() {
    const std::string dir = DR_KERNEL_DATA_DIR;
    auto files = FirstMatmulFiles(dir);
    files.insert(files.end(), {dir + "/softmax.jsonl", dir + "/attention.jsonl"});
    tables = ReadTables(files);
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

// A session on the 4096^3 matmul space (1,440 configs) after 30 measurements of random configs;
// `sampler` goes on with configs not measured yet. Members refer to each other: never copied.
struct MeasuredWalk {
  explicit MeasuredWalk(const Fixture& f)
      : trained(*f.agent),
        table(f.tables[3]),
        space(agent::TableSpace(table)),
        prior(agent::PriorFromModel(trained.model.get(), table.problem, space)),
        env(table),
        session(space, prior, agent::ProblemFeaturesFor(trained.model.get(), table.problem, space), 100),
        rng(1),
        sampler(space, rng) {
    session.SetAlikeWidth(agent::kDefaultAlikeWidth);  // As the ppo strategy sets them.
    session.DetectInert(agent::kInertPairs);
    session.DetectLosingSteps(agent::kLosingPairs);
    for (int i = 0; i < 30; ++i) Measure(session, *sampler.Next());
  }
  MeasuredWalk(const MeasuredWalk&) = delete;

  void Measure(agent::Walk& s, const Config& c) const {
    const Measurement* m = env.Lookup(c);
    s.TakeMeasured({c, true}, m ? *m : Measurement{});
  }

  // One proposal of the policy from `s`: observation, mask, a greedy step.
  void Propose(const agent::Walk& s) {
    const auto obs = s.Observation();
    const auto allowed = s.Mask();
    for (int i = 0; i < agent::kObservationSize; ++i) x(0, i) = obs[i];
    for (int i = 0; i < agent::kNumActions; ++i) mask(0, i) = allowed[i];
    benchmark::DoNotOptimize(trained.policy.Greedy(x, mask));
  }

  const agent::Agent& trained;
  const ProblemTable& table;
  const Space space;
  const agent::Prior prior;
  ReplayEnv env;
  agent::Walk session;
  Rng rng;
  UniqueSampler sampler;
  Eigen::MatrixXd x = Eigen::MatrixXd(1, agent::kObservationSize);
  rl::MaskMatrix mask = rl::MaskMatrix(1, agent::kNumActions);
};

// One proposal after 30 measurements.
void BM_Proposal(benchmark::State& state) {
  MeasuredWalk w(Get());
  for (auto _ : state) w.Propose(w.session);
}
BENCHMARK(BM_Proposal)->Unit(benchmark::kMicrosecond);

// As BM_Proposal, but every proposal follows a new measurement, so that the jump target (96
// candidates with corrected predictions and failure beliefs) is recomputed: a copy of the session
// after 30 measurements records a 31st, then proposes. The copy is part of the time.
void BM_ProposalAfterMeasurement(benchmark::State& state) {
  MeasuredWalk w(Get());
  const auto next = *w.sampler.Next();
  for (auto _ : state) {
    agent::Walk s = w.session;
    w.Measure(s, next);
    w.Propose(s);
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
