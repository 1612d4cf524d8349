// The tuning agent's decision process: where it stands in a space, what it believes of the
// configs it has not measured, which moves it may make, and what each move is worth.
//
// The same Walk serves simulated training episodes (TuningEpisodeEnv) and real tuning (the ppo
// strategy): only the source of measurements differs.
#ifndef DR_KERNEL_AGENT_WALK_H_
#define DR_KERNEL_AGENT_WALK_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "dr_kernel/problem.h"
#include "dr_kernel/rng.h"
#include "dr_kernel/space.h"

namespace dr_kernel::agent {

// Parameters the observation has room for; a space with more cannot be tuned by the agent.
inline constexpr int kSlots = 8;
// Actions: 2 * slot + 0 moves parameter `slot` one step down, 2 * slot + 1 one step up, and kJump
// measures the most promising config the walk has not measured (a restart elsewhere).
inline constexpr int kJump = 2 * kSlots;
inline constexpr int kNumActions = 2 * kSlots + 1;
// Pairs of identical times after which a parameter counts as inert (Walk::DetectInert): one could
// be a coincidence of the timer's resolution on a microsecond kernel, two in a row hardly.
inline constexpr int kInertPairs = 2;
// Pairs in which a step lost, and none in which it won, after which the policy may not take it
// (Walk::DetectLosingSteps): one could be a noisy measurement.
inline constexpr int kLosingPairs = 2;
// Sizes of the observation's parts.
inline constexpr int kGlobalFeatures = 13;
inline constexpr int kProblemFeatures = 4;
// Static and hardware features of the current config (see ConfigFeatures).
inline constexpr int kConfigFeatures = 12;
inline constexpr int kSlotFeatures = 16;
inline constexpr int kObservationSize =
    kGlobalFeatures + kProblemFeatures + kConfigFeatures + kSlots * kSlotFeatures;

// What the hardware makes of one config, estimated before compiling (and replaced by the compiled
// kernel's registers, spills and shared memory once measured). Zeros when nothing is known.
struct ConfigEstimate {
  bool known = false;
  double waves = 0;            // Program instances over the SM count.
  double tail_efficiency = 0;  // Share of the last wave's SMs that have work.
  double tile_intensity = 0;   // FLOP per byte one program moves.
  double regs = 0;             // 32-bit registers per thread.
  double spills = 0;           // Spilled registers (0 when estimated).
  double smem = 0;             // Shared memory per program, bytes.
  double num_warps = 4;
};

// kConfigFeatures numbers: the estimate scaled to about [0, 1], theoretical occupancy, and waves
// bucketised (below one, one to two, two to eight, more) since a partial last wave matters in steps.
std::vector<double> ConfigFeatures(const ConfigEstimate& e);

// What the agent believes of every config of one problem before measuring any: the cost model's
// predicted log time, its uncertainty and the chance the config fails. Indexed by Space::Index.
struct Prior {
  std::vector<double> log_ms;
  std::vector<double> log_std;
  std::vector<double> p_fail;
  // Valid configs (Space::Index) in order of promise, best first; filled by Rank().
  std::vector<uint64_t> order;
  // Hardware estimates by Space::Index; empty when the model knows nothing of the kernel.
  std::vector<ConfigEstimate> estimates;
  // How far the prior is trusted before anything is measured, in [0, 1]: high when the model was
  // trained on the problem's family, low for a family it has never seen, 0 without a model. The
  // walk moves it towards the rank correlation it measures (Walk::trust()).
  double trust = 0.5;

