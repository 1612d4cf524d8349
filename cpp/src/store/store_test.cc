#include "dr_kernel/store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "dr_kernel/table.h"

namespace dr_kernel {
namespace {

namespace fs = std::filesystem;

// Each test gets a fresh directory for its database files, removed afterwards.
class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "dr_kernel_store_XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    path_ = (fs::path(dir_) / "results.db").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string dir_;
  std::string path_;
};

Problem SoftmaxProblem() {
  Problem p;
  p.family = "softmax";
  p.shape = {{"rows", int64_t{4096}}, {"cols", int64_t{4096}}};
  p.device = "NVIDIA H200";
  p.dtype = "fp16";
  return p;
}

TableRow OkRow(int64_t block, double ms) {
  TableRow row;
  row.config = {{"BLOCK", block}, {"num_warps", int64_t{4}}, {"num_stages", int64_t{2}}};
  Measurement& m = row.measurement;
  m.status = Status::kOk;
  m.ms = ms;
  m.ms_p20 = ms * 0.99;
  m.ms_p80 = ms * 1.01;
  m.compile_s = 0.5;
  m.load_s = 0.003;
  m.relerr = 2e-4;
  m.n_regs = 32;
  m.n_spills = 0;
  m.shared = 8;
  m.occupancy = 0.5;
  row.t = 12.5;
  return row;
}

// Equal, or both NaN: a field that is unknown in one must be unknown in the other.
bool SameNumber(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

void ExpectSameRow(const TableRow& want, const TableRow& got, const std::string& where) {
  SCOPED_TRACE(where + " config " + ToJson(want.config));
  EXPECT_EQ(ToJson(want.config), ToJson(got.config));
  EXPECT_EQ(want.config, got.config);  // Same names, order and value types.
  const Measurement& a = want.measurement;
  const Measurement& b = got.measurement;
  EXPECT_EQ(a.status, b.status);
  EXPECT_TRUE(SameNumber(a.ms, b.ms)) << a.ms << " vs " << b.ms;
  EXPECT_TRUE(SameNumber(a.ms_p20, b.ms_p20)) << a.ms_p20 << " vs " << b.ms_p20;
  EXPECT_TRUE(SameNumber(a.ms_p80, b.ms_p80)) << a.ms_p80 << " vs " << b.ms_p80;
  EXPECT_TRUE(SameNumber(a.compile_s, b.compile_s)) << a.compile_s << " vs " << b.compile_s;
  EXPECT_TRUE(SameNumber(a.load_s, b.load_s)) << a.load_s << " vs " << b.load_s;
  EXPECT_TRUE(SameNumber(a.relerr, b.relerr)) << a.relerr << " vs " << b.relerr;
  EXPECT_EQ(a.n_regs, b.n_regs);
  EXPECT_EQ(a.n_spills, b.n_spills);
  EXPECT_EQ(a.shared, b.shared);
  EXPECT_TRUE(SameNumber(a.occupancy, b.occupancy)) << a.occupancy << " vs " << b.occupancy;
  EXPECT_EQ(a.error, b.error);
  EXPECT_EQ(ToJson(a.counters), ToJson(b.counters));
  EXPECT_TRUE(SameNumber(want.t, got.t)) << want.t << " vs " << got.t;
}

void ExpectSameReference(const std::optional<Reference>& want, const std::optional<Reference>& got) {
  ASSERT_EQ(want.has_value(), got.has_value());
  if (!want) return;
  EXPECT_EQ(want->name, got->name);
  EXPECT_TRUE(SameNumber(want->ms, got->ms));
  EXPECT_TRUE(SameNumber(want->flops, got->flops));
  EXPECT_TRUE(SameNumber(want->bytes, got->bytes));
}

// Compares tables problem by problem and row by row, in order.
void ExpectSameTables(const std::vector<ProblemTable>& want, const std::vector<ProblemTable>& got) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(want[i].problem.Key(), got[i].problem.Key());
    ExpectSameReference(want[i].reference, got[i].reference);
    ASSERT_EQ(want[i].rows.size(), got[i].rows.size()) << want[i].problem.Label();
    for (size_t r = 0; r < want[i].rows.size(); ++r)
      ExpectSameRow(want[i].rows[r], got[i].rows[r], want[i].problem.Label() + " row " + std::to_string(r));
  }
}

