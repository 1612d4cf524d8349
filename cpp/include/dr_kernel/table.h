// Recorded tuning tables: the JSON-lines format of ../shared/data (one reference row per problem,
// one measure row per problem and config). See docs/data-format.md.
#ifndef DR_KERNEL_TABLE_H_
#define DR_KERNEL_TABLE_H_

#include <istream>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "dr_kernel/problem.h"

namespace dr_kernel {

// A malformed data file. The message names the file and line, what is wrong, and what to do.
class TableError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One recorded evaluation: a config of the problem and what measuring it gave.
struct TableRow {
  NamedValues config;
  Measurement measurement;
  double t = kNaN;  // Seconds since the recording started, when recorded.
  // The config measured earlier whose binary this one compiled to (its result a copy of that
  // one's), when the recording says so ("same_binary_as"); empty otherwise.
  NamedValues same_binary_as;
};

// Every recorded row of one problem.
struct ProblemTable {
  Problem problem;
  std::optional<Reference> reference;
  std::vector<TableRow> rows;  // In file order.
  std::string source;          // The file the problem came from.
  // The constraints of the space the table was recorded from (its "space" row), when known: a
  // config that breaks one is not a config of the problem, as in a tuning session of that space,
  // where a config the table merely lacks is one the recording did not measure.
  std::vector<std::string> constraints;

  // The fastest ok time (the oracle); +inf when no row is ok.
  double oracle_ms() const;
};

// The counters of `table`'s probe (the first row whose counters say "probe": `probe`), or nullptr.
const NamedValues* ProbeCounters(const ProblemTable& table, double probe = 0.5);
// The table's problem with its probe's counters (Problem::probe_counters), when the table has them:
// the problem as a session that profiled the probe before tuning knows it.
Problem ProfiledProblem(const ProblemTable& table, double probe = 0.5);

// Reads JSON-lines text; `name` is used in error messages. Rows are grouped into problems by family,
// shape, dtype and device (a row that names no device belongs with one that does), in order of
// first appearance, with one row per config: a config recorded more than once is one measurement
// repeated (the median of the repeats that ran; the first failure if none ran). Blank lines are
// skipped; anything else that is not a well-formed reference, space or measure row throws TableError.
std::vector<ProblemTable> ParseTables(std::istream& in, const std::string& name);
// Reads the files in order; one problem recorded in several files is one table, as above.
std::vector<ProblemTable> ReadTables(const std::vector<std::string>& paths);

// The JSON-lines rows of one problem (its reference first, then its space's constraints, when known).
std::string ReferenceRowJson(const Problem& problem, const Reference& reference);
std::string SpaceRowJson(const Problem& problem, const std::vector<std::string>& constraints);
std::string MeasureRowJson(const Problem& problem, const TableRow& row);
void WriteTable(std::ostream& out, const ProblemTable& table);

}  // namespace dr_kernel

#endif  // DR_KERNEL_TABLE_H_