  // Orders the valid configs of `space` by predicted time and failure risk.
  void Rank(const Space& space);
};

// Rewards of the decision process, in units where a 10 % speed-up of the best so far is worth
// about gain_scale * 0.095.
struct RewardConfig {
  double gain_scale = 10.0;   // Per unit of log speed-up of the best so far.
  double eval_cost = 0.05;    // Every measurement.
  double fail_cost = 0.2;     // A measurement that failed (out of resources, compile error, wrong).
  double timeout_cost = 0.6;  // A compile that timed out: minutes of tuning time for nothing.
  double free_cost = 0.02;    // A move onto an already measured config.
  double credit = 0.5;        // Share of a new best's reward paid to the measurement before it,
                              // halving for each earlier one (exploration that paid off).
  int credit_steps = 3;       // How many earlier measurements share that credit.
};

// Where a move leads.
struct Move {
  Config config;
  bool measure = false;  // The config is not measured yet: taking the move costs one evaluation.
};

// Reward of one step and the credit it pays to earlier measuring steps: (steps ago, reward).
struct StepReward {
  double reward = 0;
  std::vector<std::pair<int, double>> credit_back;
};

// Walk::SetAlikeWidth as the ppo strategy sets it unless told otherwise: 0.5 was best of 0.25, 0.35,
// 0.5, 0.75 and 1 held out (benchmarks/agent.md, "Configs that use the machine alike").
inline constexpr double kDefaultAlikeWidth = 0.5;

// Measured times closer than this (log) are a tie for the rank correlation: timing noise, not rank.
inline constexpr double kTieLog = 0.05;
// A step between two configs loses when it makes the kernel slower by more than this (log scale:
// 2 %, above the timing noise of a recorded table or a session's confirmed measurement).
inline constexpr double kLoseLog = 0.0198;

// How well `predicted` ranks `measured` (log times, paired): Kendall's tau over the pairs whose
// measured times differ by more than the tie margin (timing noise) and whose predictions differ,
// on the correlation scale (sin(pi/2 tau)); 0 with fewer than `min_pairs` such pairs, whose number
// `compared` receives. What Walk::trust() is made of.
double RankCorrelation(const std::vector<double>& predicted, const std::vector<double>& measured, int min_pairs,
                       int* compared);

// How a walk weighs its prior against its measurements.
//
// After every measurement the walk compares what it believed of the config just before
// measuring it (Predict) with what it measured: the rank correlation over those pairs
// says how well its beliefs rank this problem's configs. Trust is that correlation (negative
// counts as 0) shrunk towards the prior's own trust by `shrink` pseudo-pairs. With trust t, a jump
// measures a uniformly random unmeasured config with probability (1 - t)^2 (or the one believed
// fastest of several such draws: Walk::SetRandomJumpDraws), and otherwise the most
// promising one by a Thompson-style draw (the predicted log time plus a quarter of its uncertainty times a
// standard normal) among the prior's first untried choices and as many drawn from the whole untried
// space (the corrected beliefs may rank those best); the first jump of a walk measures the
// prior's best guess. Predicted
// differences in the observation are scaled by t. At t = 0 every jump after the first is random
// search over the untried configs.
struct TrustConfig {
  double shrink = 4;   // Pseudo-pairs at Prior::trust.
  int min_pairs = 3;   // Pairs before the measured correlation counts at all.
};

class Walk {
 public:
  // `prior` must outlive the walk. `problem_features` are kProblemFeatures numbers describing
  // the problem (see ProblemFeatures()). `budget` is the number of measurements the walk plans.
  // `seed` seeds the walk's exploration (random and Thompson jumps): walks with different
  // seeds measure different configs wherever they are not sure.
  Walk(const Space& space, const Prior& prior, std::vector<double> problem_features, int64_t budget,
          RewardConfig rewards = {}, uint64_t seed = 0, TrustConfig trust = {});

  // The observation and action mask at the current position.
  std::vector<double> Observation() const;
  std::vector<uint8_t> Mask() const;
  // Where an allowed action leads; nullopt for an action the mask forbids.
  std::optional<Move> Resolve(int action) const;
  // Takes a move that needs no measuring (onto a measured config).
  StepReward TakeFree(const Move& move);
  // Records the measurement of a move's config and moves there when it ran.
  StepReward TakeMeasured(const Move& move, const Measurement& measurement);
  // Records a measurement taken outside the walk's own moves (another walker's), without moving.
  void Record(const Config& config, const Measurement& measurement);

  // Replaces the prior (a cost model refitted with this walk's measurements): residuals are
  // taken afresh against it. `prior` must outlive the walk.
  void Rebase(const Prior& prior);

