// The PPO agent: a pre-trained policy walks the space by one-step moves and jumps, starting from
// the cost model's prior and correcting it with every measurement. Several walkers propose one
// config each per round (one per measuring worker); exploration decays round by round.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <future>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>

#include "dr_kernel/agent/agent.h"
#include "dr_kernel/agent/pretrain.h"
#include "dr_kernel/strategy.h"

namespace dr_kernel {

namespace {

// When `after` is `before` with one parameter moved one step (with `ridge`, or two parameters: a
// step along a ridge of the constraints), the config one more such step away (nullopt otherwise,
// or out of range).
std::optional<Config> StepAgain(const Space& space, const Config& before, const Config& after, bool ridge) {
  Config again = after;
  int moved = 0;
  for (size_t p = 0; p < after.size(); ++p) {
    const int delta = after[p] - before[p];
    if (delta == 0) continue;
    if (std::abs(delta) != 1 || ++moved > (ridge ? 2 : 1)) return std::nullopt;
    auto next = space.Move(again, p, delta);
    if (!next) return std::nullopt;
    again = std::move(*next);
  }
  if (moved == 0) return std::nullopt;
  return again;
}

// Why a walk's jump target was chosen (Trial::why).
std::string JumpWhy(const agent::Walk& s) {
  switch (s.jump_kind()) {
    case agent::Walk::JumpKind::kPriorBest: return "jump: the prior's best";
    case agent::Walk::JumpKind::kRandom: return "jump: random draws";
    case agent::Walk::JumpKind::kBelieved: break;
  }
  return "jump: believed fastest";
}

// Why a policy action was measured: a move's parameter and direction, or the jump's kind.
std::string ActionWhy(const agent::Walk& s, int action) {
  if (action == agent::kJump) return JumpWhy(s);
  const size_t param = static_cast<size_t>(action / 2);
  return "move " + s.space().params()[param].name + (action % 2 ? " up" : " down");
}

// One decision of a walker, kept when the policy learns online.
struct Transition {
  Eigen::MatrixXd obs;
  rl::MaskMatrix mask;
  int action = -1;
  double log_prob = 0, value = 0, reward = 0;
};

// Chooses an allowed action: at random with probability epsilon, else the policy's most probable
// one, or (when it learns) one drawn from it, so that its updates are on-policy. With probability
// doubt x the walk's random-jump probability, (1 - trust)^2, the action is a jump instead: as the
// measurements show the prior ranking badly, the walk gives way to jumps, and the jumps to random
// search over the untried configs.
Transition ChooseAction(const rl::ActorCritic& policy, const agent::Walk& s, double epsilon, double doubt,
                        bool sample, Rng& rng) {
  Transition t;
  const auto mask = s.Mask();
  std::vector<int> allowed;
  for (int i = 0; i < agent::kNumActions; ++i)
    if (mask[i]) allowed.push_back(i);
  if (allowed.empty()) return t;
  const auto obs = s.Observation();
  t.obs.resize(1, agent::kObservationSize);
  t.mask.resize(1, agent::kNumActions);
  for (int i = 0; i < agent::kObservationSize; ++i) t.obs(0, i) = obs[i];
  for (int i = 0; i < agent::kNumActions; ++i) t.mask(0, i) = mask[i];
  if (sample) {
    const auto act = policy.Sample(t.obs, t.mask, rng);
    t.action = act.actions[0];
    t.value = act.values(0);
  } else {
    t.action = policy.Greedy(t.obs, t.mask)[0];
  }
  if (rng.Uniform() < epsilon) t.action = allowed[rng.Below(allowed.size())];
  if (doubt > 0 && mask[agent::kJump] && rng.Uniform() < doubt * s.random_jump_probability()) t.action = agent::kJump;
  if (sample) t.log_prob = policy.LogProbs(t.obs, t.mask)(0, t.action);
  return t;
}

// A PPO update of the session's copy of the policy on one walker's decisions so far.
void LearnOnline(rl::ActorCritic* policy, const std::vector<Transition>& steps, const agent::Walk& s,
                 double learning_rate, Rng& rng) {
  rl::PpoConfig config = agent::PretrainOptions::DefaultPpo();
  config.learning_rate = learning_rate;
  config.epochs = 2;
  config.minibatch_size = static_cast<int>(steps.size());
  config.num_envs = 1;
  config.num_steps = static_cast<int>(steps.size());
  config.threads = 1;  // One small minibatch: starting threads would cost more than they save.
  rl::RolloutBuffer buffer(config.num_steps, 1, agent::kObservationSize, agent::kNumActions);
  const std::vector<uint8_t> no(1, 0);
  const Eigen::VectorXd zero = Eigen::VectorXd::Zero(1);
  for (const auto& t : steps) {
    buffer.Add(t.obs, t.mask, {t.action}, Eigen::VectorXd::Constant(1, t.log_prob),
               Eigen::VectorXd::Constant(1, t.value), Eigen::VectorXd::Constant(1, t.reward), no, no, zero);
  }
  const auto obs = s.Observation();
  Eigen::MatrixXd last(1, agent::kObservationSize);
  for (int i = 0; i < agent::kObservationSize; ++i) last(0, i) = obs[i];
  buffer.ComputeAdvantages(policy->Values(last), config.gamma, config.gae_lambda);
  rl::PpoLearner(policy, config).Update(buffer, rng);
}

// Adds a step's reward to the walker's last decision and its credit to earlier ones.
void Reward(std::vector<Transition>* steps, const agent::StepReward& r) {
  if (steps->empty()) return;
  steps->back().reward += r.reward;
  for (const auto& [ago, credit] : r.credit_back) {
    const int64_t i = static_cast<int64_t>(steps->size()) - 1 - ago;
    if (i >= 0) (*steps)[i].reward += credit;
  }
}

// `model` fitted without `family`'s rows (CostModel::WithoutFamily), once per model and family in
// this process: a fit takes about half a second on two cores, and replays ask it in every session.
// Null when no other family is left.
std::shared_ptr<const CostModel> ModelWithoutFamily(const std::shared_ptr<const CostModel>& model,
                                                    const std::string& family) {
  struct Entry {
    std::weak_ptr<const CostModel> from;
    std::shared_ptr<const CostModel> without;
  };
  static std::mutex mutex;
  static std::map<std::pair<const CostModel*, std::string>, Entry> cache;
  const std::lock_guard<std::mutex> lock(mutex);
  for (auto it = cache.begin(); it != cache.end();) it = it->second.from.expired() ? cache.erase(it) : std::next(it);
  const auto key = std::make_pair(model.get(), family);
  if (const auto it = cache.find(key); it != cache.end() && it->second.from.lock() == model) return it->second.without;
  std::shared_ptr<const CostModel> without = model->WithoutFamily(family);
  cache[key] = {model, without};
  return without;
}

// How two priors rank the session's ok measurements, over the pairs whose measured times differ by
// more than the tie margin: each prior scores +1 for a pair it orders as measured, -1 for one it
// orders the other way and 0 for one it predicts alike.
struct PriorComparison {
  int pairs = 0;
  double first = 0;  // The first prior's mean score (Kendall's tau-a; 0 without pairs).
  // The pairs' score differences (second's less first's) summed, over the square root of their
  // summed squares: a paired sign test's z, on which pairs the priors order alike weigh nothing
  // (0 without a dispute).
  double second_better_z = 0;
};

PriorComparison ComparePriors(const agent::Prior& first, const agent::Prior& second, const Space& space,
                              const std::vector<Trial>& history) {
  std::vector<uint64_t> index;
  std::vector<double> measured;
  for (const Trial& t : history) {
    if (!t.measurement.ok()) continue;
    index.push_back(space.Index(t.config));
    measured.push_back(std::log(t.measurement.ms));
  }
  auto score = [](double dm, double dp) { return dp == 0 ? 0 : (dm * dp > 0 ? 1 : -1); };
  PriorComparison out;
  double first_sum = 0, sum = 0, squares = 0;
  for (size_t i = 0; i < measured.size(); ++i) {
    for (size_t j = i + 1; j < measured.size(); ++j) {
      const double dm = measured[i] - measured[j];
      if (std::abs(dm) <= agent::kTieLog) continue;
      ++out.pairs;
      const int a = score(dm, first.log_ms[index[i]] - first.log_ms[index[j]]);
      const int d = score(dm, second.log_ms[index[i]] - second.log_ms[index[j]]) - a;
      first_sum += a;
      sum += d;
      squares += d * d;
    }
  }
  if (out.pairs > 0) out.first = first_sum / out.pairs;
  if (squares > 0) out.second_better_z = sum / std::sqrt(squares);
  return out;
}

// A family the cost model learned from this many shapes or fewer may mislead it on another shape:
// leave-one-problem-out, the model ranked the held-out shape's configs worse (Spearman) than one
// that never saw the family on 6 of the 16 problems of families with one or two other shapes
// (fp8_matmul 0.05 against 0.60, layernorm 3001x5120 0.07 against 0.82, cumsum), and on 2 of the
// 18 of families with four or five (matmul 16x4096x4096 0.63 against 0.80, 64x4095x8192 0.46
// against 0.48); `cost_model_eval --family-unseen 1`, benchmarks/cost_model.md. (The shipped
// model has two shapes of fp8_matmul, cumsum, cross_entropy, grouped_matmul and rmsnorm, three of
// layernorm and layernorm_bwd.)
constexpr size_t kThinFamilyShapes = 3;

// Trust below which the session's cost model is refitted every `doubt_refit` measurements.
constexpr double kDoubtfulTrust = 0.5;

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
  // While the session's trust in the prior is low, refit after this many (sooner than `refit`).
  const int64_t doubt_refit = options.Int("doubt_refit");
  const double doubt = options.Get("doubt");
  std::unique_ptr<CostModel> model;
  if ((refit > 0 || doubt_refit > 0) && trained->model) model = std::make_unique<CostModel>(*trained->model);
  std::vector<std::pair<NamedValues, Measurement>> unfitted;
  std::vector<std::unique_ptr<agent::Prior>> old_priors;  // Kept alive: walks point at the current one.
  const auto features = agent::ProblemFeaturesFor(trained->model.get(), problem, space);
  const int64_t planned = std::min<int64_t>(evaluator.budget().max_evals, options.Int("horizon"));
  const int walkers = static_cast<int>(std::max<int64_t>(1, options.Int("walkers")));
  std::vector<agent::Walk> walks;
  // Each walker explores with its own seed drawn from the session's: runs differ with the seed.
  for (int w = 0; w < walkers; ++w) {
    walks.emplace_back(space, *prior, features, planned, agent::RewardConfig{}, rng.Next());
    walks.back().DetectInert(static_cast<int>(options.Int("inert")));
    walks.back().DetectLosingSteps(static_cast<int>(options.Int("losing")));
    walks.back().SetRandomJumpDraws(static_cast<int>(options.Int("jump_draws")));
    walks.back().SetAlikeWidth(options.Get("alike"));
  }
  // Measurements taken before the strategy started (an opening: configs of a variant the cost
  // model has no rows of) are every walk's from the start.
  for (const Trial& t : evaluator.history())
    for (auto& w : walks) w.Record(t.config, t.measurement);
  // With refit_async, a refit (the model's update and the prior it gives) runs on a thread of its
  // own while the next round is proposed, compiled and measured, and lands right after that
  // round's measurements: the walk steers one round on the older prior, and the session no longer
  // waits for the refit (about 0.25 s each on the H200's host, several per session). Where it
  // lands does not depend on timing, so a session decides the same on every run.
  const bool refit_async = options.Get("refit_async") > 0;
  struct Refitted {
    std::unique_ptr<CostModel> model;
    std::unique_ptr<agent::Prior> prior;
  };
  // The refit itself: the model updated with the session's rows, and the prior it now gives. It
  // touches nothing of the session but what it is given, so it may run on a thread of its own.
  auto refit_model = [&problem, &space](std::unique_ptr<CostModel> m, decltype(unfitted) rows, double weight) {
    m->Update(problem, rows, weight);
    auto p = std::make_unique<agent::Prior>(agent::PriorFromModel(m.get(), problem, space));
    return Refitted{std::move(m), std::move(p)};
  };
  auto install = [&](Refitted done) {
    model = std::move(done.model);
    old_priors.push_back(std::move(prior));
    prior = std::move(done.prior);
    for (auto& s : walks) s.Rebase(*prior);
  };
  std::future<Refitted> pending;  // The refit in flight (valid() while one is).
  auto land_refit = [&] {
    if (pending.valid()) install(pending.get());
  };
  // Whether the session's cost model is refitted now (the refit itself: refit_now). A refit after
  // the last measurement the budget allows would guide nothing.
  auto refit_due = [&] {
    if (!model || evaluator.exhausted()) return false;
    double trust = 0;
    for (const auto& s : walks) trust += s.trust() / walkers;
    const bool due = refit > 0 && static_cast<int64_t>(unfitted.size()) >= refit;
    const bool in_doubt = doubt_refit > 0 && trust < kDoubtfulTrust &&
                          static_cast<int64_t>(unfitted.size()) >= doubt_refit;
    return due || in_doubt;
  };
  auto refit_now = [&] {
    // The tuned problem's rows weigh like many: they are the only ones that are about it.
    const double weight = options.Get("refit_weight");
    if (!refit_async) {
      install(refit_model(std::move(model), std::move(unfitted), weight));
    } else {
      // The thread owns the model and the rows until the refit lands; the problem and the space
      // outlive it (the future's destructor waits for it, even when an exception unwinds Run).
      pending = std::async(std::launch::async, refit_model, std::move(model), std::move(unfitted), weight);
    }
    unfitted.clear();  // Moved from: empty it for the rows to come.
  };
  double epsilon = options.Get("epsilon");
  const double decay = options.Get("decay");
  // Online fine-tuning: the session's own copy of the policy, updated from its walkers' decisions.
  const double learning_rate = options.Get("learn");
  const bool learn = learning_rate > 0;
  const int64_t learn_every = std::max<int64_t>(1, options.Int("learn_every"));
  rl::ActorCritic policy = trained->policy;
  std::vector<std::vector<Transition>> decisions(walkers);
  int64_t since_update = 0;
  // Adaptive stopping: end the session once another measurement is unlikely to pay.
  const double stop = options.Get("stop");
  const double stop_gain = options.Get("stop_gain");
  const int64_t stop_after = options.Int("stop_after");
  const double stop_trust = options.Get("stop_trust");
  const bool stop_local = options.Get("stop_local") > 0;
  const double stop_near = std::log1p(std::max(0.0, options.Get("stop_near")));
  const size_t stop_near_top = static_cast<size_t>(std::max<int64_t>(0, options.Int("stop_near_top")));
  const bool stop_near_ends = options.Get("stop_near_ends") > 0;
  // Patience: end once the best has gained less than stop_patience_gain over the last
  // stop_patience measurements (a flat landscape whose differences are timing noise).
  const int64_t stop_patience = options.Int("stop_patience");
  const double stop_patience_gain = std::log1p(std::max(0.0, options.Get("stop_patience_gain")));
  std::vector<double> best_by_eval;  // The best log ms after each measurement.
  // True once the best has gained less than stop_patience_gain over the last stop_patience
  // measurements (records the best of every measurement since the last call first).
  auto record_best = [&] {
    while (static_cast<int64_t>(best_by_eval.size()) < evaluator.evals())
      best_by_eval.push_back(walks[0].best_log_ms());
  };
  auto out_of_patience = [&] {
    record_best();
    if (stop_patience <= 0 || evaluator.exhausted() || evaluator.evals() < std::max(stop_after, stop_patience + 1))
      return false;
    const double then = best_by_eval[static_cast<size_t>(evaluator.evals() - 1 - stop_patience)];
    return std::isfinite(then) && then - walks[0].best_log_ms() < stop_patience_gain;
  };
  // How many more measurements patience allows if none of them beats the best: a batch of checks
  // larger than that would spend, all at once, measurements that patience would not have granted.
  auto patience_left = [&]() -> int64_t {
    record_best();
    const int64_t n = evaluator.evals();
    if (stop_patience <= 0) return std::numeric_limits<int64_t>::max();
    const double now = walks[0].best_log_ms();
    for (int64_t j = std::max<int64_t>(0, n - 1 - stop_patience); j < n; ++j)
      if (std::isfinite(best_by_eval[static_cast<size_t>(j)]) &&
          best_by_eval[static_cast<size_t>(j)] - now < stop_patience_gain)
        return std::max({stop_after, stop_patience + 1, j + 1 + stop_patience}) - n;
    return std::numeric_limits<int64_t>::max();  // Nothing finite measured yet.
  };