// The tables that WriteTable() writes for `tables`, read back with ParseTables().
std::vector<ProblemTable> WrittenAndParsed(const std::vector<ProblemTable>& tables) {
  std::stringstream text;
  for (const auto& table : tables) WriteTable(text, table);
  return ParseTables(text, "export");
}

// Runs SQL on the file directly, as another program (or a newer dr_kernel) would.
void RawExec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* error = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error);
  const std::string message = error ? error : "";
  sqlite3_free(error);
  sqlite3_close(db);
  ASSERT_EQ(rc, SQLITE_OK) << message;
}

std::string RawPragma(const std::string& path, const std::string& pragma) {
  sqlite3* db = nullptr;
  sqlite3_open(path.c_str(), &db);
  sqlite3_stmt* s = nullptr;
  std::string out;
  if (sqlite3_prepare_v2(db, ("PRAGMA " + pragma).c_str(), -1, &s, nullptr) == SQLITE_OK &&
      sqlite3_step(s) == SQLITE_ROW)
    out = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
  sqlite3_finalize(s);
  sqlite3_close(db);
  return out;
}

// The message of the StoreError that opening `path` throws, or "" when it opens.
std::string OpenError(const std::string& path) {
  try {
    Store store(path);
  } catch (const StoreError& e) {
    return e.what();
  }
  return "";
}

TEST_F(StoreTest, CreatesAnEmptyDatabaseInWalMode) {
  {
    Store store(path_);
    EXPECT_EQ(store.path(), path_);
    EXPECT_EQ(store.Count(), 0);
    EXPECT_TRUE(store.Problems().empty());
    EXPECT_TRUE(store.Export().empty());
  }
  EXPECT_EQ(RawPragma(path_, "journal_mode"), "wal");
  EXPECT_EQ(RawPragma(path_, "user_version"), std::to_string(Store::kSchemaVersion));
  EXPECT_EQ(RawPragma(path_, "application_id"), std::to_string(Store::kApplicationId));
  // Opening it again finds the same, empty database.
  Store again(path_);
  EXPECT_EQ(again.Count(), 0);
}

TEST_F(StoreTest, AddedRowsReadBackFieldByField) {
  Store store(path_);
  const Problem problem = SoftmaxProblem();
  const int64_t id = store.AddProblem(problem);
  EXPECT_EQ(store.AddProblem(problem), id);  // An upsert: the same problem keeps its id.

  TableRow fast = OkRow(1024, 0.0291);
  // As dr-kernel evaluate --profile reads them from Nsight Compute (tests/data/ncu_matmul_h200.csv).
  fast.measurement.counters = {{"sm__warps_active.avg.pct_of_peak_sustained_active", 46.2},
                               {"lts__t_sector_hit_rate.pct", 52.0},
                               {"smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio", 1.23}};
  TableRow failed;
  failed.config = {{"BLOCK", int64_t{32768}}, {"num_warps", int64_t{1}}, {"num_stages", int64_t{4}}};
  failed.measurement.status = Status::kOutOfResources;
  failed.measurement.compile_s = 3.25;
  failed.measurement.shared = 262144;
  failed.measurement.error = "out of resource: shared memory, Required: 262144, Hardware limit: 232448";
  // Every kind of value a config may hold, in an order that is not alphabetical.
  TableRow odd = OkRow(512, 0.05);
  odd.config = {
      {"z_flag", true}, {"scale", 0.5}, {"layout", std::string("row \"major\"")}, {"A", int64_t{-3}}};
  odd.t = kNaN;
  store.Add(problem, fast, "gpu");
  store.AddBatch(problem, {failed, odd}, "gpu");

  EXPECT_EQ(store.Count(), 3);
  EXPECT_EQ(store.Count(problem), 3);
  const auto rows = store.Rows(problem);
  ASSERT_EQ(rows.size(), 3u);
  ExpectSameRow(fast, rows[0], "fast");
  ExpectSameRow(failed, rows[1], "failed");
  ExpectSameRow(odd, rows[2], "odd");
  // The counters survive the recorded-table format too.
  ExpectSameRow(fast, WrittenAndParsed(store.Export())[0].rows[0], "written and parsed");

  const auto problems = store.Problems();
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].Key(), problem.Key());
  EXPECT_EQ(problems[0].Label(), "softmax rows=4096 cols=4096 fp16");

  // Another device is another problem.
  Problem other = problem;
  other.device = "NVIDIA A100";
  EXPECT_TRUE(store.Rows(other).empty());
  EXPECT_EQ(store.Count(other), 0);
  EXPECT_NE(store.AddProblem(other), id);
  EXPECT_EQ(store.Problems().size(), 2u);
}