  // Where moving parameter `param` of `from` one step (`delta` = -1 or +1) leads when the step may
  // follow a ridge of the space's constraints: the config one step away when the constraints allow
  // it; otherwise, of the configs that also move one other parameter one step either way and satisfy
  // them, the one believed fastest (a block that may grow only with the warps that hold it grows
  // with them); nullopt when the value is at the end of its range or no such config is valid.
  std::optional<Config> RidgeStep(const Config& from, size_t param, int delta) const;

  // The config kJump would measure now, or nullopt when every config is measured.
  std::optional<Config> JumpTarget() const;
  // How JumpTarget() chose its config: the prior's best guess (the first measurement), the most
  // promising by the beliefs (a Thompson-style draw), or a random draw (trust low).
  enum class JumpKind { kPriorBest, kBelieved, kRandom };
  JumpKind jump_kind() const {
    JumpTarget();
    return jump_kind_;
  }
  // Believed log time of a config: the prior corrected by the residuals measured so far (their
  // shrunk mean, a ridge-regressed linear trend over the encoded parameters, and a local kernel
  // smoother of what is left).
  double Predict(const Config& config, double* std = nullptr) const;
  // Believed probability that a config fails: the prior's, pulled towards the failures and
  // successes measured near it.
  double PFail(const Config& config) const;
  // PFail as if no static verdict were known: what the policy observes (it learned from such
  // beliefs; the verdicts guide the climb and the jumps).
  double PFailWithoutVerdict(const Config& config) const;
  // Believed chance that the most promising untried config runs at least `gain` (a fraction)
  // faster than the best measured (its probability of improvement): over the prior's first untried
  // configs and a spread of the others, by each one's belief (log time normal, its spread widened by
  // what the residuals measured so far leave unexplained, so that a model that has been wrong is
  // believed less) and its failure belief. 1 before three configs ran, 0 when none is untried.
  // Draws nothing from the walk's random stream.
  double GainChance(double gain) const;
  // The one-step neighbours of the fastest config measured (the incumbent) that are neither
  // measured nor covered by a measured binary, leaving out those believed to fail (PFail above
  // one half); the most promising (lowest believed time) first. Empty when the incumbent is a
  // local optimum as far as the walk can tell, or when nothing ran yet. With `near` > 0, every
  // config within that log-ratio of the incumbent's time counts as an incumbent too: on a GPU two
  // configs a fraction of a percent apart are a tie that timing noise decided. With `top` > 0,
  // only the `top` fastest of those incumbents count (ties in time by index).
  // With `ridge`, a neighbour that breaks a constraint is replaced by its RidgeStep.
  std::vector<Config> UncheckedNeighbours(double near = 0, size_t top = 0, bool ridge = false) const;
  // The same for the given configs instead of the incumbents (those not measured ok are skipped).
  std::vector<Config> UncheckedNeighboursOf(const std::vector<Config>& from, bool ridge = false) const;

  // RankCorrelation of the predictions made just before measuring with the measured times, over
  // the ok measurements (0 with fewer than TrustConfig::min_pairs informative pairs).
  double rank_correlation() const;
  // The walk's trust in its prior, in [0, 1] (see TrustConfig).
  double trust() const;
  // Probability that a jump now measures a uniformly random unmeasured config: (1 - trust)^2.
  double random_jump_probability() const;
  int ranked_pairs() const { return static_cast<int>(pair_predicted_.size()); }
  // Pairs of measurements the rank correlation compared: those whose times differ by more than the
  // tie margin and whose predictions differ. Below TrustConfig::min_pairs the correlation is 0
  // for want of evidence, not because the beliefs rank badly.
  int ranked_comparisons() const { return rank_compared_; }

  // A random jump draws this many untried configs uniformly and measures the one believed fastest
  // (1: uniform random search; more leans the search towards what the measurements suggest).
  void SetRandomJumpDraws(int draws) { random_draws_ = std::max(1, draws); }

