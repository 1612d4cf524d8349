// Simulated annealing over neighbour moves (one parameter one step up or down), with restarts.
#include <cmath>

#include "dr_kernel/strategy.h"

namespace dr_kernel {

namespace {

// Energy is log time: a step that makes the kernel 10 % slower costs the same at any scale.
double Energy(const Measurement& m) { return m.ok() ? std::log(m.ms) : kInf; }

void Run(Evaluator& evaluator, const Options& options, Rng& rng) {
  const Space& space = evaluator.space();
  const double t0 = options.Get("t0");
  const double cooling = options.Get("cooling");
  const int64_t patience = options.Int("patience");
  UniqueSampler starts(space, rng);

  for (;;) {  // One pass per restart.
    auto start = starts.Next();
    if (!start) return;  // Everything has been measured.
    Config current = *start;
    double energy = Energy(evaluator.Evaluate(current));
    double temperature = t0;
    double restart_best = energy;
    int64_t stale = 0;  // Steps without improving this restart's best.
    int64_t free_steps = 0;  // Steps that measured nothing new.
    while (stale < patience && free_steps < 4 * patience) {
      auto neighbours = space.Neighbours(current);
      if (neighbours.empty()) break;
      const Config& next = neighbours[rng.Below(neighbours.size())];
      const bool fresh = !evaluator.Seen(next);
      const double next_energy = Energy(evaluator.Evaluate(next));
      free_steps = fresh ? 0 : free_steps + 1;
      // Failed configs are never moved to; a start that failed moves to any neighbour that runs.
      const bool accept =
          std::isfinite(next_energy) &&
          (!std::isfinite(energy) || next_energy <= energy || rng.Uniform() < std::exp((energy - next_energy) / temperature));
      if (accept) {
        current = next;
        energy = next_energy;
      }
      if (next_energy < restart_best) {
        restart_best = next_energy;
        stale = 0;
      } else if (fresh) {
        ++stale;
      }
      if (fresh) temperature *= cooling;
    }
  }
}

}  // namespace

StrategyInfo AnnealingStrategy() {
  return {"anneal", "simulated annealing over one-step neighbour moves, restarting from a random config when stuck",
          {{"t0", "initial temperature, in units of log time (0.1 accepts a 10 % slower step with p = e^-1)", 0.1},
           {"cooling", "temperature factor after each new measurement", 0.95},
           {"patience", "new measurements without improvement before a restart", 25}},
          Run};
}

}  // namespace dr_kernel
