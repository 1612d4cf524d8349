#include "dr_kernel/table.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "json_util.h"

namespace dr_kernel {

// Ordered, so that shapes and configs keep the order the file gives them (as problem.h promises).
using json = OrderedJson;

double ProblemTable::oracle_ms() const {
  double best = kInf;
  for (const auto& row : rows)
    if (row.measurement.ok()) best = std::min(best, row.measurement.ms);
  return best;
}

const NamedValues* ProbeCounters(const ProblemTable& table, double probe) {
  for (const auto& row : table.rows) {
    const Value* p = Find(row.measurement.counters, "probe");
    if (p && !std::holds_alternative<std::string>(*p) && std::abs(ToDouble(*p) - probe) < 1e-9)
      return &row.measurement.counters;
  }
  return nullptr;
}

Problem ProfiledProblem(const ProblemTable& table, double probe) {
  Problem problem = table.problem;
  if (const NamedValues* counters = ProbeCounters(table, probe)) problem.probe_counters = *counters;
  return problem;
}

namespace {

class LineReader {
 public:
  LineReader(const std::string& name, size_t line) : where_(name + ":" + std::to_string(line)) {}

  [[noreturn]] void Fail(const std::string& what) const {
    throw TableError(where_ + ": " + Printable(what) +
                     "; fix or delete this line (the format is described in docs/data-format.md)");
  }

  // Control characters of the line (a NUL in a key) escaped: a message crosses into Python as a
  // C string, which a NUL would cut before the line's fix.
  static std::string Printable(const std::string& text) {
    std::string out;
    for (const unsigned char c : text) {
      if (c >= 0x20 && c != 0x7f) {
        out += static_cast<char>(c);
      } else {
        static const char* kHex = "0123456789abcdef";
        out += "\\u00";
        out += kHex[c >> 4];
        out += kHex[c & 15];
      }
    }
    return out;
  }

  const json& Field(const json& row, const char* key) const {
    const auto it = row.find(key);
    if (it == row.end()) Fail(std::string("the row has no '") + key + "' field");
    return *it;
  }

  std::string String(const json& row, const char* key) const {
    const json& v = Field(row, key);
    if (!v.is_string()) Fail(std::string("'") + key + "' should be a string, not " + v.dump());
    return v.get<std::string>();
  }

  // An optional number: NaN when absent or null.
  double Number(const json& row, const char* key) const {
    const auto it = row.find(key);
    if (it == row.end() || it->is_null()) return kNaN;
    if (!it->is_number()) Fail(std::string("'") + key + "' should be a number, not " + it->dump());
    return it->get<double>();
  }

  int64_t Integer(const json& row, const char* key) const {
    const double v = Number(row, key);
    if (std::isnan(v)) return -1;
    if (v != std::floor(v)) Fail(std::string("'") + key + "' should be a whole number");
    return static_cast<int64_t>(v);
  }

  NamedValues Object(const json& row, const char* key) const {
    const json& v = Field(row, key);
    if (!v.is_object()) Fail(std::string("'") + key + "' should be an object, not " + v.dump());
    NamedValues out;
    for (auto it = v.begin(); it != v.end(); ++it) out.emplace_back(it.key(), ToValue(key, it.key(), it.value()));
    return out;
  }

 private:
  Value ToValue(const char* field, const std::string& name, const json& v) const {
    if (auto value = ValueOfJson(v)) return *std::move(value);
    Fail(std::string("'") + field + "." + name + "' should be a number, bool or string, not " + v.dump());
  }