  // On a kernel family the cost model has not seen, its prior is a guess: from `climb`
  // measurements on, the session first measures the best config's untried one-step neighbours
  // (one a round per walker, that is per measuring GPU, the most promising first), so that the
  // policy acts from local optima. On a family it has seen, the same while the measurements rank
  // the prior worse than such a family's prior ranks (trust below climb_doubt, once at least
  // TrustConfig::min_pairs pairs of measurements whose times differ were compared: ties are no
  // evidence): a new shape can be as new to the model as a new family.
  const int64_t climb = options.Int("climb");
  bool unseen = prior->trust < agent::kSeenFamilyTrust;
  const double climb_doubt = options.Get("climb_doubt");
  // Whether the walk doubts its prior: its trust, measured on at least TrustConfig::min_pairs pairs
  // of measurements whose times differ (ties are no evidence), is below `level`.
  auto doubts = [&](double level) {
    return walks[0].ranked_comparisons() >= agent::TrustConfig{}.min_pairs && walks[0].trust() < level;
  };
  // With climb_ahead, a climb step that made one parameter one step better is tried again first.
  const bool climb_ahead = options.Get("climb_ahead") > 0;
  // With climb_ridge, a neighbour the constraints forbid is replaced by the most promising valid
  // config that also moves one other parameter one step (Walk::RidgeStep).
  const bool climb_ridge = options.Get("climb_ridge") > 0;
  // With climb_warps, a block and its warps step together: where moving `num_warps` one step and
  // moving another parameter one step the same way were each measured at least climb_warps times
  // slower than the best config, the climb measures the two steps together before the rest of its
  // neighbours (the most promising first). A program's warps go with its work: a larger block with
  // as many warps, or as many warps on a smaller block, unbalances it, and each alone can lose by
  // much while both together win (attention 2x16x8192x128: 64x64 tiles of 4 warps 1.05x the best,
  // 128-row tiles of 4 warps 1.27x, 8 warps 1.64x, 128 rows and 8 warps 1.01x; benchmarks/agent.md).
  // A step alone climb_warps_cliff times slower or more fell off a cliff (registers spilled: matmul
  // 2048x1000x16384's 128x128x128 tiles on 2 warps, 14x the best) that a smaller block on as few
  // warps does not climb back from, so it pairs with nothing. 2, not 3: on the causal attention
  // 2x16x2048x128 a step to 2 warps 2.3x slower than the best paired with a smaller block (2.9x and
  // 2.2x) before the climb's useful steps (benchmarks/agent.md). Spaces without a `num_warps`
  // parameter are untouched.
  const double climb_warps = options.Get("climb_warps");
  const double climb_warps_cliff = options.Get("climb_warps_cliff");
  std::optional<size_t> warps_param;
  for (size_t p = 0; p < space.num_params(); ++p)
    if (space.params()[p].name == "num_warps") warps_param = p;
  auto warp_pairs = [&] {
    std::vector<std::pair<double, Config>> pairs;
    if (!(climb_warps > 0) || !warps_param || evaluator.best() == nullptr) return pairs;
    const Config& best = evaluator.best()->config;
    const double slower = walks[0].best_log_ms() + std::log(climb_warps);
    const double cliff = climb_warps_cliff > 0 ? walks[0].best_log_ms() + std::log(climb_warps_cliff) : kInf;
    auto lost = [&](const std::optional<Config>& c) {
      if (!c) return false;
      const auto log_ms = walks[0].MeasuredLogMs(*c);
      return log_ms && *log_ms >= slower && *log_ms < cliff;
    };
    const size_t w = *warps_param;
    for (int d : {1, -1}) {
      if (!lost(space.Move(best, w, d))) continue;
      for (size_t p = 0; p < space.num_params(); ++p) {
        if (p == w) continue;
        const auto alone = space.Move(best, p, d);
        if (!lost(alone)) continue;
        auto both = space.Move(*alone, w, d);
        if (!both || !space.IsValid(*both) || walks[0].Measured(*both) || walks[0].Covered(*both) ||
            walks[0].StaticallyFails(space.Index(*both)) || walks[0].PFail(*both) > 0.5)
          continue;
        pairs.emplace_back(walks[0].Predict(*both), std::move(*both));
      }
    }
    std::stable_sort(pairs.begin(), pairs.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    return pairs;
  };
  // With climb_pair_near, at a local optimum of the climb the untried neighbours of the configs the
  // climb measured as such pairs and that ran within climb_pair_near of the best come next: a block
  // and its warps moved together cross the ridge between two basins, and a pair that lands near
  // the best stands on the slope of the other one (the causal attention 2x16x2048x128: from 128x64
  // tiles of 8 warps and 4 stages, 1.206x the table's best, the pair of 64 rows on 4 warps ran at
  // 1.249x, and its step to 3 stages is the best; benchmarks/agent.md).
  const double climb_pair_near = options.Get("climb_pair_near");
  std::vector<Config> pair_landings;
  std::optional<Config> best_before;  // The best config before the last round's measurements.
  // The best config's analytic twins (FeatureExtractor::AnalyticTwins): configs the physics of the
  // cost model cannot tell from it, so that only a measurement can. Up to `twins` of them, the most
  // promising first and at most `limit`, once per best config: a climb at a local optimum measures
  // them, and so does stop_local's check before a session ends.
  const int64_t twins = options.Int("twins");
  std::unordered_set<uint64_t> twinned;  // Best configs whose twins were asked for.
  // With twin_after, the twins come before the rest of the climb once this many climb rounds in a
  // row have not moved the best.
  const int64_t twin_after = options.Int("twin_after");
  int64_t stale_climbs = 0;
  auto untried_twins = [&](size_t limit) {
    std::vector<Config> out;
    if (twins <= 0 || evaluator.best() == nullptr || !trained->model ||
        !twinned.insert(space.Index(evaluator.best()->config)).second)
      return out;
    const NamedValues best = space.Named(evaluator.best()->config);
    for (uint64_t index : prior->order) {
      if (static_cast<int64_t>(out.size()) >= twins || out.size() >= limit) break;
      const Config c = space.FromIndex(index);
      if (walks[0].Measured(c) || walks[0].Covered(c) || walks[0].StaticallyFails(index)) continue;
      if (trained->model->FeaturesFor(problem).AnalyticTwins(problem, best, space.Named(c))) out.push_back(c);
    }
    return out;
  };
  // Static verdicts: what the environment knows of a config without measuring it (the session's
  // compile stage, which compiles the neighbours of what it measures ahead of need; a replayed
  // table's recorded compile outcomes). Asked for the one-step neighbours of each measured config.
  const bool use_static = options.Get("static") > 0;
  // It also tells which configs compile to one binary: a neighbour whose binary was measured is
  // covered (its time is known) and never measured again. A move's or jump's config is asked too
  // before it is measured (known_already): one the stage refuses or has measured the binary of is
  // not, and the walk chooses again (it is masked now).
  const bool use_binaries = use_static && options.Get("binaries") > 0;
  // Tells every walk what the compile stage said of `c`: its binary (with binaries) and a verdict
  // (a refusal always; "ok" when `ok_verdict`).
  auto tell = [&](const Config& c, const Measurement& seen, bool ok_verdict) {
    for (auto& w : walks) {
      if (ok_verdict || seen.status != Status::kOk) w.SetStaticVerdict(c, seen.status == Status::kOk);
      if (use_binaries) w.SetBinary(c, seen.binary);
    }
  };
  // (Only a refusal becomes a verdict here: an "ok" would change the failure belief of a config the
  // walk already chose, and the policy learned from beliefs without verdicts on its own choices.)
  auto known_already = [&](const Config& c) {
    if (!use_binaries) return false;
    if (!walks[0].HasBinary(c) && !walks[0].HasStaticVerdict(c) && !walks[0].Measured(c)) {
      const auto seen = evaluator.env().Observe(c);
      if (!seen) return false;
      tell(c, *seen, false);
    }
    return !walks[0].Measured(c) && (walks[0].StaticallyFails(space.Index(c)) || walks[0].Covered(c));
  };
  auto learn_static = [&](const std::vector<Config>& measured) {
    if (!use_static) return;
    for (const Config& from : measured) {
      if (use_binaries && !walks[0].HasBinary(from))
        if (const auto seen = evaluator.env().Observe(from))
          for (auto& w : walks) w.SetBinary(from, seen->binary);
      for (const Config& c : space.Neighbours(from)) {
        if (walks[0].HasStaticVerdict(c) || walks[0].Measured(c)) continue;
        if (const auto seen = evaluator.env().Observe(c)) tell(c, *seen, true);
      }
    }
  };
  // A second opinion on a family the cost model has seen on a few shapes only (kThinFamilyShapes):
  // the prior of the same model without that family's rows. What one recorded shape of a family
  // teaches may not hold for a very different shape (taught by fp8_matmul 61x8192x8192, the model
  // ranks 8192x4096x4096's configs at a correlation of 0.05, the model that never saw the family at
  // 0.60; benchmarks/agent.md). Once the walk doubts its prior (as for climb_doubt), that model is
  // fitted (once per process); the session continues on its prior, as on a family it has not seen,
  // when the measurements rank the first prior no better than chance and the second better by a
  // paired sign test's z of at least `second_opinion` (both priors out of sample: the session's
  // first, not a refit). The measured configs are those the first prior ranked best, among which
  // its ranking is at its worst, so the test leans towards the second: hence both conditions and a
  // z, not a difference. Not asked again after a switch.
  const double second_opinion = options.Get("second_opinion");
  const agent::Prior* first_prior = prior.get();  // Alive in old_priors after refits.
  std::shared_ptr<const CostModel> without_family;
  std::unique_ptr<agent::Prior> second_prior;
  bool second_open = second_opinion > 0 && !unseen && trained->model &&
                     trained->model->FamilyShapes(problem.family) <= kThinFamilyShapes;
  bool switched = false;  // Until the next batch's first Trial::why says so.
  auto consult = [&] {
    if (!second_open || !doubts(agent::kSeenFamilyTrust) || evaluator.exhausted()) return;
    if (!second_prior) {
      without_family = ModelWithoutFamily(trained->model, problem.family);
      if (!without_family) {
        second_open = false;
        return;
      }
      second_prior = std::make_unique<agent::Prior>(agent::PriorFromModel(without_family.get(), problem, space));
    }
    const auto compared = ComparePriors(*first_prior, *second_prior, space, evaluator.history());
    if (compared.pairs < agent::TrustConfig{}.min_pairs || compared.first > 0 ||
        compared.second_better_z < second_opinion)
      return;
    second_open = false;
    switched = true;
    land_refit();  // Refits continue below from the model without the family, not from this one.
    old_priors.push_back(std::move(prior));
    prior = std::move(second_prior);
    for (auto& w : walks) w.Rebase(*prior);
    unseen = prior->trust < agent::kSeenFamilyTrust;
    if (model) {
      // Refits continue from the model without the family, with every measurement of the session.
      model = std::make_unique<CostModel>(*without_family);
      unfitted.clear();
      for (const Trial& t : evaluator.history()) unfitted.emplace_back(space.Named(t.config), t.measurement);
    }
  };
  for (;;) {
    std::vector<std::pair<int, agent::Move>> proposals;
    std::vector<bool> proposals_from_policy;
    std::vector<std::string> why;  // Per config of the batch (Trial::why).
    std::unordered_set<uint64_t> chosen;
    std::vector<Config> batch;
    const bool doubted = climb_doubt > 0 && doubts(climb_doubt);
    auto add_twins = [&] {
      for (Config& c : untried_twins(static_cast<size_t>(walkers))) {
        batch.push_back(std::move(c));
        why.push_back("twin: the analytic estimate of the best");
      }
    };
    if (climb > 0 && (unseen || doubted) && evaluator.evals() >= climb) {
      auto unchecked = walks[0].UncheckedNeighbours(0, 0, climb_ridge);
      if (climb_ahead && best_before && evaluator.best() != nullptr) {
        if (auto ahead = StepAgain(space, *best_before, evaluator.best()->config, climb_ridge)) {
          auto it = std::find(unchecked.begin(), unchecked.end(), *ahead);
          if (it != unchecked.end()) std::rotate(unchecked.begin(), it, it + 1);
        }
      }
      if (twin_after > 0 && stale_climbs >= twin_after) add_twins();
      for (auto& pair : warp_pairs()) {
        if (static_cast<int>(batch.size()) >= walkers) break;
        pair_landings.push_back(pair.second);
        batch.push_back(std::move(pair.second));
        why.push_back("climb: a block and its warps together");
      }
      for (size_t i = 0; i < unchecked.size() && static_cast<int>(batch.size()) < walkers; ++i) {
        batch.push_back(std::move(unchecked[i]));
        why.push_back("climb");
      }
      if (batch.empty() && climb_pair_near > 0 && evaluator.best() != nullptr) {
        std::vector<Config> near;
        for (const Config& c : pair_landings) {
          const auto log_ms = walks[0].MeasuredLogMs(c);
          if (log_ms && *log_ms <= walks[0].best_log_ms() + std::log1p(climb_pair_near)) near.push_back(c);
        }
        auto beyond = walks[0].UncheckedNeighboursOf(near, climb_ridge);
        for (size_t i = 0; i < beyond.size() && static_cast<int>(batch.size()) < walkers; ++i) {
          batch.push_back(std::move(beyond[i]));
          why.push_back("climb: beyond a block and its warps");
        }
      }
    }
    // At a local optimum (no neighbour left to climb to), the incumbent's analytic twins, the most
    // promising first, up to `twins` per incumbent: what the physics cannot tell apart, only a
    // measurement can.
    if (climb > 0 && batch.empty() && (unseen || doubted) && evaluator.evals() >= climb) add_twins();
    const bool climbing = !batch.empty();
    for (int w = 0; w < walkers && !climbing; ++w) {
      agent::Walk& s = walks[w];
      // Free moves (onto measured configs) cost nothing; a few in a row before a measurement.
      for (int step = 0; step < 8; ++step) {
        Transition t = ChooseAction(policy, s, epsilon, doubt, learn, rng);
        if (t.action < 0) break;
        const auto move = s.Resolve(t.action);
        if (learn) decisions[w].push_back(std::move(t));
        if (!move->measure) {
          const auto r = s.TakeFree(*move);
          if (learn) Reward(&decisions[w], r);
          continue;
        }
        if (known_already(move->config)) {
          if (learn) decisions[w].pop_back();  // Masked now: the policy chooses again.
          continue;
        }
        if (chosen.insert(space.Index(move->config)).second) {
          proposals.emplace_back(w, *move);
          proposals_from_policy.push_back(true);
          why.push_back(ActionWhy(s, t.action));
        } else if (learn) {
          decisions[w].pop_back();  // Another walker measures it: this decision is not taken.
        }
        break;
      }
      // A walker that only wandered over measured configs (or chose what another walker chose)
      // jumps, so that every round measures something while anything is left.
      const bool proposed = !proposals.empty() && proposals.back().first == w;
      if (!proposed) {
        auto jump = s.Resolve(agent::kJump);
        while (jump && known_already(jump->config)) jump = s.Resolve(agent::kJump);
        std::string jump_why = jump ? JumpWhy(s) : std::string();
        if (jump && !chosen.insert(space.Index(jump->config)).second) {
          // Another walker measures this walker's jump target this round (their beliefs agree):
          // it takes the prior's most promising config that no walker chose, so that every
          // measuring GPU gets one while any is left.
          jump.reset();
          for (uint64_t index : prior->order) {
            const Config c = space.FromIndex(index);
            if (s.Measured(c) || s.Covered(c) || chosen.count(index) || s.PFail(c) > 0.5) continue;
            chosen.insert(index);
            jump = agent::Move{c, true};
            jump_why = "jump: the prior's next";
            break;
          }
        }
        if (jump) {
          proposals.emplace_back(w, *jump);
          proposals_from_policy.push_back(false);
          why.push_back(std::move(jump_why));
        }
      }
    }
    if (proposals.empty() && !climbing) return;  // Nothing left that the agent would measure.
    for (const auto& p : proposals) batch.push_back(p.second.config);
    if (switched && !why.empty()) {
      why[0] += " (from here on the prior of the model without " + problem.family + ")";
      switched = false;
    }
    if (evaluator.best() != nullptr) best_before = evaluator.best()->config;
    const auto results = evaluator.Evaluate(batch, &why);
    if (climbing) ++stale_climbs;
    if (evaluator.best() != nullptr && (!best_before || !(evaluator.best()->config == *best_before))) stale_climbs = 0;
    learn_static(batch);
    if (climbing)
      for (auto& w : walks)
        for (size_t i = 0; i < batch.size(); ++i) w.Record(batch[i], results[i]);
    for (size_t i = 0; i < proposals.size(); ++i) {
      const auto& [walker, move] = proposals[i];
      for (int w = 0; w < walkers; ++w) {
        if (w == walker) {
          const auto r = walks[w].TakeMeasured(move, results[i]);
          // A forced jump (no decision of the policy) earns nothing to learn from.
          if (learn && !decisions[w].empty() && proposals_from_policy[i]) Reward(&decisions[w], r);
        } else {
          walks[w].Record(move.config, results[i]);
        }
      }
    }
    land_refit();
    if (model && !evaluator.exhausted())
      for (size_t i = 0; i < batch.size(); ++i) unfitted.emplace_back(space.Named(batch[i]), results[i]);
    // Asynchronous refits start once the session has decided to go on (below): one started just
    // before the session ends would only be waited for.
    if (!refit_async && refit_due()) refit_now();
    consult();
    if (out_of_patience()) return;
    // Stop when even the most promising untried config is unlikely to be `stop_gain` faster than
    // the best (below `stop`), by beliefs the session trusts (low trust: they are no guide).
    if (stop > 0 && evaluator.evals() >= stop_after && !evaluator.exhausted() &&
        walks[0].trust() >= stop_trust && walks[0].GainChance(stop_gain) < stop) {
      if (!stop_local) return;
      // Before ending, the incumbent must be a local optimum: its untried one-step neighbours are
      // measured as one batch (compiled in parallel, ahead of need by the session's prefetching),
      // and from a faster one the same again, until none is faster or the budget is spent. The
      // beliefs that said "nothing to gain" were fitted on what the walk measured, which is often
      // one region of the space; a neighbour is where they are least extrapolated.
      for (;;) {
        auto unchecked = walks[0].UncheckedNeighbours(stop_near, stop_near_top);
        std::vector<std::string> checks(unchecked.size(), "check: a neighbour of the best before stopping");
        for (Config& c : untried_twins(std::numeric_limits<size_t>::max())) {
          if (std::find(unchecked.begin(), unchecked.end(), c) != unchecked.end()) continue;
          unchecked.push_back(std::move(c));
          checks.push_back("check: an analytic twin of the best before stopping");
        }
        if (unchecked.empty()) return;
        const int64_t left = std::min(evaluator.evals_left(), std::max<int64_t>(1, patience_left()));
        if (evaluator.evals_left() <= 0) return;
        if (static_cast<int64_t>(unchecked.size()) > left) {
          unchecked.resize(static_cast<size_t>(left));
          checks.resize(unchecked.size());
        }
        const double before = walks[0].best_log_ms();
        const auto checked = evaluator.Evaluate(unchecked, &checks);
        learn_static(unchecked);
        for (size_t i = 0; i < unchecked.size(); ++i)
          for (auto& w : walks) w.Record(unchecked[i], checked[i]);
        if (evaluator.exhausted()) return;
        if (!(walks[0].best_log_ms() < before)) return;  // The incumbent stands: a local optimum.
        // Patience holds here too: on a flat landscape every round of ties' neighbours finds a
        // "faster" one by noise, and these rounds alone could spend the whole budget.
        if (out_of_patience()) return;
        // A new best within stop_near of the old is a tie that noise decided, not a step: end.
        if (stop_near_ends && walks[0].best_log_ms() >= before - stop_near) return;
      }
    }
    if (refit_async && refit_due()) refit_now();
    since_update += static_cast<int64_t>(batch.size());
    if (learn && since_update >= learn_every) {
      since_update = 0;
      for (int w = 0; w < walkers; ++w) {
        if (decisions[w].size() >= 4) LearnOnline(&policy, decisions[w], walks[w], learning_rate, rng);
        decisions[w].clear();
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
           {"refit_weight", "weight of the tuned problem's rows in a refit", 10},
           {"refit_async", "1: a refit runs while the next round is measured and lands after it, the session "
                           "waiting for none (0: the session waits for each refit before its next proposal)", 1},
           {"doubt", "weight of the trust shift: probability (1 - trust)^2 times this (at most 1) that an action "
                     "becomes a jump (trust: rank correlation of the walk's predictions with its measurements; "
                     "4 left the fewest problems over 15 evaluations of 0 to 8 under leave-one-family-out, "
                     "benchmarks/agent.md)", 4},
           {"doubt_refit", "while trust is below 0.5, refit the session's cost model after this many new "
                           "measurements (0: only as `refit` says; a refit takes about a second on the bundled "
                           "tables, nothing beside a GPU measurement but most of a replay's time)", 0},
           {"learn", "learning rate of online PPO updates of the session's policy (0: the policy stays fixed)", 0},
           {"learn_every", "measurements between online policy updates", 16},
           {"stop", "end the session when the most promising untried config's chance of being `stop_gain` faster "
                    "than the best is below this (0: use the whole budget)", 0},
           {"stop_gain", "the gain, as a fraction, that adaptive stopping looks for", 0.05},
           {"stop_after", "measurements before adaptive stopping may end a session", 6},
           // 0.2, not 0.5: a variant the cost model has no rows of (attention's Gluon kernel on Hopper)
           // kept trust under 0.5 through whole sessions, which then ran to stop_patience (benchmarks/
           // agent.md, "Trust before stopping").
           {"stop_trust", "trust in the beliefs below which adaptive stopping never ends a session", 0.2},
           {"stop_local", "1: before adaptive stopping ends a session, measure the best config's untried one-step "
                          "neighbours (and a faster one's, in turn) so that it ends on a local optimum", 0},
           {"stop_near", "with stop_local, the configs within this fraction of the best time count as the best "
                         "too: their neighbours are measured as well (a tie on a GPU is decided by noise)", 0},
           {"stop_near_top", "with stop_near, at most this many of the configs tied with the best (the fastest) "
                             "count as the best (0: all of them)", 0},
           {"stop_near_ends", "1: with stop_local, a round of neighbours whose best is within stop_near of the best "
                              "before ends the session (a tie, not a step)", 0},
           {"stop_patience", "end the session once the best has gained less than stop_patience_gain over the last "
                             "this many measurements, the checks of stop_local included, whose batches it cuts to the "
                             "measurements it has left (0: never)", 0},
           {"stop_patience_gain", "the gain, as a fraction, that stop_patience waits for", 0.02},
           {"climb_ahead", "1: in the climb, after a step that made one parameter one step better, the same step "
                           "again comes first (0: off; benchmarks/agent.md)", 1},
           {"jump_draws", "a random jump (taken with probability (1 - trust)^2) draws this many untried configs "
                          "uniformly and measures the one the walk believes fastest (1: uniform random search; "
                          "benchmarks/agent.md)", 6},
           {"alike", "configs whose estimated registers per thread, shared memory and waves lie this close "
                     "(a kernel's width in doublings) count as near in the beliefs' local correction, whatever "
                     "their parameters (0: by parameters only; benchmarks/agent.md)", agent::kDefaultAlikeWidth},
           {"climb_pair_near", "with climb_warps, at a local optimum of the climb, measure the untried one-step "
                               "neighbours of the configs measured as a block and its warps together that ran within "
                               "this fraction of the best (the pair crossed into another basin; 0: off; "
                               "benchmarks/agent.md)", 0.1},
           {"climb_warps_cliff", "with climb_warps, a step alone this many times slower than the best or more is a "
                                 "cliff and pairs with nothing (0: no limit)", 2},
           {"climb_warps", "in the climb, where moving num_warps one step and another parameter one step the same "
                           "way were each measured at least this many times slower than the best, the two steps "
                           "together are measured first (0: off; benchmarks/agent.md)", 1.1},
           {"climb_ridge", "1: in the climb, a neighbour that breaks the space's constraints is replaced by the most "
                           "promising valid config that also moves one other parameter one step (a block that may grow "
                           "only with its warps grows with them), and such a step that paid is taken again first "
                           "with climb_ahead (0: off; benchmarks/agent.md)", 1},
           {"static", "1: ask what the compile stage already knows of a measured config's one-step neighbours (it "
                      "compiles them ahead of need; never waited for): one that did not compile within the device's "
                      "limits is never measured, one that did is not believed to fail because its neighbours did (0: "
                      "off; without a compile stage nothing is known; benchmarks/agent.md)", 1},
           {"binaries", "with static: a config the compile stage says compiles to the binary of a config measured "
                        "already (a parameter the compiler ignores, such as num_stages of a kernel without a loop) "
                        "is never measured: its time is that one's; a move's or jump's config is asked before it "
                        "is measured, and one refused is not measured either (0: off; benchmarks/agent.md)", 1},
           {"climb_doubt", "on a family the cost model has seen, climb (see `climb`) while the walk's trust in its "
                           "prior is below this, once at least three pairs of measurements whose times differ were "
                           "compared (0.8: the trust such a family starts with, so once the measurements rank the "
                           "prior worse than on the shapes it was trained on; 0: never; benchmarks/agent.md)",
            agent::kSeenFamilyTrust},
           {"second_opinion", "on a family the cost model has seen on at most three shapes, once the walk doubts "
                              "its prior (see climb_doubt) and the measurements rank it no better than chance: "
                              "continue on the prior of the model without that family's rows, as on an unseen "
                              "family, when it ranks them better by a paired sign test's z of at least this (0: "
                              "never; benchmarks/agent.md)", 2},
           {"climb", "on a kernel family the cost model has not seen, from this many measurements on, measure the "
                     "best config's untried one-step neighbours (one a round, the most promising first) before "
                     "the policy acts, so that it moves on from local optima (0: never; benchmarks/agent.md)", 2},
           {"twin_after", "with twins, measure the best config's twins before the rest of its climb once this many "
                          "climb rounds in a row have not moved the best (0: only at a local optimum; "
                          "benchmarks/agent.md)", 4},
           {"twins", "at a local optimum of the climb (or sooner: twin_after), and in stop_local's check before a "
                     "session ends, measure "
                     "up to this many of the best config's untried analytic twins (configs the cost model's "
                     "analytic estimate cannot tell from it: a matmul tile and its transpose on a square problem), "
                     "the most promising first, once per best config (0: off; benchmarks/agent.md)", 1},
           {"inert", "after this many pairs of configs that differ in one parameter only and measured the same "
                     "time (the same binary, copied), and none that differed, the parameter is inert: no move "
                     "or jump measures a config whose other values were measured (0: off)", agent::kInertPairs},
           {"losing", "after this many pairs of configs one step of a parameter apart where that step (that "
                      "parameter, that direction) made the kernel more than 2 % slower, and none where it made it "
                      "faster, the policy takes that step onto no unmeasured config (0: off; benchmarks/agent.md)",
            agent::kLosingPairs}},
          Run};
}

}  // namespace dr_kernel
