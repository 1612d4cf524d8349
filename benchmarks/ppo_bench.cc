// Throughput of PPO training: simulated environment steps per second, rollouts and updates
// included, for a small network on a cheap environment shaped like a small tuning space
// (37 observations, 13 actions: +-1 moves in 6 parameters and a stop).
//
//   ninja -C build ppo_bench && build/ppo_bench --benchmark_filter=PpoTrain
//
// Reports steps_per_s in wall-clock time (UseRealTime), so that the threaded variant's figure is
// comparable. Every run trains from the same seed: its final_return is the same for any thread
// count.
#include <benchmark/benchmark.h>

#include "dr_kernel/rl/grid_env.h"
#include "dr_kernel/rl/mlp.h"
#include "dr_kernel/rl/train.h"

namespace dr_kernel::rl {
namespace {

// A 6-D grid walk of 8 cells a side: 6 * 6 + 1 = 37 observations, 2 * 6 + 1 = 13 actions.
GridWalkOptions BenchGrid() { return GridWalkOptions{6, 8, 60, 0}; }

// Args: environment steps, threads. The rest is PpoConfig's defaults: hidden layers of 64 and 64,
// 16 environments x 128 steps per rollout, 4 epochs of minibatches of 512.
void BM_PpoTrain(benchmark::State& state) {
  GridWalkEnv env(BenchGrid());
  PpoConfig config;
  config.threads = static_cast<int>(state.range(1));
  int64_t steps = 0;
  double final_return = 0;
  for (auto _ : state) {
    const TrainResult result = Train(env, config, state.range(0), 1);
    steps += result.steps;
    final_return = result.log.back().mean_return;
    benchmark::DoNotOptimize(result.model.actor().params().data());
  }
  state.counters["steps_per_s"] = benchmark::Counter(static_cast<double>(steps), benchmark::Counter::kIsRate);
  state.counters["final_return"] = final_return;
}
BENCHMARK(BM_PpoTrain)
    ->Args({1000000, 1})
    ->Args({1000000, 2})
    ->Iterations(1)
    ->Unit(benchmark::kSecond)
    ->UseRealTime();

// One forward and backward pass of the 37-64-64-13 actor on a minibatch of 512 rows.
void BM_MlpForwardBackward(benchmark::State& state) {
  Rng rng(1);
  const Mlp mlp({37, 64, 64, 13}, rng);
  const Eigen::Index rows = state.range(0);
  Eigen::MatrixXd x(rows, 37);
  for (Eigen::Index i = 0; i < x.size(); ++i) x.data()[i] = rng.Normal();
  const Eigen::MatrixXd upstream = Eigen::MatrixXd::Ones(rows, 13);
  Eigen::VectorXd grad = Eigen::VectorXd::Zero(mlp.num_params());
  MlpCache cache;
  for (auto _ : state) {
    mlp.Forward(x, &cache);
    mlp.Backward(cache, upstream, &grad);
    benchmark::DoNotOptimize(grad.data());
  }
  state.counters["rows_per_s"] =
      benchmark::Counter(static_cast<double>(rows), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_MlpForwardBackward)->Arg(16)->Arg(128)->Arg(512);

// The vectorised tanh on one hidden layer's worth of activations (512 x 64).
void BM_Tanh(benchmark::State& state) {
  Rng rng(2);
  Eigen::MatrixXd x(512, 64);
  for (Eigen::Index i = 0; i < x.size(); ++i) x.data()[i] = rng.Normal();
  Eigen::MatrixXd y;
  for (auto _ : state) {
    y = x;
    TanhInPlace(y.data(), y.size());
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["values_per_s"] =
      benchmark::Counter(static_cast<double>(x.size()), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Tanh);

}  // namespace
}  // namespace dr_kernel::rl

BENCHMARK_MAIN();
