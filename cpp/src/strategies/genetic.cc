// A genetic algorithm: tournament selection, uniform crossover, neighbour-step mutation, elitism.
#include <algorithm>
#include <cmath>

#include "dr_kernel/strategy.h"

namespace dr_kernel {

namespace {

struct Member {
  Config config;
  double fitness;  // Log time; +inf for configs that failed.
};

double Fitness(const Measurement& m) { return m.ok() ? std::log(m.ms) : kInf; }

const Member& Tournament(const std::vector<Member>& population, int64_t size, Rng& rng) {
  const Member* winner = &population[rng.Below(population.size())];
  for (int64_t i = 1; i < size; ++i) {
    const Member& other = population[rng.Below(population.size())];
    if (other.fitness < winner->fitness) winner = &other;
  }
  return *winner;
}

void Run(Evaluator& evaluator, const Options& options, Rng& rng) {
  const Space& space = evaluator.space();
  const size_t population_size = static_cast<size_t>(std::max<int64_t>(2, options.Int("population")));
  const int64_t tournament = std::max<int64_t>(1, options.Int("tournament"));
  const double mutation = options.Get("mutation");
  const size_t elite = static_cast<size_t>(std::max<int64_t>(0, options.Int("elite")));
  UniqueSampler sampler(space, rng);

  std::vector<Member> population;
  std::vector<Config> initial;
  while (initial.size() < population_size) {
    auto c = sampler.Next();
    if (!c) break;
    initial.push_back(std::move(*c));
  }
  if (initial.empty()) return;
  const auto first = evaluator.Evaluate(initial);
  for (size_t i = 0; i < initial.size(); ++i) population.push_back({initial[i], Fitness(first[i])});

  for (;;) {
    std::sort(population.begin(), population.end(),
              [](const Member& a, const Member& b) { return a.fitness < b.fitness; });
    std::vector<Config> children;
    for (size_t attempt = 0; children.size() + elite < population_size && attempt < 20 * population_size; ++attempt) {
      const Member& a = Tournament(population, tournament, rng);
      const Member& b = Tournament(population, tournament, rng);
      Config child(space.num_params());
      for (size_t p = 0; p < child.size(); ++p) child[p] = rng.Uniform() < 0.5 ? a.config[p] : b.config[p];
      for (size_t p = 0; p < child.size(); ++p) {
        if (rng.Uniform() >= mutation) continue;
        if (auto moved = space.Move(child, p, rng.Uniform() < 0.5 ? -1 : 1)) child = *moved;
      }
      // Only configs never measured and not already in this generation are worth a slot.
      if (!space.IsValid(child) || evaluator.Seen(child) ||
          std::find(children.begin(), children.end(), child) != children.end())
        continue;
      children.push_back(std::move(child));
    }
    // A converged population breeds nothing new: immigrants keep the search going.
    while (children.size() + elite < population_size) {
      auto c = sampler.Next();
      if (!c) break;
      if (!evaluator.Seen(*c)) children.push_back(std::move(*c));
    }
    if (children.empty()) return;  // Every valid configuration has been measured.
    const auto results = evaluator.Evaluate(children);
    population.resize(std::min(elite, population.size()));
    for (size_t i = 0; i < children.size(); ++i) population.push_back({children[i], Fitness(results[i])});
  }
}

}  // namespace

StrategyInfo GeneticStrategy() {
  return {"genetic", "genetic algorithm: tournament selection, uniform crossover, one-step mutations, elitism",
          {{"population", "members per generation (also the batch measured per round)", 16},
           {"tournament", "members drawn per tournament", 3},
           {"mutation", "probability that a parameter of a child moves one step", 0.2},
           {"elite", "best members kept unchanged into the next generation", 2}},
          Run};
}

}  // namespace dr_kernel
