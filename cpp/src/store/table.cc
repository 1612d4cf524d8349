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

namespace {

class LineReader {
 public:
  LineReader(const std::string& name, size_t line) : where_(name + ":" + std::to_string(line)) {}

  [[noreturn]] void Fail(const std::string& what) const {
    throw TableError(where_ + ": " + what +
                     "; fix or delete this line (the format is described in docs/data-format.md)");
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

std::vector<ProblemTable> ParseTables(std::istream& in, const std::string& name) {
  std::vector<ProblemTable> tables;
  std::map<std::string, size_t> index;  // family + shape JSON -> position in tables.
  auto table_for = [&](const std::string& family, const NamedValues& shape) -> ProblemTable& {
    const std::string key = family + "|" + ToJson(shape);
    auto [it, inserted] = index.emplace(key, tables.size());
    if (inserted) {
      tables.emplace_back();
      tables.back().problem.family = family;
      tables.back().problem.shape = shape;
      tables.back().source = name;
    }
    return tables[it->second];
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
    const std::string family = r.String(row, "family");
    const NamedValues shape = r.Object(row, "shape");
    ProblemTable& table = table_for(family, shape);
    if (row.contains("dtype") && table.problem.dtype.empty()) table.problem.dtype = r.String(row, "dtype");
    if (row.contains("device") && table.problem.device.empty()) table.problem.device = r.String(row, "device");

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
      if (m.ok() && !(m.ms > 0)) r.Fail("an 'ok' row needs a positive 'ms'");
      out.t = r.Number(row, "t");
      table.rows.push_back(std::move(out));
    } else {
      r.Fail("unknown row type '" + type + "' (expected 'reference' or 'measure')");
    }
  }
  return tables;
}

std::vector<ProblemTable> ReadTables(const std::vector<std::string>& paths) {
  std::vector<ProblemTable> all;
  for (const auto& path : paths) {
    std::ifstream in(path);
    if (!in) throw TableError(path + ": cannot be opened; check the path (the bundled tables are in dr_kernel/data)");
    for (auto& t : ParseTables(in, path)) all.push_back(std::move(t));
  }
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
  PutNumber(out, "t", row.t);
  return out + "}";
}

void WriteTable(std::ostream& out, const ProblemTable& table) {
  if (table.reference) out << ReferenceRowJson(table.problem, *table.reference) << "\n";
  for (const auto& row : table.rows) out << MeasureRowJson(table.problem, row) << "\n";
}

}  // namespace dr_kernel
