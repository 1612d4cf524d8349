#include "dr_kernel/evaluator.h"

#include <gtest/gtest.h>

namespace dr_kernel {
namespace {

// A table of 4 configs: b in {1, 2, 4, 8}; b=8 failed to compile; b=4 is fastest.
ProblemTable SmallTable() {
  ProblemTable t;
  t.problem.family = "toy";
  t.problem.shape = {{"n", int64_t{1}}};
  t.source = "small";
  const double ms[] = {3.0, 2.0, 1.0};
  for (int i = 0; i < 3; ++i) {
    TableRow row;
    row.config = {{"b", int64_t{1} << i}};
    row.measurement.status = Status::kOk;
    row.measurement.ms = ms[i];
    row.measurement.compile_s = 1.0;
    row.measurement.load_s = 0.0;
    t.rows.push_back(row);
  }
  TableRow failed;
  failed.config = {{"b", int64_t{8}}};
  failed.measurement.status = Status::kCompileTimeout;
  t.rows.push_back(failed);
  return t;
}

TEST(ReplayEnvTest, ChargesCompileAndMeasuringTime) {
  const ProblemTable table = SmallTable();
  ReplayCost cost;
  ReplayEnv env(table, cost);
  EXPECT_EQ(env.space().CountValid(), 4u);
  EXPECT_DOUBLE_EQ(env.oracle_ms(), 1.0);
  const auto results = env.Step({env.space().FromIndex(2), env.space().FromIndex(3)});
  EXPECT_EQ(results[0].measurement.ms, 1.0);
  EXPECT_DOUBLE_EQ(results[0].cost_s, 1.0 + cost.overhead_s + cost.launches * (1.0 + cost.flush_ms) / 1000);
  EXPECT_EQ(results[1].measurement.status, Status::kCompileTimeout);
  EXPECT_DOUBLE_EQ(results[1].cost_s, cost.timeout_s);
}

TEST(ReplayEnvTest, ItsProblemCarriesTheProbesCountersWhenTheTableHasThem) {
  ProblemTable table = SmallTable();
  EXPECT_TRUE(ReplayEnv(table).problem().probe_counters.empty());
  // Counters of a config that is not the probe are not the problem's.
  table.rows[0].measurement.counters = {{"duration_ns", 3000.0}};
  EXPECT_TRUE(ReplayEnv(table).problem().probe_counters.empty());
  table.rows[1].measurement.counters = {{"probe", 0.5}, {"duration_ns", 2000.0}};
  const ReplayEnv env(table);
  EXPECT_EQ(env.problem().probe_counters, table.rows[1].measurement.counters);
  EXPECT_EQ(env.problem().Key(), table.problem.Key());
}

TEST(EvaluatorTest, OwnsTheBudgetAndRemembersResults) {
  const ProblemTable table = SmallTable();
  ReplayEnv env(table);
  Evaluator evaluator(env, Budget{3});
  const Space& space = env.space();
  evaluator.Evaluate(space.FromIndex(0));
  // A repeat costs nothing; a batch with a repeat inside measures each config once.
  evaluator.Evaluate({space.FromIndex(0), space.FromIndex(1), space.FromIndex(1)});
  EXPECT_EQ(evaluator.evals(), 2);
  EXPECT_EQ(evaluator.best_ms(), 2.0);
  // Two new configs but one evaluation left: the first is measured, then the stop signal.
  EXPECT_THROW(evaluator.Evaluate({space.FromIndex(2), space.FromIndex(3)}), StopTuning);
  EXPECT_EQ(evaluator.evals(), 3);
  EXPECT_EQ(evaluator.best_ms(), 1.0);
  EXPECT_TRUE(evaluator.exhausted());
  EXPECT_THROW(evaluator.Evaluate(space.FromIndex(3)), StopTuning);
  // Already measured configs are still answered after the budget is spent.
  EXPECT_EQ(evaluator.Evaluate(space.FromIndex(2)).ms, 1.0);
}

TEST(EvaluatorTest, SecondsBudgetStopsBeforeTheNextBatch) {
  const ProblemTable table = SmallTable();
  ReplayEnv env(table);
  Evaluator evaluator(env, Budget{100, 1.5});
  evaluator.Evaluate(env.space().FromIndex(0));  // About 1.1 simulated seconds.
  evaluator.Evaluate(env.space().FromIndex(1));  // Starts under budget, ends over it: kept.
  EXPECT_EQ(evaluator.evals(), 2);
  EXPECT_THROW(evaluator.Evaluate(env.space().FromIndex(2)), StopTuning);
  EXPECT_EQ(evaluator.evals(), 2);
}

// Two recorded configs of a two-parameter table, (1, 1) and (2, 2).
ProblemTable TwoConfigTable() {
  ProblemTable two;
  two.problem.family = "toy";
  TableRow a, b;
  a.config = {{"x", int64_t{1}}, {"y", int64_t{1}}};
  a.measurement.status = Status::kOk;
  a.measurement.ms = 1;
  b.config = {{"x", int64_t{2}}, {"y", int64_t{2}}};
  b.measurement = a.measurement;
  two.rows = {a, b};
  return two;
}

TEST(EvaluatorTest, AbsentConfigsAreInvalidEvaluations) {
  // The space is the product of the recorded values (4 configs), and the two configs the table
  // lacks are invalid, each charged as one evaluation.
  const ProblemTable two = TwoConfigTable();
  ReplayEnv env(two);
  EXPECT_EQ(env.space().CountValid(), 4u);
  Evaluator evaluator(env, Budget{10});
  const auto m = evaluator.Evaluate(*env.space().Find({{"x", int64_t{1}}, {"y", int64_t{2}}}));
  EXPECT_EQ(m.status, Status::kInvalid);
  EXPECT_NE(m.error.find("no row"), std::string::npos);
  EXPECT_EQ(evaluator.evals(), 1);
  EXPECT_DOUBLE_EQ(evaluator.seconds(), 0.0);
}

TEST(EvaluatorTest, ConfigsOutsideTheTablesSpaceCostNoEvaluation) {
  // The same table with the constraint of the space it was recorded from (its "space" row): the
  // configs that break it are not configs of the problem, as in a session of that space, so the
  // walk never spends an evaluation on them; a config the table lacks within the space still costs one.
  ProblemTable two = TwoConfigTable();
  two.constraints = {"x <= y"};
  ReplayEnv env(two);
  EXPECT_EQ(env.space().CountValid(), 3u);
  Evaluator evaluator(env, Budget{10});
  const auto outside = evaluator.Evaluate(*env.space().Find({{"x", int64_t{2}}, {"y", int64_t{1}}}));
  EXPECT_EQ(outside.status, Status::kInvalid);
  EXPECT_EQ(evaluator.evals(), 0);
  const auto lacking = evaluator.Evaluate(*env.space().Find({{"x", int64_t{1}}, {"y", int64_t{2}}}));
  EXPECT_EQ(lacking.status, Status::kInvalid);
  EXPECT_EQ(evaluator.evals(), 1);

  // A recorded row that breaks its space's constraint is a contradiction in the file: one error
  // naming the problem, the row and the fix.
  two.constraints = {"x < y"};
  try {
    ReplayEnv bad(two);
    FAIL() << "accepted a row outside its space";
  } catch (const TableError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(R"({"x":1,"y":1})"), std::string::npos) << what;
    EXPECT_NE(what.find("fix or delete its 'space' row"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace dr_kernel
