// The results store: every measurement ever taken, the reference time of each problem, and the
// winning config of each tuned kernel, in one SQLite database file that several processes may write
// at once. It imports and exports the recorded-table format of table.h. The schema (tables problems,
// reference, measurements and winners) is written out, with its units, in cpp/src/store/store.cc.
#ifndef DR_KERNEL_STORE_H_
#define DR_KERNEL_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "dr_kernel/problem.h"
#include "dr_kernel/table.h"
#include "dr_kernel/value.h"

struct sqlite3;

namespace dr_kernel {

// A database a user gave that cannot be used: a path that cannot be written, a file that is not a
// dr_kernel results database, one written by a newer dr_kernel, a damaged file, or one locked by
// another process for too long. The message names the file, what is wrong and what to do.
class StoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The best config found for one cache key (a hash of kernel source, Triton version, device and
// problem), which the Python decorator looks up before tuning.
struct Winner {
  NamedValues config;
  double ms = kNaN;         // Its median time.
  int64_t evaluations = 0;  // Evaluations the tuning session spent to find it.
  double created = kNaN;    // Unix seconds when it was stored; PutWinner fills it in when NaN.
  std::string label;        // What a person reads: the kernel's name and its key's values.
  int64_t budget = 0;       // The evaluations the session that found it was allowed (0: not known).
  int64_t launches = 0;     // Launches of it counted so far (AddLaunches), over every process.
};

// A results database. Opening a path that does not exist creates it. The database runs in WAL mode
// with synchronous=NORMAL: readers never wait for writers, and each write is one short
// BEGIN IMMEDIATE transaction that waits (then retries) while another process writes, so processes
// writing at once lose nothing. A Store is one connection: use it from one thread at a time, and open
// a new one in a child process rather than using the parent's after fork().
class Store {
 public:
  // The schema this build writes (PRAGMA user_version); a database of a newer one is refused.
  // Version 2 added measurements.occupancy, version 3 winners.label, budget and launches, version 4
  // measurements.counters; an older file gains the columns when opened for writing.
  static constexpr int kSchemaVersion = 4;
  // Marks the file as a dr_kernel results database (PRAGMA application_id, "drkS").
  static constexpr int32_t kApplicationId = 0x64726b53;

  // Opens or creates the database at `path`; throws StoreError when that is impossible. With
  // `read_only` it opens an existing database only to read it (a file or folder this process cannot
  // write is fine), creates and changes nothing, and throws when the file is missing or empty.
  explicit Store(const std::string& path, bool read_only = false);
  ~Store();
  Store(Store&&) noexcept;
  Store& operator=(Store&&) noexcept;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  const std::string& path() const { return path_; }

  // Adds the problem if the store lacks it (problems are equal when their Key()s are) and returns its
  // id in the store.
  int64_t AddProblem(const Problem& problem);
  // Sets (or replaces) the reference time of a problem, adding the problem if needed.
  void SetReference(const Problem& problem, const Reference& reference);
  // Adds one measurement of a config of the problem and returns its row's id. `source` says where it
  // came from: "gpu", "replay", a file name. Every call adds a row, even for a config measured before.
  int64_t Add(const Problem& problem, const TableRow& row, const std::string& source);
  // Adds measurements of one problem in one transaction: all of them or, on an error, none. Returns
  // their rows' ids, in order.
  std::vector<int64_t> AddBatch(const Problem& problem, const std::vector<TableRow>& rows,
                                const std::string& source);
  // Corrects rows added before (by their ids) whose correctness check was made against a reference
  // later found wrong: with no reference given, the first config that runs is the reference, and when
  // most configs' results out-vote it the tuning is done again against theirs (issue 9). The rows of
  // `now_wrong` passed that false check: each `ok` one becomes `wrong`, `why` its error, its times and
  // relative error unknown (they were of a wrong result). The rows of `withdrawn` failed it: each
  // `wrong` one is deleted, since its verdict was false and a `wrong` row holds no time, so nothing
  // true of it is left. A row of another status is left as it is. One transaction: another process
  // sees every correction or none. Returns how many rows were changed or deleted.
  int64_t Rejudge(const std::vector<int64_t>& now_wrong, const std::vector<int64_t>& withdrawn,
                  const std::string& why);

  // Every problem in the store, in the order they were added.
  std::vector<Problem> Problems() const;
  // Every measurement of the problem in the order it was added; empty for a problem not in the store.
  std::vector<TableRow> Rows(const Problem& problem) const;
  // The reference of the problem, or nullopt when none was set.
  std::optional<Reference> GetReference(const Problem& problem) const;
  // The number of measurements in the store, and of one problem.
  int64_t Count() const;
  int64_t Count(const Problem& problem) const;

  // Adds recorded tables (their problems, references and rows) in one transaction and returns the
  // number of rows added. Rows are labelled `source`, or with their table's own source (its file)
  // when `source` is empty. A row the store holds already, field for field, is not added again:
  // importing one file twice stores its rows once.
  int64_t Import(const std::vector<ProblemTable>& tables, const std::string& source);
  // Every problem with its reference and rows, as recorded tables (one consistent snapshot, problems
  // and rows in the order they were added); each table's source is the database's path. Written with
  // WriteTable() and read back with ParseTables(), the rows equal the stored ones field by field.
  std::vector<ProblemTable> Export() const;

  // Stores the winner of a cache key, replacing any earlier one; the launches counted for the key
  // stay (winner.launches is ignored).
  void PutWinner(const std::string& key, const Winner& winner);
  // The winner of a cache key, or nullopt.
  std::optional<Winner> GetWinner(const std::string& key) const;
  // Adds `count` launches to the winners of the keys, in one transaction; a key without a winner is
  // skipped. Returns how many keys were counted.
  int64_t AddLaunches(const std::vector<std::pair<std::string, int64_t>>& counts);
  // The `n` winners launched most (ties: the most recently stored first), with their keys.
  std::vector<std::pair<std::string, Winner>> HottestWinners(int64_t n) const;

 private:
  // Closes a connection (sqlite3_close_v2).
  struct Closer {
    void operator()(sqlite3* db) const;
  };

  std::string path_;
  std::unique_ptr<sqlite3, Closer> db_;
};

}  // namespace dr_kernel

#endif  // DR_KERNEL_STORE_H_