  std::string where_;
};

}  // namespace

namespace {

// Whether two rows' problems are one: the same family, shape and dtype, and the same device where
// both name one (a row without a device belongs to the problem of its file that has one).
bool SameProblem(const Problem& a, const Problem& b) {
  return a.family == b.family && a.dtype == b.dtype && ToJson(a.shape) == ToJson(b.shape) &&
         (a.device.empty() || b.device.empty() || a.device == b.device);
}

// The table of `problem` in `tables`, added (with `source`) when there is none.
ProblemTable& TableFor(std::vector<ProblemTable>& tables, const Problem& problem, const std::string& source) {
  for (auto& t : tables) {
    if (!SameProblem(t.problem, problem)) continue;
    if (t.problem.device.empty()) t.problem.device = problem.device;
    return t;
  }
  tables.emplace_back();
  tables.back().problem = problem;
  tables.back().source = source;
  return tables.back();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One row per config: rows of a config recorded more than once are repeats of one measurement.
// If any repeat ran, the config ran: its times are the medians over the repeats that ran (a
// failure among them was the machine's, not the config's); if none ran, the first failure stands.
void CombineRepeats(ProblemTable& table) {
  std::vector<TableRow> rows;
  std::map<std::string, std::vector<size_t>> repeats;  // Config JSON -> positions in table.rows.
  std::vector<std::string> order;
  for (size_t i = 0; i < table.rows.size(); ++i) {
    auto [it, inserted] = repeats.emplace(ToJson(table.rows[i].config), std::vector<size_t>{});
    if (inserted) order.push_back(it->first);
    it->second.push_back(i);
  }
  if (order.size() == table.rows.size()) return;
  for (const auto& key : order) {
    const auto& positions = repeats[key];
    std::vector<const TableRow*> ran;
    for (size_t i : positions)
      if (table.rows[i].measurement.ok()) ran.push_back(&table.rows[i]);
    if (ran.empty()) {
      rows.push_back(table.rows[positions.front()]);
      continue;
    }
    TableRow row = *ran.front();
    for (const TableRow* r : ran)  // A profiled repeat's counters stand for the config.
      if (row.measurement.counters.empty()) row.measurement.counters = r->measurement.counters;
    auto median_of = [&](double Measurement::*field) {
      std::vector<double> v;
      for (const TableRow* r : ran)
        if (!std::isnan(r->measurement.*field)) v.push_back(r->measurement.*field);
      return v.empty() ? kNaN : Median(v);
    };
    row.measurement.ms = median_of(&Measurement::ms);
    row.measurement.ms_p20 = median_of(&Measurement::ms_p20);
    row.measurement.ms_p80 = median_of(&Measurement::ms_p80);
    rows.push_back(std::move(row));
  }
  table.rows = std::move(rows);
}

}  // namespace

std::vector<ProblemTable> ParseTables(std::istream& in, const std::string& name) {
  std::vector<ProblemTable> tables;
  auto table_for = [&](const json& row, const LineReader& r) -> ProblemTable& {
    Problem problem;
    problem.family = r.String(row, "family");
    problem.shape = r.Object(row, "shape");
    if (row.contains("dtype")) problem.dtype = r.String(row, "dtype");
    if (row.contains("device")) problem.device = r.String(row, "device");
    return TableFor(tables, problem, name);
  };

  std::string text;
  size_t line_no = 0;
  while (std::getline(in, text)) {
    ++line_no;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const LineReader r(name, line_no);
    json row;
    try {
      row = json::parse(text);
    } catch (const json::parse_error& e) {
      r.Fail("not valid JSON (" + std::string(e.what()) + ")");
    }
    if (!row.is_object()) r.Fail("a row should be a JSON object");
    const std::string type = r.String(row, "type");
    ProblemTable& table = table_for(row, r);

    if (type == "reference") {
      Reference ref;
      ref.name = row.contains("ref") ? r.String(row, "ref") : "";
      ref.ms = r.Number(row, "ms");
      ref.flops = r.Number(row, "flops");
      ref.bytes = r.Number(row, "bytes");
      table.reference = ref;
    } else if (type == "measure") {
      TableRow out;
      out.config = r.Object(row, "config");
      if (out.config.empty()) r.Fail("'config' is empty");
      const std::string status_text = r.String(row, "status");
      const auto status = ParseStatus(status_text);
      if (!status) r.Fail("unknown status '" + status_text + "'");
      Measurement& m = out.measurement;
      m.status = *status;
      m.ms = r.Number(row, "ms");
      m.ms_p20 = r.Number(row, "ms_p20");
      m.ms_p80 = r.Number(row, "ms_p80");
      m.compile_s = r.Number(row, "compile_s");
      m.load_s = r.Number(row, "load_s");
      m.relerr = r.Number(row, "relerr");
      m.n_regs = static_cast<int>(r.Integer(row, "n_regs"));
      m.n_spills = static_cast<int>(r.Integer(row, "n_spills"));
      m.shared = r.Integer(row, "shared");
      m.occupancy = r.Number(row, "occupancy");
      if (row.contains("error") && !row["error"].is_null()) m.error = r.String(row, "error");
      if (row.contains("counters") && !row["counters"].is_null()) m.counters = r.Object(row, "counters");
      if (m.ok() && !(m.ms > 0)) r.Fail("an 'ok' row needs a positive 'ms'");
      out.t = r.Number(row, "t");
      if (row.contains("same_binary_as") && !row["same_binary_as"].is_null())
        out.same_binary_as = r.Object(row, "same_binary_as");
      table.rows.push_back(std::move(out));
    } else if (type == "space") {
      const json& list = r.Field(row, "constraints");
      if (!list.is_array()) r.Fail("'constraints' should be a list of strings, not " + list.dump());
      std::vector<std::string> constraints;
      for (const auto& c : list) {
        if (!c.is_string()) r.Fail("'constraints' should be a list of strings; " + c.dump() + " is not one");
        constraints.push_back(c.get<std::string>());
      }
      table.constraints = std::move(constraints);
    } else {
      r.Fail("unknown row type '" + type + "' (expected 'reference', 'space' or 'measure')");
    }
  }
  for (auto& t : tables) CombineRepeats(t);
  return tables;
}

std::vector<ProblemTable> ReadTables(const std::vector<std::string>& paths) {
  std::vector<ProblemTable> all;
  for (const auto& path : paths) {
    std::ifstream in(path);
    if (!in) throw TableError(path + ": cannot be opened; check the path (the bundled tables are in dr_kernel/data)");
    for (auto& t : ParseTables(in, path)) {
      ProblemTable& into = TableFor(all, t.problem, t.source);
      if (into.rows.empty() && !into.reference) {
        into = std::move(t);  // The first file that has the problem.
        continue;
      }
      if (!into.reference) into.reference = t.reference;
      if (into.constraints.empty()) into.constraints = std::move(t.constraints);
      for (auto& row : t.rows) into.rows.push_back(std::move(row));
    }
  }
  for (auto& t : all) CombineRepeats(t);
  return all;
}

namespace {

// Writes a number the way the recorded tables do; absent (NaN) fields are left out.
void PutNumber(std::string& out, const char* key, double v) {
  if (std::isnan(v)) return;
  out += ",\"";
  out += key;
  out += "\":" + ToJson(Value(v));
}

void PutInt(std::string& out, const char* key, int64_t v) {
  if (v < 0) return;
  out += ",\"";
  out += key;
  out += "\":" + std::to_string(v);
}

std::string Head(const char* type, const Problem& problem) {
  std::string out = "{\"type\":\"";
  out += type;
  out += "\",\"family\":" + ToJson(Value(problem.family)) + ",\"shape\":" + ToJson(problem.shape);
  if (!problem.dtype.empty()) out += ",\"dtype\":" + ToJson(Value(problem.dtype));
  return out;
}

}  // namespace

std::string ReferenceRowJson(const Problem& problem, const Reference& reference) {
  std::string out = Head("reference", problem);
  out += ",\"ref\":" + ToJson(Value(reference.name));
  PutNumber(out, "ms", reference.ms);
  PutNumber(out, "flops", reference.flops);
  PutNumber(out, "bytes", reference.bytes);
  if (!problem.device.empty()) out += ",\"device\":" + ToJson(Value(problem.device));
  return out + "}";
}

std::string SpaceRowJson(const Problem& problem, const std::vector<std::string>& constraints) {
  std::string out = Head("space", problem) + ",\"constraints\":[";
  for (size_t i = 0; i < constraints.size(); ++i) out += (i ? "," : "") + ToJson(Value(constraints[i]));
  return out + "]}";
}

std::string MeasureRowJson(const Problem& problem, const TableRow& row) {
  const Measurement& m = row.measurement;
  std::string out = Head("measure", problem);
  out += ",\"config\":" + ToJson(row.config);
  PutNumber(out, "compile_s", m.compile_s);
  PutNumber(out, "load_s", m.load_s);
  PutInt(out, "n_regs", m.n_regs);
  PutInt(out, "n_spills", m.n_spills);
  PutInt(out, "shared", m.shared);
  PutNumber(out, "occupancy", m.occupancy);
  out += ",\"status\":\"" + std::string(ToString(m.status)) + "\"";
  PutNumber(out, "relerr", m.relerr);
  PutNumber(out, "ms", m.ms);
  PutNumber(out, "ms_p20", m.ms_p20);
  PutNumber(out, "ms_p80", m.ms_p80);
  if (!m.error.empty()) out += ",\"error\":" + ToJson(Value(m.error));
  if (!m.counters.empty()) out += ",\"counters\":" + ToJson(m.counters);
  if (!row.same_binary_as.empty()) out += ",\"same_binary_as\":" + ToJson(row.same_binary_as);
  PutNumber(out, "t", row.t);
  return out + "}";
}

void WriteTable(std::ostream& out, const ProblemTable& table) {
  if (table.reference) out << ReferenceRowJson(table.problem, *table.reference) << "\n";
  if (!table.constraints.empty()) out << SpaceRowJson(table.problem, table.constraints) << "\n";
  for (const auto& row : table.rows) out << MeasureRowJson(table.problem, row) << "\n";
}

}  // namespace dr_kernel