  // Configs alike in what the hardware makes of them count as near in the local correction of the
  // beliefs, whatever their parameters: their estimated registers per thread, shared memory per
  // program and waves (Prior::estimates), each in log2 units, weighted by a Gaussian kernel of
  // this width (0: off, as in simulated training). What a measurement says of its config then
  // carries to configs of other tile shapes that use the machine alike (attention's 128-row block
  // with 8 warps and its 64-row block with 4 hold as many rows per warp). Configs without an
  // estimate (kernels the feature table does not know) are corrected by their parameters only.
  // The ppo strategy's default: kDefaultAlikeWidth.
  void SetAlikeWidth(double width) {
    alike_width_ = std::max(0.0, width);
    jump_known_ = false;
  }

  // Turns on inert parameters (off by default, as in simulated training): a parameter is inert
  // once at least `pairs` pairs of ok configs that differ only in it measured exactly the same time
  // (the session copies the result of a config whose binary is one measured before, and so does a
  // recorded table: a softmax's num_stages when its loop has nothing to pipeline) and no such pair
  // differed. 0 turns it off.
  void DetectInert(int pairs) {
    inert_pairs_ = pairs;
    UpdateInert();
  }
  bool Inert(size_t param) const;
  // Turns on losing steps (off by default, as in simulated training): a step of one parameter in
  // one direction (one value up or down) loses once at least `pairs` pairs of ok configs one such
  // step apart measured slower on the stepped side by more than kLoseLog, and none faster. The
  // policy may not take a losing step onto an unmeasured config (Mask): the session's own times say
  // it costs, whatever the prior says. 0 turns it off.
  void DetectLosingSteps(int pairs) { losing_pairs_ = pairs; }
  bool Losing(size_t param, int direction) const;
  // What compiling an unmeasured config said before any launch (the compile stage's static
  // analysis): whether it compiles within the device's registers and shared memory. One that does
  // not (over the limits, a compile error or timeout) would not run: no move or jump measures it
  // (PFail 1); one that does fails only as rarely as a compiled config fails for other reasons,
  // whatever its neighbours' failures suggest. Configs without a verdict keep the belief of the
  // prior and the measurements.
  void SetStaticVerdict(const Config& config, bool compiles);
  bool HasStaticVerdict(const Config& config) const { return static_fits_.count(space_.Index(config)) != 0; }
  // Whether the verdict on the config of this index (Space::Index) is that it does not compile
  // within the limits.
  bool StaticallyFails(uint64_t index) const;
  // What compiling a config told of its binary (Measurement::binary, nonzero): configs of one
  // binary run the same kernel, so once one of them is measured the others are covered.
  void SetBinary(const Config& config, uint64_t binary);
  bool HasBinary(const Config& config) const { return binary_of_.count(space_.Index(config)) != 0; }
  // Whether an unmeasured config would time a binary already timed: it compiles to the binary of a
  // measured config, or differs from a measured one only in inert parameters. Moves onto it are
  // masked and jumps pass it over.
  bool Covered(const Config& config) const;

  bool has_position() const { return has_position_; }
  const Config& position() const { return position_; }
  int64_t evals() const { return evals_; }
  int64_t budget() const { return budget_; }
  double best_log_ms() const { return best_log_; }
  bool Measured(const Config& config) const { return measured_.count(space_.Index(config)) != 0; }
  // The measured log time of a config that ran (nullopt: not measured, or it failed).
  std::optional<double> MeasuredLogMs(const Config& config) const {
    const auto it = measured_.find(space_.Index(config));
    if (it == measured_.end() || !it->second.ok) return std::nullopt;
    return it->second.log_ms;
  }
  const Space& space() const { return space_; }

 private:
  std::vector<Config> UncheckedFrom(const std::vector<uint64_t>& incumbents, bool ridge) const;
  struct Result {
    bool ok;
    double log_ms;
    int n_regs, n_spills;
    int64_t shared;
  };
  void Observe(const Config& config, const Measurement& m);
  // Refits the linear trend of the residuals and what it leaves of each (after every measurement
  // and rebase).
  void FitResiduals();
  // Belief about one config (index and encoded position): corrected log time, its uncertainty and
  // the failure probability; any output may be null.
  // `verdict`: whether a static verdict overrides the failure belief.
  void Beliefs(uint64_t index, const std::vector<double>& encoded, double* mean, double* std, double* p_fail,
               bool verdict = true) const;
  void FillDirection(const Config& target, double current_log, double* out) const;
  // The config's coordinates for SetAlikeWidth (log2 registers, shared memory, waves); false
  // without an estimate.
  bool AlikeAt(uint64_t index, std::array<double, 3>* at) const;
  // Fills outcome_alike_ from the prior's estimates.
  void UpdateAlike();

