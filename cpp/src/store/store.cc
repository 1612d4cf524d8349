#include "dr_kernel/store.h"

#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <stdexcept>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "json_util.h"

namespace dr_kernel {

namespace {

// How long one statement waits for another process's write lock before SQLite reports SQLITE_BUSY.
constexpr int kBusyTimeoutMs = 5000;
// How often a BEGIN IMMEDIATE (or COMMIT) that still found the database busy is tried again; with the
// busy timeout above, a writer gives up only after another held the lock for half a minute or so.
constexpr int kBusyAttempts = 6;

// Schema version 1. Times of day are Unix seconds (datetime(created, 'unixepoch') shows them); kernel
// times are in ms; unknown numbers are NULL. Configs and shapes are JSON objects in their own order.
constexpr const char* kSchemaSql = R"sql(
CREATE TABLE IF NOT EXISTS problems (
  id INTEGER PRIMARY KEY,
  problem_key TEXT NOT NULL UNIQUE,  -- Problem::Key(): family, shape JSON, device, dtype.
  family TEXT NOT NULL,
  shape TEXT NOT NULL,
  device TEXT NOT NULL,
  dtype TEXT NOT NULL,
  created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS reference (
  problem_id INTEGER PRIMARY KEY REFERENCES problems(id),
  name TEXT NOT NULL,
  ms REAL,
  flops REAL,
  bytes REAL
);
CREATE TABLE IF NOT EXISTS measurements (
  id INTEGER PRIMARY KEY,
  problem_id INTEGER NOT NULL REFERENCES problems(id),
  config TEXT NOT NULL,
  status TEXT NOT NULL,  -- As in the recorded tables: ok, out_of_resources, compile_error, ...
  ms REAL,
  ms_p20 REAL,
  ms_p80 REAL,
  compile_s REAL,
  load_s REAL,
  relerr REAL,
  n_regs INTEGER,
  n_spills INTEGER,
  shared INTEGER,
  occupancy REAL,        -- Theoretical occupancy of the binary, 0..1 (static analysis).
  error TEXT,
  t REAL,                -- Seconds since its recording started (the recorded tables' 't').
  source TEXT NOT NULL,  -- "gpu", "replay", a file name.
  created REAL NOT NULL,
  counters TEXT          -- A JSON object of hardware counters of a profiled launch; NULL when none.
);
CREATE INDEX IF NOT EXISTS measurements_by_problem ON measurements(problem_id);
CREATE TABLE IF NOT EXISTS winners (
  cache_key TEXT PRIMARY KEY,
  config TEXT NOT NULL,
  ms REAL,
  evaluations INTEGER NOT NULL,
  created REAL NOT NULL,
  label TEXT,                            -- The kernel's name and its key's values, for people.
  budget INTEGER NOT NULL DEFAULT 0,     -- Evaluations its session was allowed; 0 when not known.
  launches INTEGER NOT NULL DEFAULT 0    -- Launches counted so far, over every process.
);
)sql";

// The measurement columns in the order ReadRow reads them and InsertRow binds them.
constexpr const char* kRowColumns =
    "config, status, ms, ms_p20, ms_p80, compile_s, load_s, relerr, n_regs, n_spills, shared, occupancy, error, t, "
    "counters";

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Throws the StoreError for SQLite result `code`, which happened while `doing` something to `path`.
[[noreturn]] void Fail(sqlite3* db, const std::string& path, int code, const std::string& doing) {
  const std::string detail = db ? sqlite3_errmsg(db) : sqlite3_errstr(code);
  const std::string what = " (" + detail + ", while " + doing + ")";
  switch (code & 0xff) {
    case SQLITE_NOTADB:
      throw StoreError(path + " is not a SQLite database" + what +
                       "; give the path of a dr_kernel results database, or a new file name to create one");
    case SQLITE_CORRUPT:
      throw StoreError(path + " is damaged" + what +
                       "; restore it from a copy, or move it aside and start a new database "
                       "('sqlite3 " +
                       path + " .recover' may save what is left)");
    case SQLITE_CANTOPEN:
      throw StoreError(path + " cannot be opened" + what +
                       "; give a file path in a directory you can write (a missing file is created)");
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_AUTH:
      throw StoreError(path + " cannot be written" + what +
                       "; check the permissions of the file and of its directory, or give another path");
    case SQLITE_FULL:
      throw StoreError(path + ": the disk is full" + what + "; free some space and run again");
    case SQLITE_IOERR:
      throw StoreError(path + ": the disk reported an error" + what +
                       "; check that the disk has space and that the file may grow (a quota or a file-size limit "
                       "stops writes as a full disk does), and that it is on a local file system");
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      throw StoreError(path + " stayed locked by another process" + what +
                       "; run again when it has finished writing, or find the process that keeps a "
                       "transaction open on it");
    default:
      throw StoreError(path + ": SQLite failed" + what +
                       "; this is likely a bug in dr_kernel: please report it with this message");
  }
}

// One prepared statement. Binding NaN or a negative count stores NULL ("unknown"), and reading NULL
// gives NaN or -1 back.
class Statement {
 public:
  Statement(sqlite3* db, const std::string& path, const std::string& sql, const char* doing)
      : db_(db), path_(path), doing_(doing) {
    const int rc = sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt_, nullptr);
    if (rc != SQLITE_OK) Fail(db_, path_, rc, doing_);
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  void Bind(int i, const std::string& text) {
    Check(sqlite3_bind_text(stmt_, i, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT));
  }
  // Binds NULL for an empty string.
  void BindOptional(int i, const std::string& text) {
    if (text.empty()) {
      Check(sqlite3_bind_null(stmt_, i));
    } else {
      Bind(i, text);
    }
  }
  void Bind(int i, double v) {
    Check(std::isnan(v) ? sqlite3_bind_null(stmt_, i) : sqlite3_bind_double(stmt_, i, v));
  }
  void Bind(int i, int64_t v) {
    Check(v < 0 ? sqlite3_bind_null(stmt_, i) : sqlite3_bind_int64(stmt_, i, v));
  }

  // Runs the statement to its next row: true when a row is ready, false when it is done.
  bool Step() {
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    Fail(db_, path_, rc, doing_);
  }
  // Runs a statement that returns no rows.
  void Run() {
    Step();
    Reset();
  }
  // Makes the statement ready to run again with new bindings.
  void Reset() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }

  bool IsNull(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
  double Double(int col) const { return IsNull(col) ? kNaN : sqlite3_column_double(stmt_, col); }
  int64_t Int(int col) const { return IsNull(col) ? -1 : sqlite3_column_int64(stmt_, col); }
  std::string Text(int col) const {
    const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
    return text ? std::string(text, sqlite3_column_bytes(stmt_, col)) : std::string();
  }

 private:
  void Check(int rc) const {
    if (rc != SQLITE_OK) Fail(db_, path_, rc, doing_);
  }

  sqlite3* db_;
  const std::string& path_;
  const char* doing_;
  sqlite3_stmt* stmt_ = nullptr;
};

void Exec(sqlite3* db, const std::string& path, const char* sql, const char* doing) {
  const int rc = sqlite3_exec(db, sql, nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) Fail(db, path, rc, doing);
}

// Runs `sql`, trying again while another process holds the database. The busy timeout already waits
// inside each try; the tries cover what it does not (SQLite skips the busy handler where waiting
// could deadlock, and during WAL recovery).
void ExecRetryingBusy(sqlite3* db, const std::string& path, const char* sql, const char* doing) {
  for (int attempt = 1;; ++attempt) {
    const int rc = sqlite3_exec(db, sql, nullptr, nullptr, nullptr);
    if (rc == SQLITE_OK) return;
    const int primary = rc & 0xff;
    if ((primary != SQLITE_BUSY && primary != SQLITE_LOCKED) || attempt == kBusyAttempts)
      Fail(db, path, rc, doing);
    std::this_thread::sleep_for(std::chrono::milliseconds(20 * attempt));
  }
}

// A transaction that rolls back unless committed. A write transaction starts with BEGIN IMMEDIATE, so
// it holds the write lock from the start and never fails half-way for a lock; keep it short, since
// every other writer waits for it.
class Transaction {
 public:
  enum class Kind { kRead, kWrite };

  Transaction(sqlite3* db, const std::string& path, Kind kind, const char* doing)
      : db_(db), path_(path), doing_(doing) {
    ExecRetryingBusy(db_, path_, kind == Kind::kWrite ? "BEGIN IMMEDIATE" : "BEGIN", doing_);
  }
  ~Transaction() {
    // SQLite itself rolls back after some errors (a full disk); then there is nothing to undo.
    if (!committed_ && !sqlite3_get_autocommit(db_)) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  void Commit() {
    ExecRetryingBusy(db_, path_, "COMMIT", doing_);
    committed_ = true;
  }

 private:
  sqlite3* db_;
  const std::string& path_;
  const char* doing_;
  bool committed_ = false;
};

// What the header of a database says it is.
struct Identity {
  int64_t application_id = 0;
  int64_t user_version = 0;
  int64_t tables = 0;  // Tables, indexes and views of any kind.
};

int64_t QueryInt(sqlite3* db, const std::string& path, const char* sql, const char* doing) {
  Statement s(db, path, sql, doing);
  if (!s.Step()) return 0;
  return s.Int(0);
}

// Reads the identity; call it inside a transaction, so that its three reads see one state.
Identity ReadIdentity(sqlite3* db, const std::string& path) {
  const char* doing = "reading what the file is";
  Identity id;
  id.application_id = QueryInt(db, path, "PRAGMA application_id", doing);
  id.user_version = QueryInt(db, path, "PRAGMA user_version", doing);
  id.tables = QueryInt(db, path, "SELECT count(*) FROM sqlite_master", doing);
  return id;
}

// Throws unless the database is a dr_kernel results database this build can read, or an empty one.
void CheckIdentity(const Identity& id, const std::string& path) {
  if (id.application_id == Store::kApplicationId) {
    if (id.user_version > Store::kSchemaVersion)
      throw StoreError(path + " was written by a newer dr_kernel (results schema version " +
                       std::to_string(id.user_version) + "; this build knows versions up to " +
                       std::to_string(Store::kSchemaVersion) +
                       "); upgrade dr_kernel, or give another file name");
    return;
  }
  if (id.application_id == 0 && id.user_version == 0 && id.tables == 0) return;  // A new, empty database.
  throw StoreError(path + " is a SQLite database, but not a dr_kernel results database (it holds " +
                   std::to_string(id.tables) +
                   " tables and indexes of another program); give another file name, "
                   "and dr_kernel creates its database there");
}

// The id of the problem in the store; when absent, -1 or (with `add`, inside a write transaction) the
// id of the row added for it.
int64_t ProblemId(sqlite3* db, const std::string& path, const Problem& problem, bool add) {
  const std::string key = problem.Key();
  {
    Statement find(db, path, "SELECT id FROM problems WHERE problem_key = ?", "looking up a problem");
    find.Bind(1, key);
    if (find.Step()) return find.Int(0);
  }
  if (!add) return -1;
  Statement insert(
      db, path,
      "INSERT INTO problems (problem_key, family, shape, device, dtype, created) VALUES (?, ?, ?, ?, ?, ?)",
      "adding a problem");
  insert.Bind(1, key);
  insert.Bind(2, problem.family);
  insert.Bind(3, ToJson(problem.shape));
  insert.Bind(4, problem.device);
  insert.Bind(5, problem.dtype);
  insert.Bind(6, NowSeconds());
  insert.Run();
  return sqlite3_last_insert_rowid(db);
}

void PutReference(sqlite3* db, const std::string& path, int64_t problem_id, const Reference& reference) {
  Statement put(db, path,
                "INSERT INTO reference (problem_id, name, ms, flops, bytes) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (problem_id) DO UPDATE SET name = excluded.name, ms = excluded.ms, "
                "flops = excluded.flops, bytes = excluded.bytes",
                "setting a reference");
  put.Bind(1, problem_id);
  put.Bind(2, reference.name);
  put.Bind(3, reference.ms);
  put.Bind(4, reference.flops);
  put.Bind(5, reference.bytes);
  put.Run();
}

// Adds the rows of one problem with one prepared statement, inside the caller's write transaction,
// and returns their ids in the order of `rows`.
std::vector<int64_t> InsertRows(sqlite3* db, const std::string& path, const Problem& problem, int64_t problem_id,
                                const std::vector<TableRow>& rows, const std::string& source) {
  Statement insert(db, path,
                   std::string("INSERT INTO measurements (problem_id, ") + kRowColumns +
                       ", source, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   "adding a measurement");
  const double now = NowSeconds();
  std::vector<int64_t> ids;
  ids.reserve(rows.size());
  for (const auto& row : rows) {
    if (row.config.empty())
      throw StoreError(path + ": a measurement of '" + problem.Label() +
                       "' has an empty config; give every measurement the config it measured");
    const Measurement& m = row.measurement;
    insert.Bind(1, problem_id);
    insert.Bind(2, ToJson(row.config));
    insert.Bind(3, std::string(ToString(m.status)));
    insert.Bind(4, m.ms);
    insert.Bind(5, m.ms_p20);
    insert.Bind(6, m.ms_p80);
    insert.Bind(7, m.compile_s);
    insert.Bind(8, m.load_s);
    insert.Bind(9, m.relerr);
    insert.Bind(10, static_cast<int64_t>(m.n_regs));
    insert.Bind(11, static_cast<int64_t>(m.n_spills));
    insert.Bind(12, m.shared);
    insert.Bind(13, m.occupancy);
    insert.BindOptional(14, m.error);
    insert.Bind(15, row.t);
    insert.BindOptional(16, m.counters.empty() ? std::string() : ToJson(m.counters));
    insert.Bind(17, source);
    insert.Bind(18, now);
    insert.Run();
    ids.push_back(sqlite3_last_insert_rowid(db));
  }
  return ids;
}

NamedValues ParseStoredJson(const std::string& path, const std::string& text, const std::string& what) {
  try {
    return ParseNamedValues(text);
  } catch (const std::invalid_argument& e) {
    throw StoreError(path + " holds a malformed " + what + ": " + e.what() +
                     "; the file is damaged or was edited by hand: fix or delete that row");
  }
}

// Reads the kRowColumns of the statement's current row, starting at column `first`.
TableRow ReadRow(const Statement& s, int first, const std::string& path) {
  TableRow row;
  row.config = ParseStoredJson(path, s.Text(first), "config");
  const std::string status = s.Text(first + 1);
  const auto parsed = ParseStatus(status);
  if (!parsed)
    throw StoreError(
        path + " holds a measurement with the unknown status '" + status +
        "'; it was written by a newer dr_kernel or edited by hand: upgrade dr_kernel or fix the row");
  Measurement& m = row.measurement;
  m.status = *parsed;
  m.ms = s.Double(first + 2);
  m.ms_p20 = s.Double(first + 3);
  m.ms_p80 = s.Double(first + 4);
  m.compile_s = s.Double(first + 5);
  m.load_s = s.Double(first + 6);
  m.relerr = s.Double(first + 7);
  m.n_regs = static_cast<int>(s.Int(first + 8));
  m.n_spills = static_cast<int>(s.Int(first + 9));
  m.shared = s.Int(first + 10);
  m.occupancy = s.Double(first + 11);
  m.error = s.Text(first + 12);
  row.t = s.Double(first + 13);
  if (!s.IsNull(first + 14)) m.counters = ParseStoredJson(path, s.Text(first + 14), "counters object");
  return row;
}

Problem ReadProblem(const Statement& s, int first, const std::string& path) {
  Problem p;
  p.family = s.Text(first);
  p.shape = ParseStoredJson(path, s.Text(first + 1), "problem shape");
  p.device = s.Text(first + 2);
  p.dtype = s.Text(first + 3);
  return p;
}

Reference ReadReference(const Statement& s, int first) {
  Reference r;
  r.name = s.Text(first);
  r.ms = s.Double(first + 1);
  r.flops = s.Double(first + 2);
  r.bytes = s.Double(first + 3);
  return r;
}

}  // namespace

void Store::Closer::operator()(sqlite3* db) const { sqlite3_close_v2(db); }

Store::Store(const std::string& path, bool read_only) : path_(path) {
  if (path.empty())
    throw StoreError("the results database path is empty; give a file name such as dr_kernel.db");
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw StoreError(path + " is a directory; give the path of a database file, such as " +
                     (std::filesystem::path(path) / "dr_kernel.db").string());
  if (read_only && !std::filesystem::exists(path, ec))
    throw StoreError(path + " does not exist, so it holds no results; check the path, or tune or sweep "
                     "first to create it");

  sqlite3* db = nullptr;
  const int flags = read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
  const int rc = sqlite3_open_v2(path.c_str(), &db, flags, nullptr);
  db_.reset(db);  // A failed open still returns a handle to close.
  if (rc != SQLITE_OK) Fail(db, path_, rc, "opening the results database");
  sqlite3_busy_timeout(db, kBusyTimeoutMs);
  if (!read_only && sqlite3_db_readonly(db, "main") == 1)
    Fail(nullptr, path_, SQLITE_READONLY, "opening the results database");

  // Look before changing anything, so that another program's database is left as it was. One read
  // transaction, so that a database another process creates meanwhile is seen whole or not at all.
  Identity id;
  const auto read_identity = [&] {
    Transaction tx(db_.get(), path_, Transaction::Kind::kRead, "reading what the file is");
    id = ReadIdentity(db_.get(), path_);
    tx.Commit();
  };
  if (!read_only) {
    read_identity();
  } else {
    try {
      read_identity();
    } catch (const StoreError&) {
      // A WAL database in a folder this process cannot write: SQLite cannot make its shared-memory
      // index beside it. Nobody can write there either, so the file is read as immutable.
      std::string uri = "file:";
      for (const char c : path) {
        if (c == '%' || c == '?' || c == '#') {
          static const char kHex[] = "0123456789ABCDEF";
          uri += '%';
          uri += kHex[static_cast<unsigned char>(c) >> 4];
          uri += kHex[c & 0xf];
        } else {
          uri += c;
        }
      }
      uri += "?immutable=1";
      sqlite3* again = nullptr;
      const int rc2 = sqlite3_open_v2(uri.c_str(), &again, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, nullptr);
      db_.reset(again);
      if (rc2 != SQLITE_OK) Fail(again, path_, rc2, "opening the results database");
      read_identity();
    }
  }
  CheckIdentity(id, path_);
  if (read_only) {
    if (id.user_version == 0)
      throw StoreError(path + " is empty, so it holds no results; check the path, or tune or sweep first");
    if (id.user_version < kSchemaVersion)
      throw StoreError(path + " is a results database of an older schema (version " +
                       std::to_string(id.user_version) + "); run a command that writes to it once (such as " +
                       "dr-kernel db import) to upgrade it");
    return;
  }
  db = db_.get();
  ExecRetryingBusy(db, path_, "PRAGMA journal_mode = WAL", "switching to WAL journal mode");
  Exec(db, path_, "PRAGMA synchronous = NORMAL", "setting synchronous = NORMAL");
  Exec(db, path_, "PRAGMA foreign_keys = ON", "enabling foreign keys");

  if (id.user_version < kSchemaVersion) {
    // Several processes may create the same new file at once: look again under the write lock.
    Transaction tx(db, path_, Transaction::Kind::kWrite, "creating the results database");
    id = ReadIdentity(db, path_);
    CheckIdentity(id, path_);
    if (id.user_version == 1) {
      // Version 1 lacked the occupancy of a measurement: its rows keep NULL there (unknown).
      Exec(db, path_, "ALTER TABLE measurements ADD COLUMN occupancy REAL", "upgrading the results database");
    }
    if (id.user_version >= 1 && id.user_version < 3) {
      // Versions 1 and 2 lacked the winners' labels, budgets and launch counts.
      Exec(db, path_,
           "ALTER TABLE winners ADD COLUMN label TEXT; "
           "ALTER TABLE winners ADD COLUMN budget INTEGER NOT NULL DEFAULT 0; "
           "ALTER TABLE winners ADD COLUMN launches INTEGER NOT NULL DEFAULT 0",
           "upgrading the results database");
    }
    if (id.user_version >= 1 && id.user_version < 4) {
      // Versions 1 to 3 lacked the hardware counters of a measurement: NULL (none) in their rows.
      Exec(db, path_, "ALTER TABLE measurements ADD COLUMN counters TEXT", "upgrading the results database");
    }
    if (id.user_version < kSchemaVersion) {
      Exec(db, path_, kSchemaSql, "creating the results database");
      Exec(db, path_, ("PRAGMA application_id = " + std::to_string(kApplicationId)).c_str(),
           "creating the results database");
      Exec(db, path_, ("PRAGMA user_version = " + std::to_string(kSchemaVersion)).c_str(),
           "creating the results database");
    }
    tx.Commit();
  }
}

Store::~Store() = default;
Store::Store(Store&&) noexcept = default;
Store& Store::operator=(Store&&) noexcept = default;

int64_t Store::AddProblem(const Problem& problem) {
  Transaction tx(db_.get(), path_, Transaction::Kind::kWrite, "adding a problem");
  const int64_t id = ProblemId(db_.get(), path_, problem, /*add=*/true);
  tx.Commit();
  return id;
}

void Store::SetReference(const Problem& problem, const Reference& reference) {
  Transaction tx(db_.get(), path_, Transaction::Kind::kWrite, "setting a reference");
  PutReference(db_.get(), path_, ProblemId(db_.get(), path_, problem, /*add=*/true), reference);
  tx.Commit();
}

int64_t Store::Add(const Problem& problem, const TableRow& row, const std::string& source) {
  return AddBatch(problem, {row}, source).front();
}

std::vector<int64_t> Store::AddBatch(const Problem& problem, const std::vector<TableRow>& rows,
                                     const std::string& source) {
  Transaction tx(db_.get(), path_, Transaction::Kind::kWrite, "adding measurements");
  auto ids = InsertRows(db_.get(), path_, problem, ProblemId(db_.get(), path_, problem, /*add=*/true), rows, source);
  tx.Commit();
  return ids;
}

int64_t Store::Rejudge(const std::vector<int64_t>& now_wrong, const std::vector<int64_t>& withdrawn,
                       const std::string& why) {
  if (now_wrong.empty() && withdrawn.empty()) return 0;
  Transaction tx(db_.get(), path_, Transaction::Kind::kWrite, "correcting measurements");
  int64_t changed = 0;
  {
    Statement wrong(db_.get(), path_,
                    "UPDATE measurements SET status = 'wrong', ms = NULL, ms_p20 = NULL, ms_p80 = NULL, "
                    "relerr = NULL, error = ? WHERE id = ? AND status = 'ok'",
                    "correcting measurements");
    for (const int64_t id : now_wrong) {
      wrong.BindOptional(1, why);
      wrong.Bind(2, id);
      wrong.Run();
      changed += sqlite3_changes(db_.get());
    }
  }
  {
    Statement drop(db_.get(), path_, "DELETE FROM measurements WHERE id = ? AND status = 'wrong'",
                   "correcting measurements");
    for (const int64_t id : withdrawn) {
      drop.Bind(1, id);
      drop.Run();
      changed += sqlite3_changes(db_.get());
    }
  }
  tx.Commit();
  return changed;
}

std::vector<Problem> Store::Problems() const {
  Statement s(db_.get(), path_, "SELECT family, shape, device, dtype FROM problems ORDER BY id",
              "reading problems");
  std::vector<Problem> out;
  while (s.Step()) out.push_back(ReadProblem(s, 0, path_));
  return out;
}

std::vector<TableRow> Store::Rows(const Problem& problem) const {
  Statement s(
      db_.get(), path_,
      std::string("SELECT ") + kRowColumns +
          " FROM measurements WHERE problem_id = (SELECT id FROM problems WHERE problem_key = ?) ORDER BY id",
      "reading measurements");
  s.Bind(1, problem.Key());
  std::vector<TableRow> out;
  while (s.Step()) out.push_back(ReadRow(s, 0, path_));
  return out;
}

std::optional<Reference> Store::GetReference(const Problem& problem) const {
  Statement s(db_.get(), path_,
              "SELECT r.name, r.ms, r.flops, r.bytes FROM reference r JOIN problems p ON p.id = r.problem_id "
              "WHERE p.problem_key = ?",
              "reading a reference");
  s.Bind(1, problem.Key());
  if (!s.Step()) return std::nullopt;
  return ReadReference(s, 0);
}

int64_t Store::Count() const {
  return QueryInt(db_.get(), path_, "SELECT count(*) FROM measurements", "counting measurements");
}

int64_t Store::Count(const Problem& problem) const {
  Statement s(db_.get(), path_,
              "SELECT count(*) FROM measurements WHERE problem_id = "
              "(SELECT id FROM problems WHERE problem_key = ?)",
              "counting measurements");
  s.Bind(1, problem.Key());
  return s.Step() ? s.Int(0) : 0;
}

int64_t Store::Import(const std::vector<ProblemTable>& tables, const std::string& source) {
  Transaction tx(db_.get(), path_, Transaction::Kind::kWrite, "importing recorded tables");
  int64_t added = 0;
  for (const auto& table : tables) {
    const int64_t id = ProblemId(db_.get(), path_, table.problem, /*add=*/true);
    if (table.reference) PutReference(db_.get(), path_, id, *table.reference);
    // A row the store holds already (the same file imported twice) is not stored again.
    std::unordered_set<std::string> stored;
    {
      Statement held(db_.get(), path_, std::string("SELECT ") + kRowColumns + " FROM measurements WHERE problem_id = ?",
                     "reading the stored measurements");
      held.Bind(1, id);
      while (held.Step()) stored.insert(MeasureRowJson(table.problem, ReadRow(held, 0, path_)));
    }
    std::vector<TableRow> fresh;
    for (const auto& row : table.rows)
      if (stored.insert(MeasureRowJson(table.problem, row)).second) fresh.push_back(row);
    InsertRows(db_.get(), path_, table.problem, id, fresh, source.empty() ? table.source : source);
    added += static_cast<int64_t>(fresh.size());
  }
  tx.Commit();
  return added;
}

std::vector<ProblemTable> Store::Export() const {
  // One read transaction, so that rows another process adds meanwhile are either all in or all out.
  Transaction tx(db_.get(), path_, Transaction::Kind::kRead, "exporting");
  std::vector<ProblemTable> tables;
  std::unordered_map<int64_t, size_t> index;  // Problem id -> position in tables.
  {
    Statement s(
        db_.get(), path_,
        "SELECT p.id, p.family, p.shape, p.device, p.dtype, r.problem_id, r.name, r.ms, r.flops, r.bytes "
        "FROM problems p LEFT JOIN reference r ON r.problem_id = p.id ORDER BY p.id",
        "exporting problems");
    while (s.Step()) {
      index.emplace(s.Int(0), tables.size());
      ProblemTable& table = tables.emplace_back();
      table.problem = ReadProblem(s, 1, path_);
      if (!s.IsNull(5)) table.reference = ReadReference(s, 6);
      table.source = path_;
    }
  }
  Statement s(db_.get(), path_,
              std::string("SELECT problem_id, ") + kRowColumns + " FROM measurements ORDER BY problem_id, id",
              "exporting measurements");
  while (s.Step()) {
    const auto it = index.find(s.Int(0));
    if (it == index.end())
      throw StoreError(path_ + " holds measurements of problem " + std::to_string(s.Int(0)) +
                       ", which it does not list; the file is damaged: restore it from a copy");
    tables[it->second].rows.push_back(ReadRow(s, 1, path_));
  }
  tx.Commit();
  return tables;
}

void Store::PutWinner(const std::string& key, const Winner& winner) {
  Transaction tx(db_.get(), path_, Transaction::Kind::kWrite, "storing a winner");
  Statement put(db_.get(), path_,
                "INSERT INTO winners (cache_key, config, ms, evaluations, created, label, budget) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (cache_key) DO UPDATE SET config = excluded.config, ms = excluded.ms, "
                "evaluations = excluded.evaluations, created = excluded.created, label = excluded.label, "
                "budget = excluded.budget",
                "storing a winner");
  put.Bind(1, key);
  put.Bind(2, ToJson(winner.config));
  put.Bind(3, winner.ms);
  put.Bind(4, std::max<int64_t>(winner.evaluations, 0));
  put.Bind(5, std::isnan(winner.created) ? NowSeconds() : winner.created);
  put.BindOptional(6, winner.label);
  put.Bind(7, std::max<int64_t>(winner.budget, 0));
  put.Run();
  tx.Commit();
}

namespace {

constexpr const char* kWinnerColumns = "config, ms, evaluations, created, label, budget, launches";

Winner ReadWinner(const Statement& s, int first, const std::string& path) {
  Winner w;
  w.config = ParseStoredJson(path, s.Text(first), "winner config");
  w.ms = s.Double(first + 1);
  w.evaluations = s.Int(first + 2);
  w.created = s.Double(first + 3);
  w.label = s.IsNull(first + 4) ? "" : s.Text(first + 4);
  w.budget = std::max<int64_t>(0, s.Int(first + 5));
  w.launches = std::max<int64_t>(0, s.Int(first + 6));
  return w;
}

}  // namespace

std::optional<Winner> Store::GetWinner(const std::string& key) const {
  Statement s(db_.get(), path_, std::string("SELECT ") + kWinnerColumns + " FROM winners WHERE cache_key = ?",
              "reading a winner");
  s.Bind(1, key);
  if (!s.Step()) return std::nullopt;
  return ReadWinner(s, 0, path_);
}

int64_t Store::AddLaunches(const std::vector<std::pair<std::string, int64_t>>& counts) {
  if (counts.empty()) return 0;
  Transaction tx(db_.get(), path_, Transaction::Kind::kWrite, "counting launches");
  Statement add(db_.get(), path_, "UPDATE winners SET launches = launches + ? WHERE cache_key = ?",
                "counting launches");
  int64_t counted = 0;
  for (const auto& [key, count] : counts) {
    if (count <= 0) continue;
    add.Bind(1, count);
    add.Bind(2, key);
    add.Run();
    counted += sqlite3_changes(db_.get());
  }
  tx.Commit();
  return counted;
}

std::vector<std::pair<std::string, Winner>> Store::HottestWinners(int64_t n) const {
  Statement s(db_.get(), path_,
              std::string("SELECT cache_key, ") + kWinnerColumns +
                  " FROM winners ORDER BY launches DESC, created DESC LIMIT ?",
              "reading the winners");
  s.Bind(1, std::max<int64_t>(0, n));
  std::vector<std::pair<std::string, Winner>> out;
  while (s.Step()) out.emplace_back(s.Text(0), ReadWinner(s, 1, path_));
  return out;
}

}  // namespace dr_kernel