TEST_F(StoreTest, ReferenceIsSetReplacedAndKeptUnknownFields) {
  Store store(path_);
  const Problem problem = SoftmaxProblem();
  EXPECT_FALSE(store.GetReference(problem).has_value());
  Reference ref{"torch.softmax", 0.0582, 83886080, 67108864};
  store.SetReference(problem, ref);
  ExpectSameReference(ref, store.GetReference(problem));
  Reference replaced{"torch.softmax", 0.0575, kNaN, 67108864};
  store.SetReference(problem, replaced);
  ExpectSameReference(replaced, store.GetReference(problem));
  EXPECT_EQ(store.Problems().size(), 1u);
}

TEST_F(StoreTest, RowsSurviveReopening) {
  {
    Store store(path_);
    store.Add(SoftmaxProblem(), OkRow(256, 0.0346), "gpu");
  }
  Store store(path_);
  ASSERT_EQ(store.Count(), 1);
  ExpectSameRow(OkRow(256, 0.0346), store.Rows(SoftmaxProblem())[0], "reopened");
}

TEST_F(StoreTest, BatchIsAllOrNothing) {
  Store store(path_);
  TableRow empty;
  empty.measurement.status = Status::kOk;
  try {
    store.AddBatch(SoftmaxProblem(), {OkRow(256, 0.03), empty, OkRow(512, 0.03)}, "gpu");
    FAIL() << "a row without a config was accepted";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("empty config"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path_), std::string::npos) << e.what();
  }
  EXPECT_EQ(store.Count(), 0);
  // The store is still usable after the failed transaction.
  store.Add(SoftmaxProblem(), OkRow(256, 0.03), "gpu");
  EXPECT_EQ(store.Count(), 1);
}

TEST_F(StoreTest, RejudgedRowsSayWhatTheCorrectReferenceSays) {
  // A session judged by a wrong reference stored a wrong config as ok and a right one as wrong;
  // once the vote finds it out, the first becomes wrong and the second's false verdict goes.
  Store store(path_);
  const Problem problem = SoftmaxProblem();
  TableRow judged_wrong;
  judged_wrong.config = OkRow(512, 0.0).config;
  judged_wrong.measurement.status = Status::kWrong;
  judged_wrong.measurement.relerr = 0.5;
  judged_wrong.measurement.error = "out differs from the reference";
  TableRow crashed;
  crashed.config = OkRow(2048, 0.0).config;
  crashed.measurement.status = Status::kCrashed;
  const auto ids = store.AddBatch(problem, {OkRow(256, 0.03), judged_wrong, crashed}, "gpu");
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_TRUE(ids[0] < ids[1] && ids[1] < ids[2]);
  const int64_t other = store.Add(problem, OkRow(1024, 0.04), "gpu");
  EXPECT_GT(other, ids[2]);

  // Ids of rows whose status is not the one corrected are skipped: the crash stays a crash, and a
  // wrong row is never deleted by way of the first list nor an ok row by way of the second.
  EXPECT_EQ(store.Rejudge({ids[0], ids[2]}, {ids[1], other}, "outvoted"), 2);
  const auto rows = store.Rows(problem);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].config, OkRow(256, 0.0).config);
  EXPECT_EQ(rows[0].measurement.status, Status::kWrong);
  EXPECT_EQ(rows[0].measurement.error, "outvoted");
  EXPECT_TRUE(std::isnan(rows[0].measurement.ms) && std::isnan(rows[0].measurement.ms_p20) &&
              std::isnan(rows[0].measurement.relerr));
  EXPECT_EQ(rows[0].measurement.compile_s, 0.5);  // What was not of the verdict stays.
  EXPECT_EQ(rows[1].measurement.status, Status::kCrashed);
  ExpectSameRow(OkRow(1024, 0.04), rows[2], "untouched");
  // Replay and the winners read the corrected rows: the export holds them.
  const auto exported = store.Export();
  ASSERT_EQ(exported.size(), 1u);
  EXPECT_EQ(exported[0].rows.size(), 3u);
  EXPECT_EQ(exported[0].rows[0].measurement.status, Status::kWrong);
  EXPECT_EQ(store.Rejudge({}, {}, "nothing"), 0);
  EXPECT_EQ(store.Rejudge({ids[0]}, {ids[1]}, "again"), 0);  // Done once: nothing is left to correct.
}

