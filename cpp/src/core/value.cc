#include "dr_kernel/value.h"

#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "dr_kernel/problem.h"

namespace dr_kernel {

double ToDouble(const Value& v) {
  if (auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  if (auto* d = std::get_if<double>(&v)) return *d;
  if (auto* b = std::get_if<bool>(&v)) return *b ? 1.0 : 0.0;
  throw std::invalid_argument("the value '" + std::get<std::string>(v) + "' is a string, not a number");
}

namespace {

std::string QuoteJson(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

}  // namespace

std::string ToJson(const Value& v) {
  if (auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  if (auto* b = std::get_if<bool>(&v)) return *b ? "true" : "false";
  if (auto* d = std::get_if<double>(&v)) {
    if (!std::isfinite(*d)) return "null";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", *d);
    std::string s = buf;
    // Keep it a float in JSON so that it reads back as a double.
    if (s.find_first_of(".eE") == std::string::npos) s += ".0";
    return s;
  }
  return QuoteJson(std::get<std::string>(v));
}

std::string ToJson(const NamedValues& values) {
  std::string out = "{";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) out += ",";
    out += QuoteJson(values[i].first) + ":" + ToJson(values[i].second);
  }
  return out + "}";
}

const Value* Find(const NamedValues& values, const std::string& name) {
  for (const auto& [k, v] : values)
    if (k == name) return &v;
  return nullptr;
}

std::string Problem::Key() const {
  return family + "|" + ToJson(shape) + "|" + device + "|" + dtype;
}

std::string Problem::Label() const {
  std::string out = family;
  for (const auto& [k, v] : shape) {
    out += " " + k + "=";
    if (auto* s = std::get_if<std::string>(&v)) {
      out += *s;
    } else {
      out += ToJson(v);
    }
  }
  if (!dtype.empty()) out += " " + dtype;
  return out;
}

namespace {
constexpr const char* kStatusNames[] = {"ok",    "out_of_resources", "compile_error", "compile_timeout",
                                        "wrong", "crashed",          "invalid",       "launch_error"};
}  // namespace

const char* ToString(Status status) { return kStatusNames[static_cast<int>(status)]; }

std::optional<Status> ParseStatus(const std::string& text) {
  for (int i = 0; i < static_cast<int>(std::size(kStatusNames)); ++i)
    if (text == kStatusNames[i]) return static_cast<Status>(i);
  return std::nullopt;
}

}  // namespace dr_kernel