  const Space& space_;
  const Prior* prior_;
  std::vector<double> problem_features_;
  int64_t budget_;
  RewardConfig rewards_;

  std::unordered_map<uint64_t, Result> measured_;
  // Per parameter: pairs of ok measurements differing only in it with the same time, and with
  // different times (see Inert); and the ok configs measured, for Covered.
  std::vector<int> same_pairs_, differing_pairs_;
  int inert_pairs_ = 0;
  // Per parameter and direction (0 down, 1 up): pairs one step apart where the step lost or won
  // (see DetectLosingSteps).
  std::vector<std::array<int, 2>> step_lost_, step_won_;
  int losing_pairs_ = 0;
  std::unordered_map<uint64_t, uint8_t> static_fits_;  // Config index -> compiles (SetStaticVerdict).
  int random_draws_ = 1;
  double alike_width_ = 0;
  std::vector<uint8_t> inert_;  // Inert(p) by parameter, as of the last measurement.
  bool any_inert_ = false;
  std::unordered_map<uint64_t, uint64_t> binary_of_;  // Space::Index -> binary, where told (SetBinary).
  std::unordered_set<uint64_t> measured_binaries_;    // Binaries of the configs measured.
  void UpdateInert();
  std::vector<Config> ok_configs_;
  // Residuals of ok measurements against the prior, for the online correction.
  std::vector<std::vector<double>> residual_at_;
  std::vector<double> residual_;
  double residual_sum_ = 0;
  // Ridge fit of the residuals on the encoded parameters, centred at trend_centre_.
  std::vector<double> trend_, trend_centre_;
  // Encoded positions of every measurement, and whether it failed (for PFail).
  std::vector<std::vector<double>> outcome_at_;
  std::vector<uint64_t> outcome_index_;
  std::vector<uint8_t> outcome_failed_;
  // AlikeAt of every measurement, and whether it has them (an estimate); refreshed on Rebase.
  std::vector<std::array<double, 3>> outcome_alike_;
  std::vector<uint8_t> outcome_has_alike_;
  std::vector<double> outcome_detrended_;  // Residual less bias and trend (0 for failures).
  // (belief just before measuring, measured log time) of ok measurements, and their correlation.
  std::vector<double> pair_predicted_, pair_measured_;
  double rank_correlation_ = 0;
  int rank_compared_ = 0;
  TrustConfig trust_config_;
  mutable Rng rng_;
  mutable JumpKind jump_kind_ = JumpKind::kBelieved;

  bool has_position_ = false;
  Config position_;
  double position_log_ = kInf;
  int64_t evals_ = 0;
  double first_log_ = kInf, best_log_ = kInf;
  int64_t evals_since_best_ = 0;
  int free_streak_ = 0;
  // Position in prior_.order before which every config is measured.
  mutable size_t order_start_ = 0;
  // JumpTarget() until the next measurement (Observation and Mask both ask for it).
  mutable bool jump_known_ = false;
  mutable std::optional<Config> jump_;
  // Steps (counted in Take* calls) at which measurements happened that found no new best.
  std::vector<int64_t> exploring_steps_;
  int64_t step_ = 0;
};

// kProblemFeatures numbers describing a problem for the observation: log work, log traffic,
// arithmetic intensity and log space size, each scaled to about [0, 1].
std::vector<double> ProblemFeatures(double flops, double bytes, uint64_t space_size);

// A prior from known true times plus noise (for tests and for simulated problems): log_ms + N(0,
// noise) per config, with failures where `ok` is false. Deterministic in `seed`.
Prior NoisyPrior(const std::vector<double>& true_log_ms, const std::vector<uint8_t>& ok, double noise,
                 uint64_t seed);

}  // namespace dr_kernel::agent

#endif  // DR_KERNEL_AGENT_WALK_H_