TEST_F(StoreTest, SoftmaxTableRoundTripsThroughExport) {
  const auto original = ReadTables({DR_KERNEL_DATA_DIR "/softmax.jsonl"});
  ASSERT_EQ(original.size(), 1u);
  ASSERT_EQ(original[0].rows.size(), 170u);
  EXPECT_EQ(original[0].problem.Label(), "softmax rows=4096 cols=4096");  // The file's key order.

  Store store(path_);
  EXPECT_EQ(store.Import(original, ""), 170);
  EXPECT_EQ(store.Count(), 170);
  const auto exported = store.Export();
  ASSERT_EQ(exported.size(), 1u);
  EXPECT_EQ(exported[0].source, path_);
  ExpectSameTables(original, exported);
  // Written in the recorded format and read back, nothing changes either.
  ExpectSameTables(original, WrittenAndParsed(exported));
}

TEST_F(StoreTest, ImportingAFileTwiceStoresItsRowsOnce) {
  // Issue 9, point 3: export then reported 4 x the configs of a table imported twice.
  const auto original = ReadTables({DR_KERNEL_DATA_DIR "/softmax.jsonl"});
  Store store(path_);
  EXPECT_EQ(store.Import(original, ""), 170);
  EXPECT_EQ(store.Import(original, ""), 0);
  EXPECT_EQ(store.Count(), 170);
  ExpectSameTables(original, store.Export());
  // A new measurement of a config already stored is a repeat, and is kept.
  auto again = original;
  const auto ok = std::find_if(again[0].rows.begin(), again[0].rows.end(),
                               [](const TableRow& r) { return r.measurement.ok(); });
  ASSERT_NE(ok, again[0].rows.end());
  again[0].rows = {*ok};
  again[0].rows[0].measurement.ms *= 1.01;
  EXPECT_EQ(store.Import(again, ""), 1);
  EXPECT_EQ(store.Count(), 171);
}

TEST_F(StoreTest, ImportsWholeMatmulTableInOneTransaction) {
  const auto original = ReadTables({DR_KERNEL_FIRST_MATMUL});
  ASSERT_EQ(original.size(), 4u);
  size_t rows = 0;
  for (const auto& t : original) rows += t.rows.size();
  ASSERT_EQ(rows + original.size(), 5548u);  // One reference and the measure rows per problem.

  Store store(path_);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(store.Import(original, "matmul.jsonl"), static_cast<int64_t>(rows));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  RecordProperty("import_seconds", std::to_string(seconds));
  std::printf("imported %zu matmul rows in %.3f s\n", rows, seconds);
  EXPECT_LT(seconds, 10.0) << "one transaction of 5,544 rows should take well under a second";

  EXPECT_EQ(store.Count(), static_cast<int64_t>(rows));
  ExpectSameTables(original, store.Export());
  ExpectSameTables(original, WrittenAndParsed(store.Export()));
}

