#include "dr_kernel/table.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

namespace dr_kernel {
namespace {

std::string Path(const char* name) { return std::string(DR_KERNEL_DATA_DIR) + "/" + name; }

TEST(TableTest, ReadsTheFirstRecordedTables) {
  const auto tables = ReadTables({DR_KERNEL_FIRST_MATMUL, Path("softmax.jsonl"), Path("attention.jsonl")});
  ASSERT_EQ(tables.size(), 8u);
  size_t rows = 0;
  for (const auto& t : tables) {
    ASSERT_TRUE(t.reference) << t.problem.Label();
    EXPECT_EQ(t.problem.device, "NVIDIA H200");
    EXPECT_TRUE(std::isfinite(t.oracle_ms()));
    rows += t.rows.size() + 1;
  }
  EXPECT_EQ(rows, 5548u + 171u + 539u);
  EXPECT_EQ(tables[0].problem.Label(), "matmul M=1024 N=1024 K=1024");
  const auto& first = tables[0].rows[0];
  EXPECT_EQ(ToJson(first.config), R"({"BLOCK_M":16,"BLOCK_N":32,"BLOCK_K":32,"GROUP_M":1,"num_warps":2,"num_stages":2})");
  EXPECT_EQ(first.measurement.n_regs, 50);
  EXPECT_EQ(first.measurement.shared, 3072);
}

TEST(TableTest, RoundTripsThroughTheWriter) {
  const auto tables = ReadTables({Path("attention.jsonl"), Path("rmsnorm_4096x4096_fp16.jsonl")});
  std::stringstream text;
  for (const auto& t : tables) WriteTable(text, t);
  const auto again = ParseTables(text, "written");
  ASSERT_EQ(again.size(), tables.size());
  for (size_t i = 0; i < tables.size(); ++i) {
    EXPECT_EQ(again[i].problem.Key(), tables[i].problem.Key());
    ASSERT_EQ(again[i].rows.size(), tables[i].rows.size());
    for (size_t r = 0; r < tables[i].rows.size(); ++r) {
      const auto &a = again[i].rows[r].measurement, &b = tables[i].rows[r].measurement;
      EXPECT_EQ(a.status, b.status);
      EXPECT_EQ(a.error, b.error);
      EXPECT_EQ(a.n_regs, b.n_regs);
      if (b.ok()) EXPECT_DOUBLE_EQ(a.ms, b.ms);
      EXPECT_EQ(again[i].rows[r].same_binary_as, tables[i].rows[r].same_binary_as);
    }
  }
  // The rmsnorm recording copied the result of a config whose binary it had measured (num_stages
  // changes nothing in a kernel without a loop): 126 of its 168 rows say which.
  size_t copies = 0;
  for (const auto& row : tables.back().rows) copies += !row.same_binary_as.empty();
  EXPECT_EQ(copies, 126u);
}

void ExpectError(const std::string& text, const std::string& needle) {
  std::istringstream in(text);
  try {
    ParseTables(in, "bad.jsonl");
    FAIL() << "accepted: " << text;
  } catch (const TableError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(needle), std::string::npos) << what;
    EXPECT_NE(what.find("fix or delete this line"), std::string::npos) << what;
  }
}

TEST(TableTest, MalformedLinesNameTheFileAndLine) {
  const std::string good =
      R"({"type":"measure","family":"f","shape":{"n":1},"config":{"B":2},"status":"ok","ms":1.5})"
      "\n\n";
  ExpectError(good + "{\"type\":\"measure\",\n", "bad.jsonl:3: not valid JSON");
  ExpectError(good + R"({"type":"measure","family":"f","shape":{"n":1},"status":"ok"})", "bad.jsonl:3: the row has no 'config'");
  ExpectError(good + R"({"type":"measure","family":"f","shape":{"n":1},"config":{"B":2},"status":"fast"})",
              "bad.jsonl:3: unknown status 'fast'");
  ExpectError(good + R"({"type":"measure","family":"f","shape":{"n":1},"config":{"B":2},"status":"ok","ms":"1"})",
              "bad.jsonl:3: 'ms' should be a number");
  ExpectError(R"({"type":"measure","family":"f","shape":{"n":1},"config":{"B":[2]},"status":"ok","ms":1})",
              "bad.jsonl:1: 'config.B' should be a number");
  ExpectError(R"({"type":"other","family":"f","shape":{"n":1}})", "bad.jsonl:1: unknown row type 'other'");
  ExpectError(R"({"type":"measure","family":"f","shape":{"n":1},"config":{"B":2},"status":"ok"})",
              "bad.jsonl:1: an 'ok' row needs a positive 'ms'");
  // A NUL in a key (found by tests/test_fuzz.py) is escaped: Python receives the message as a C
  // string, which the NUL would cut before the fix.
  ExpectError(R"({"type":"measure","family":"f","shape":{"n":1},"config":{"\u0000":[2]},"status":"ok","ms":1})",
              "'config.\\u0000' should be a number");
}

TEST(TableTest, OneProblemIsOneTableWithOneRowPerConfig) {
  // Issue 9, point 3: repeats of a config are one measurement, a problem split over two files is one
  // problem, and the dtype tells problems apart.
  const std::string a = testing::TempDir() + "/split_a.jsonl";
  const std::string b = testing::TempDir() + "/split_b.jsonl";
  const char* head = R"({"type":"measure","family":"softmax","shape":{"rows":8,"cols":8},)";
  {
    std::ofstream out(a);
    out << head << R"("config":{"BLOCK":8},"status":"ok","ms":1.0})" << "\n"
        << head << R"("config":{"BLOCK":8},"status":"crashed"})" << "\n"
        << head << R"("config":{"BLOCK":8},"status":"ok","ms":3.0})" << "\n"
        << head << R"("dtype":"bf16","config":{"BLOCK":8},"status":"ok","ms":9.0})" << "\n";
    std::ofstream more(b);
    more << head << R"("config":{"BLOCK":16},"status":"ok","ms":0.5,"device":"NVIDIA H200"})" << "\n"
         << head << R"("config":{"BLOCK":32},"status":"compile_error"})" << "\n"
         << head << R"("config":{"BLOCK":32},"status":"compile_error"})" << "\n";
  }
  const auto tables = ReadTables({a, b});
  ASSERT_EQ(tables.size(), 2u);
  const ProblemTable& fp16 = tables[0];
  EXPECT_EQ(fp16.problem.dtype, "");
  EXPECT_EQ(fp16.problem.device, "NVIDIA H200");
  ASSERT_EQ(fp16.rows.size(), 3u);
  EXPECT_TRUE(fp16.rows[0].measurement.ok());
  EXPECT_DOUBLE_EQ(fp16.rows[0].measurement.ms, 2.0);  // The median of the repeats that ran.
  EXPECT_EQ(ToJson(fp16.rows[2].config), R"({"BLOCK":32})");
  EXPECT_FALSE(fp16.rows[2].measurement.ok());
  EXPECT_DOUBLE_EQ(fp16.oracle_ms(), 0.5);
  EXPECT_EQ(tables[1].problem.dtype, "bf16");
  EXPECT_EQ(tables[1].rows.size(), 1u);
}

TEST(TableTest, ASpaceRowGivesItsProblemTheConstraintsItWasRecordedUnder) {
  const std::string text =
      R"({"type":"space","family":"f","shape":{"n":1},"constraints":["B * W <= 64","W >= 1"]})"
      "\n"
      R"({"type":"measure","family":"f","shape":{"n":1},"config":{"B":2,"W":4},"status":"ok","ms":1.5})"
      "\n"
      R"({"type":"measure","family":"f","shape":{"n":2},"config":{"B":2,"W":4},"status":"ok","ms":2.5})"
      "\n";
  std::istringstream in(text);
  const auto tables = ParseTables(in, "space.jsonl");
  ASSERT_EQ(tables.size(), 2u);
  EXPECT_EQ(tables[0].constraints, (std::vector<std::string>{"B * W <= 64", "W >= 1"}));
  EXPECT_TRUE(tables[1].constraints.empty());  // Another problem: its space is not known.
  std::stringstream written;
  WriteTable(written, tables[0]);
  EXPECT_NE(written.str().find(R"("type":"space")"), std::string::npos) << written.str();
  const auto again = ParseTables(written, "written");
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].constraints, tables[0].constraints);

  ExpectError(R"({"type":"space","family":"f","shape":{"n":1},"constraints":"B <= 4"})",
              "bad.jsonl:1: 'constraints' should be a list of strings");
  ExpectError(R"({"type":"space","family":"f","shape":{"n":1},"constraints":[4]})",
              "bad.jsonl:1: 'constraints' should be a list of strings; 4 is not one");
}

TEST(TableTest, MissingFileSaysSo) {
  EXPECT_THROW(ReadTables({"/nonexistent/table.jsonl"}), TableError);
}

}  // namespace
}  // namespace dr_kernel
