// The PPO agent: a pre-trained policy walks the space by one-step moves and jumps, starting from
// the cost model's prior and correcting it with every measurement. Several walkers propose one
// config each per round (one per measuring worker); exploration decays round by round.
#include <memory>
#include <unordered_set>

#include "dr_kernel/agent/agent.h"
#include "dr_kernel/strategy.h"

namespace dr_kernel {

namespace {

int ChooseAction(const agent::Agent& a, const agent::Session& s, double epsilon, Rng& rng) {
  const auto mask = s.Mask();
  std::vector<int> allowed;
  for (int i = 0; i < agent::kNumActions; ++i)
    if (mask[i]) allowed.push_back(i);
  if (allowed.empty()) return -1;
  if (rng.Uniform() < epsilon) return allowed[rng.Below(allowed.size())];
  const auto obs = s.Observation();
  Eigen::MatrixXd x(1, agent::kObservationSize);
  rl::MaskMatrix m(1, agent::kNumActions);
  for (int i = 0; i < agent::kObservationSize; ++i) x(0, i) = obs[i];
  for (int i = 0; i < agent::kNumActions; ++i) m(0, i) = mask[i];
  return a.policy.Greedy(x, m)[0];
}

void Run(Evaluator& evaluator, const Options& options, Rng& rng) {
  const auto trained = agent::DefaultAgent();
  if (!trained)
    throw StrategyError("the ppo strategy has no trained agent: run `dr-kernel train` (or reinstall dr_kernel, "
                        "which ships one), or choose another strategy");
  const Space& space = evaluator.space();
  const Problem& problem = evaluator.env().problem();
  auto prior = std::make_unique<agent::Prior>(agent::PriorFromModel(trained->model.get(), problem, space));
  // The session's own copy of the cost model, refitted with its measurements every `refit` of them.
  const int64_t refit = options.Int("refit");
  std::unique_ptr<CostModel> model;
  if (refit > 0 && trained->model) model = std::make_unique<CostModel>(*trained->model);
  std::vector<std::pair<NamedValues, Measurement>> unfitted;
  std::vector<std::unique_ptr<agent::Prior>> old_priors;  // Kept alive: sessions point at the current one.
  const auto features = agent::ProblemFeaturesFor(trained->model.get(), problem, space);
  const int64_t planned = std::min<int64_t>(evaluator.budget().max_evals, options.Int("horizon"));
  const int walkers = static_cast<int>(std::max<int64_t>(1, options.Int("walkers")));
  std::vector<agent::Session> sessions;
  for (int w = 0; w < walkers; ++w) sessions.emplace_back(space, *prior, features, planned);
  double epsilon = options.Get("epsilon");
  const double decay = options.Get("decay");

  for (;;) {
    std::vector<std::pair<int, agent::Move>> proposals;
    std::unordered_set<uint64_t> chosen;
    for (int w = 0; w < walkers; ++w) {
      agent::Session& s = sessions[w];
      // Free moves (onto measured configs) cost nothing; a few in a row before a measurement.
      for (int step = 0; step < 8; ++step) {
        const int action = ChooseAction(*trained, s, epsilon, rng);
        if (action < 0) break;
        const auto move = s.Resolve(action);
        if (!move->measure) {
          s.TakeFree(*move);
          continue;
        }
        if (chosen.insert(space.Index(move->config)).second) proposals.emplace_back(w, *move);
        break;
      }
      // A walker that only wandered over measured configs (or chose what another walker chose)
      // jumps, so that every round measures something while anything is left.
      const bool proposed = !proposals.empty() && proposals.back().first == w;
      if (!proposed) {
        if (auto jump = s.Resolve(agent::kJump); jump && chosen.insert(space.Index(jump->config)).second)
          proposals.emplace_back(w, *jump);
      }
    }
    if (proposals.empty()) return;  // Nothing left that the agent would measure.
    std::vector<Config> batch;
    for (const auto& p : proposals) batch.push_back(p.second.config);
    const auto results = evaluator.Evaluate(batch);
    for (size_t i = 0; i < proposals.size(); ++i) {
      const auto& [walker, move] = proposals[i];
      for (int w = 0; w < walkers; ++w) {
        if (w == walker) {
          sessions[w].TakeMeasured(move, results[i]);
        } else {
          sessions[w].Record(move.config, results[i]);
        }
      }
    }
    if (model) {
      for (size_t i = 0; i < batch.size(); ++i) unfitted.emplace_back(space.Named(batch[i]), results[i]);
      if (static_cast<int64_t>(unfitted.size()) >= refit) {
        // The tuned problem's rows weigh like many: they are the only ones that are about it.
        model->Update(problem, unfitted, options.Get("refit_weight"));
        unfitted.clear();
        old_priors.push_back(std::move(prior));
        prior = std::make_unique<agent::Prior>(agent::PriorFromModel(model.get(), problem, space));
        for (auto& s : sessions) s.Rebase(*prior);
      }
    }
    epsilon *= decay;
  }
}

}  // namespace

StrategyInfo PpoStrategy() {
  return {"ppo",
          "the pre-trained PPO agent: one-step moves and jumps guided by the cost model, corrected online",
          {{"walkers", "configs proposed per round (one per measuring worker)", 1},
           {"epsilon", "initial probability of a random allowed action", 0.0},
           {"decay", "factor on epsilon after each round", 0.9},
           {"horizon", "measurements the agent plans for when the budget is larger", 100},
           {"refit", "refit the session's cost model after this many new measurements (0: never; the GPU "
                     "tuning session sets 8)", 0},
           {"refit_weight", "weight of the tuned problem's rows in a refit", 10}},
          Run};
}

}  // namespace dr_kernel