TEST_F(StoreTest, WinnersArePutGotAndOverwritten) {
  Store store(path_);
  EXPECT_FALSE(store.GetWinner("matmul-abc123").has_value());

  Winner first;
  first.config = {{"BLOCK_M", int64_t{128}}, {"BLOCK_N", int64_t{256}}, {"num_warps", int64_t{8}}};
  first.ms = 0.1897;
  first.evaluations = 100;
  store.PutWinner("matmul-abc123", first);
  auto got = store.GetWinner("matmul-abc123");
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->config, first.config);
  EXPECT_EQ(got->ms, first.ms);
  EXPECT_EQ(got->evaluations, 100);
  EXPECT_FALSE(std::isnan(got->created));  // Filled in with the time of PutWinner.

  Winner better = first;
  better.config[1].second = int64_t{128};
  better.ms = 0.1811;
  better.evaluations = 250;
  better.created = 1700000000.0;
  store.PutWinner("matmul-abc123", better);
  got = store.GetWinner("matmul-abc123");
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->config, better.config);
  EXPECT_EQ(got->ms, 0.1811);
  EXPECT_EQ(got->evaluations, 250);
  EXPECT_EQ(got->created, 1700000000.0);

  store.PutWinner("softmax-def456", first);
  EXPECT_EQ(store.GetWinner("matmul-abc123")->ms, 0.1811);
  EXPECT_EQ(store.GetWinner("softmax-def456")->ms, 0.1897);
  EXPECT_EQ(store.Count(), 0);  // Winners are not measurements.
}

TEST_F(StoreTest, RejectsATextFile) {
  {
    std::ofstream out(path_);
    out << "This is a text file, not a database. It is long enough to have a header's worth of bytes, "
           "and it goes on for a little while longer to be sure of that.\n";
  }
  const std::string error = OpenError(path_);
  EXPECT_NE(error.find(path_), std::string::npos) << error;
  EXPECT_NE(error.find("not a SQLite database"), std::string::npos) << error;
  // Nothing was written to it.
  std::ifstream in(path_);
  std::string first;
  std::getline(in, first);
  EXPECT_EQ(first.rfind("This is a text file", 0), 0u);
}

TEST_F(StoreTest, RejectsADirectory) {
  const std::string error = OpenError(dir_);
  EXPECT_NE(error.find(dir_), std::string::npos) << error;
  EXPECT_NE(error.find("is a directory"), std::string::npos) << error;
}

TEST_F(StoreTest, RejectsAPathInAMissingDirectory) {
  const std::string path = (fs::path(dir_) / "no" / "such" / "dir" / "results.db").string();
  const std::string error = OpenError(path);
  EXPECT_NE(error.find(path), std::string::npos) << error;
  EXPECT_NE(error.find("cannot be opened"), std::string::npos) << error;
}

TEST_F(StoreTest, RejectsAReadOnlyFile) {
  if (geteuid() == 0) GTEST_SKIP() << "root may write any file";
  {
    Store store(path_);
  }
  fs::permissions(path_, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  const std::string error = OpenError(path_);
  EXPECT_NE(error.find(path_), std::string::npos) << error;
  EXPECT_NE(error.find("cannot be written"), std::string::npos) << error;
}

TEST_F(StoreTest, RejectsAnotherProgramsDatabase) {
  RawExec(path_, "CREATE TABLE photos (id INTEGER PRIMARY KEY, name TEXT)");
  const std::string error = OpenError(path_);
  EXPECT_NE(error.find(path_), std::string::npos) << error;
  EXPECT_NE(error.find("not a dr_kernel results database"), std::string::npos) << error;
  EXPECT_EQ(RawPragma(path_, "journal_mode"), "delete");  // Left as it was.
}

TEST_F(StoreTest, RejectsANewerSchema) {
  {
    Store store(path_);
  }
  RawExec(path_, "PRAGMA user_version = " + std::to_string(Store::kSchemaVersion + 1));
  const std::string error = OpenError(path_);
  EXPECT_NE(error.find(path_), std::string::npos) << error;
  EXPECT_NE(error.find("newer dr_kernel"), std::string::npos) << error;
  EXPECT_NE(error.find("schema version " + std::to_string(Store::kSchemaVersion + 1)), std::string::npos)
      << error;
}

TEST_F(StoreTest, LaunchesAreCountedPerWinnerAndSurviveItsReplacement) {
  Store store(path_);
  Winner w;
  w.config = {{"BLOCK", int64_t{256}}};
  w.ms = 0.05;
  w.evaluations = 6;
  w.budget = 50;
  w.label = "softmax_kernel (4096,)";
  store.PutWinner("hot", w);
  store.PutWinner("cold", w);
  // A key without a winner (max_evals=0, a one-config list) is not counted.
  EXPECT_EQ(store.AddLaunches({{"hot", 1000}, {"cold", 3}, {"nobody", 7}}), 2);
  EXPECT_EQ(store.AddLaunches({{"hot", 24}}), 1);
  // A second process counting into the same file adds to the same rows.
  Store other(path_);
  EXPECT_EQ(other.AddLaunches({{"cold", 2}}), 1);
  auto hottest = store.HottestWinners(5);
  ASSERT_EQ(hottest.size(), 2u);
  EXPECT_EQ(hottest[0].first, "hot");
  EXPECT_EQ(hottest[0].second.launches, 1024);
  EXPECT_EQ(hottest[0].second.budget, 50);
  EXPECT_EQ(hottest[0].second.label, "softmax_kernel (4096,)");
  EXPECT_EQ(hottest[1].second.launches, 5);
  EXPECT_EQ(store.HottestWinners(1).size(), 1u);
  // A re-tuned winner replaces the config and keeps the count: the key stays as hot as it was.
  Winner better = w;
  better.config = {{"BLOCK", int64_t{1024}}};
  better.ms = 0.03;
  better.budget = 200;
  better.launches = 0;
  store.PutWinner("hot", better);
  const auto got = store.GetWinner("hot");
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->launches, 1024);
  EXPECT_EQ(got->budget, 200);
  EXPECT_EQ(ToJson(got->config), R"({"BLOCK":1024})");
}

TEST_F(StoreTest, UpgradesAVersionOneFileKeepingItsRows) {
  // A results file as dr_kernel wrote it before measurements had an occupancy column.
  RawExec(path_,
          "CREATE TABLE problems (id INTEGER PRIMARY KEY, problem_key TEXT NOT NULL UNIQUE, family TEXT NOT NULL,"
          " shape TEXT NOT NULL, device TEXT NOT NULL, dtype TEXT NOT NULL, created REAL NOT NULL);"
          "CREATE TABLE measurements (id INTEGER PRIMARY KEY, problem_id INTEGER NOT NULL REFERENCES problems(id),"
          " config TEXT NOT NULL, status TEXT NOT NULL, ms REAL, ms_p20 REAL, ms_p80 REAL, compile_s REAL,"
          " load_s REAL, relerr REAL, n_regs INTEGER, n_spills INTEGER, shared INTEGER, error TEXT, t REAL,"
          " source TEXT NOT NULL, created REAL NOT NULL);"
          "CREATE TABLE winners (cache_key TEXT PRIMARY KEY, config TEXT NOT NULL, ms REAL,"
          " evaluations INTEGER NOT NULL, created REAL NOT NULL);"
          "INSERT INTO problems VALUES (1, 'softmax|{\"rows\":4096,\"cols\":4096}|NVIDIA H200|fp16', 'softmax',"
          " '{\"rows\":4096,\"cols\":4096}', 'NVIDIA H200', 'fp16', 0);"
          "INSERT INTO measurements (problem_id, config, status, ms, n_regs, source, created) VALUES"
          " (1, '{\"BLOCK\":1024,\"num_warps\":4,\"num_stages\":2}', 'ok', 0.03, 32, 'gpu', 0);"
          "INSERT INTO winners VALUES ('k', '{\"BLOCK\":1024}', 0.03, 7, 0);"
          "PRAGMA application_id = " + std::to_string(Store::kApplicationId) + "; PRAGMA user_version = 1;");
  Store store(path_);
  EXPECT_EQ(RawPragma(path_, "user_version"), std::to_string(Store::kSchemaVersion));
  const Problem problem = SoftmaxProblem();
  auto rows = store.Rows(problem);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].measurement.ms, 0.03);
  EXPECT_EQ(rows[0].measurement.n_regs, 32);
  EXPECT_TRUE(std::isnan(rows[0].measurement.occupancy));  // Not known then.
  ASSERT_TRUE(store.GetWinner("k").has_value());
  EXPECT_EQ(store.GetWinner("k")->evaluations, 7);
  EXPECT_EQ(store.GetWinner("k")->launches, 0);  // Counted from the upgrade on.
  EXPECT_EQ(store.AddLaunches({{"k", 3}}), 1);
  EXPECT_EQ(store.GetWinner("k")->launches, 3);
  store.Add(problem, OkRow(512, 0.04), "gpu");
  rows = store.Rows(problem);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1].measurement.occupancy, 0.5);
  EXPECT_TRUE(rows[0].measurement.counters.empty());  // Not profiled: no counters column then.
  TableRow profiled = OkRow(256, 0.05);
  profiled.measurement.counters = {{"lts__t_sector_hit_rate.pct", 68.5}};
  store.Add(problem, profiled, "gpu");
  EXPECT_EQ(ToJson(store.Rows(problem).back().measurement.counters), "{\"lts__t_sector_hit_rate.pct\":68.5}");
  // Opening the upgraded file again changes nothing.
  Store again(path_);
  EXPECT_EQ(again.Count(problem), 3);
}

TEST_F(StoreTest, ReportsADamagedFile) {
  {
    Store store(path_);
    store.Import(ReadTables({DR_KERNEL_DATA_DIR "/softmax.jsonl"}), "");
  }
  ASSERT_EQ(RawPragma(path_, "journal_mode"), "wal");
  const auto size = fs::file_size(path_);
  ASSERT_GT(size, 16384u);
  {
    // Scribble over everything after the first page (the header and the schema stay readable).
    std::fstream file(path_, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(4096);
    const std::string junk(size - 4096, '\xa5');
    file.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  try {
    Store store(path_);
    store.Export();
    FAIL() << "a damaged file was read without complaint";
  } catch (const StoreError& e) {
    const std::string error = e.what();
    EXPECT_NE(error.find(path_), std::string::npos) << error;
    EXPECT_NE(error.find("damaged"), std::string::npos) << error;
  }
}

// Processes that write the same file at once lose nothing: 4 children each add 200 rows in short
// transactions (one row, or a batch of 4), all starting together on a database none of them created.
TEST_F(StoreTest, ConcurrentWritersLoseNothing) {
  constexpr int kChildren = 4;
  constexpr int kRowsEach = 200;
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  std::vector<pid_t> children;
  for (int c = 0; c < kChildren; ++c) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(go[1]);
      char byte;
      while (read(go[0], &byte, 1) > 0) {
      }  // Wait until the parent closes the pipe.
      int code = 0;
      try {
        Store store(path_);
        const Problem problem = SoftmaxProblem();
        auto row = [&](int i) {
          TableRow r = OkRow(256, 1 + c * 1000 + i);
          r.config = {{"child", int64_t{c}}, {"i", int64_t{i}}};
          return r;
        };
        const std::string source = "child-" + std::to_string(c);
        for (int i = 0; i < kRowsEach;) {
          if (c % 2 == 0) {
            store.Add(problem, row(i), source);
            i += 1;
          } else {
            store.AddBatch(problem, {row(i), row(i + 1), row(i + 2), row(i + 3)}, source);
            i += 4;
          }
        }
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child %d: %s\n", c, e.what());
        code = 1;
      }
      _exit(code);
    }
    children.push_back(pid);
  }
  close(go[0]);
  close(go[1]);
  for (const pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a writer failed; see its message above";
  }

  Store store(path_);
  EXPECT_EQ(store.Count(), kChildren * kRowsEach);
  ASSERT_EQ(store.Problems().size(), 1u);
  std::set<std::pair<int64_t, int64_t>> seen;
  for (const auto& row : store.Rows(SoftmaxProblem())) {
    const int64_t c = std::get<int64_t>(*Find(row.config, "child"));
    const int64_t i = std::get<int64_t>(*Find(row.config, "i"));
    EXPECT_EQ(row.measurement.ms, 1 + c * 1000 + i);
    EXPECT_TRUE(seen.emplace(c, i).second) << "child " << c << " row " << i << " stored twice";
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(kChildren * kRowsEach));
}

}  // namespace
}  // namespace dr_kernel
