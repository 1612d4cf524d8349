// The one binding file: plain data (dicts, lists, numbers) and callbacks cross; logic stays in C++
// (cpp/) or in pure Python (python/dr_kernel/).
#include <algorithm>
#include <cstring>
#include <fstream>

#include <nanobind/nanobind.h>
#include <nanobind/stl/function.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "dr_kernel/agent/agent.h"
#include "dr_kernel/evaluator.h"
#include "dr_kernel/interrupt.h"
#include "dr_kernel/replay.h"
#include "dr_kernel/space.h"
#include "dr_kernel/store.h"
#include "dr_kernel/strategy.h"
#include "dr_kernel/table.h"

namespace nb = nanobind;
using namespace dr_kernel;

namespace {

// Python bool is a subclass of int, so values are converted by hand to keep True distinct from 1.
Value ToValue(nb::handle h) {
  if (nb::isinstance<nb::bool_>(h)) return nb::cast<bool>(h);
  if (nb::isinstance<nb::int_>(h)) return nb::cast<int64_t>(h);
  if (nb::isinstance<nb::float_>(h)) return nb::cast<double>(h);
  if (nb::isinstance<nb::str>(h)) return nb::cast<std::string>(h);
  throw nb::type_error(("a parameter or shape value must be an int, float, bool or str, not " +
                        nb::cast<std::string>(nb::str(h.type()))).c_str());
}

nb::object FromValue(const Value& v) {
  return std::visit([](const auto& x) -> nb::object { return nb::cast(x); }, v);
}

NamedValues ToNamed(const nb::dict& d) {
  NamedValues out;
  for (auto [k, v] : d) out.emplace_back(nb::cast<std::string>(k), ToValue(v));
  return out;
}

nb::dict FromNamed(const NamedValues& values) {
  nb::dict d;
  for (const auto& [k, v] : values) d[k.c_str()] = FromValue(v);
  return d;
}

Config ToConfig(const Space& space, const nb::dict& d) {
  auto config = space.Find(ToNamed(d));
  if (!config)
    throw nb::value_error(("config " + ToJson(ToNamed(d)) +
                           " is not in the space: give one value of each parameter from its list").c_str());
  return *config;
}

Problem ToProblem(const nb::dict& d) {
  Problem p;
  p.family = nb::cast<std::string>(d["family"]);
  p.shape = ToNamed(nb::cast<nb::dict>(d["shape"]));
  if (d.contains("device")) p.device = nb::cast<std::string>(d["device"]);
  if (d.contains("dtype")) p.dtype = nb::cast<std::string>(d["dtype"]);
  return p;
}

nb::dict FromProblem(const Problem& p) {
  nb::dict d;
  d["family"] = p.family;
  d["shape"] = FromNamed(p.shape);
  d["device"] = p.device;
  d["dtype"] = p.dtype;
  return d;
}

// Measurements cross as dicts with the recorded-table field names; NaN / -1 mean unknown.
nb::dict FromMeasurement(const Measurement& m) {
  nb::dict d;
  d["status"] = ToString(m.status);
  d["ms"] = m.ms, d["ms_p20"] = m.ms_p20, d["ms_p80"] = m.ms_p80;
  d["compile_s"] = m.compile_s, d["load_s"] = m.load_s, d["relerr"] = m.relerr;
  d["n_regs"] = m.n_regs, d["n_spills"] = m.n_spills, d["shared"] = m.shared;
  d["occupancy"] = m.occupancy;
  d["error"] = m.error;
  if (!m.counters.empty()) d["counters"] = FromNamed(m.counters);
  return d;
}

Measurement ToMeasurement(const nb::dict& d) {
  Measurement m;
  const auto status = ParseStatus(nb::cast<std::string>(d["status"]));
  if (!status) throw nb::value_error("a measurement's status must be one of ok, out_of_resources, compile_error, "
                                     "compile_timeout, wrong, crashed, invalid");
  m.status = *status;
  auto number = [&](const char* key, double& out) {
    if (d.contains(key) && !d[key].is_none()) out = nb::cast<double>(d[key]);
  };
  number("ms", m.ms), number("ms_p20", m.ms_p20), number("ms_p80", m.ms_p80);
  number("compile_s", m.compile_s), number("load_s", m.load_s), number("relerr", m.relerr);
  number("occupancy", m.occupancy);
  if (d.contains("n_regs") && !d["n_regs"].is_none()) m.n_regs = nb::cast<int>(d["n_regs"]);
  if (d.contains("n_spills") && !d["n_spills"].is_none()) m.n_spills = nb::cast<int>(d["n_spills"]);
  if (d.contains("shared") && !d["shared"].is_none()) m.shared = nb::cast<int64_t>(d["shared"]);
  if (d.contains("error") && !d["error"].is_none()) m.error = nb::cast<std::string>(d["error"]);
  if (d.contains("counters") && !d["counters"].is_none()) m.counters = ToNamed(nb::cast<nb::dict>(d["counters"]));
  if (d.contains("binary") && !d["binary"].is_none()) m.binary = nb::cast<uint64_t>(d["binary"]);
  return m;
}

Space MakeSpace(const std::vector<std::pair<std::string, nb::list>>& params,
                const std::vector<std::string>& constraints) {
  std::vector<Parameter> out;
  for (const auto& [name, values] : params) {
    Parameter p{name, {}};
    for (auto v : values) p.values.push_back(ToValue(v));
    out.push_back(std::move(p));
  }
  return Space(std::move(out), constraints);
}

}  // namespace

NB_MODULE(_core, m) {
  // Spaces and stores held by kernels at module level (a decorated kernel keeps its store) are
  // still alive when the interpreter shuts down; nanobind would report each as a leak.
  nb::set_leak_warnings(false);
  m.doc() = "dr_kernel's C++ engine";
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    // Messages quote the user's input, which may be cut inside a UTF-8 sequence or not be UTF-8 at
    // all: decoded with replacement, the message still reaches the user instead of a decode error.
    auto set = [](PyObject* type, const char* what) {
      PyObject* text = PyUnicode_DecodeUTF8(what, static_cast<Py_ssize_t>(std::strlen(what)), "replace");
      PyErr_SetObject(type, text);
      Py_XDECREF(text);
    };
    try {
      std::rethrow_exception(p);
    } catch (const SpaceError& e) {
      set(PyExc_ValueError, e.what());
    } catch (const StrategyError& e) {
      set(PyExc_ValueError, e.what());
    } catch (const TableError& e) {
      set(PyExc_ValueError, e.what());
    } catch (const StoreError& e) {
      set(PyExc_OSError, e.what());
    } catch (const ModelError& e) {
      set(PyExc_ValueError, e.what());
    } catch (const rl::ModelFormatError& e) {
      set(PyExc_ValueError, e.what());
    } catch (const Interrupted&) {
      // The signal handler's own exception (KeyboardInterrupt, or what the program's handler
      // raised) is already set by the check below; it is what the caller sees.
      if (!PyErr_Occurred()) PyErr_SetNone(PyExc_KeyboardInterrupt);
    }
  });
  // Replays and training poll this between units of work, with the GIL released: a signal that
  // arrived meanwhile (Ctrl-C, the CLI's SIGTERM handler) runs its Python handler here.
  SetInterruptCheck([] {
    if (!Py_IsInitialized()) return false;
    nb::gil_scoped_acquire acquire;
    return PyErr_CheckSignals() != 0;
  });

  nb::class_<Space>(m, "Space")
      .def("__init__", [](Space* s, const std::vector<std::pair<std::string, nb::list>>& params,
                          const std::vector<std::string>& constraints) { new (s) Space(MakeSpace(params, constraints)); },
           nb::arg("params"), nb::arg("constraints") = std::vector<std::string>{})
      .def("add_predicate", [](Space& s, nb::callable fn, const std::string& description) {
             s.AddPredicate({[fn](const NamedValues& v) { return nb::cast<bool>(fn(FromNamed(v))); }, description});
           })
      .def("allow_only", [](Space& s, const std::vector<nb::dict>& configs) {
             std::vector<Config> out;
             for (const auto& c : configs) out.push_back(ToConfig(s, c));
             s.AllowOnly(out);
           })
      .def_prop_ro("names", [](const Space& s) {
        std::vector<std::string> names;
        for (const auto& p : s.params()) names.push_back(p.name);
        return names;
      })
      .def("values", [](const Space& s, const std::string& name) {
        const int i = s.ParamIndex(name);
        if (i < 0) throw nb::key_error(name.c_str());
        nb::list out;
        for (const auto& v : s.params()[i].values) out.append(FromValue(v));
        return out;
      })
      .def_prop_ro("constraints", [](const Space& s) {
        std::vector<std::string> out;
        for (const auto& c : s.constraints()) out.push_back(c.text());
        return out;
      })
      .def_prop_ro("product_size", &Space::product_size)
      .def("count_valid", &Space::CountValid)
      .def("is_valid", [](const Space& s, const nb::dict& c) {
        auto config = s.Find(ToNamed(c));
        return config && s.IsValid(*config);
      })
      .def("why_invalid", [](const Space& s, const nb::dict& c) {
        auto config = s.Find(ToNamed(c));
        return config ? s.WhyInvalid(*config) : std::string("a value is not in the space");
      })
      .def("sample", [](const Space& s, uint64_t seed, size_t n) {
        Rng rng(seed);
        UniqueSampler sampler(s, rng);
        nb::list out;
        while (out.size() < n) {
          auto c = sampler.Next();
          if (!c) break;
          out.append(FromNamed(s.Named(*c)));
        }
        return out;
      }, nb::arg("seed"), nb::arg("n") = 1)
      .def("configs", [](const Space& s, size_t limit) {
        nb::list out;
        s.ForEach([&](const Config& c) {
          out.append(FromNamed(s.Named(c)));
          return out.size() < limit;
        });
        return out;
      }, nb::arg("limit") = SIZE_MAX)
      .def("neighbours", [](const Space& s, const nb::dict& c) {
        nb::list out;
        for (const auto& n : s.Neighbours(ToConfig(s, c))) out.append(FromNamed(s.Named(n)));
        return out;
      })
      .def("encode", [](const Space& s, const nb::dict& c) { return s.Encode(ToConfig(s, c)); });

  nb::class_<ProblemTable>(m, "Table")
      .def_prop_ro("problem", [](const ProblemTable& t) { return FromProblem(t.problem); })
      .def_prop_ro("source", [](const ProblemTable& t) { return t.source; })
      .def_prop_ro("oracle_ms", &ProblemTable::oracle_ms)
      .def_ro("constraints", &ProblemTable::constraints,
              "The constraints of the space the table was recorded from (its 'space' row): configs that "
              "break one are outside the problem in replay and training, as in a tuning session.")
      .def("__len__", [](const ProblemTable& t) { return t.rows.size(); })
      .def("rows", [](const ProblemTable& t) {
        nb::list out;
        for (const auto& r : t.rows) out.append(nb::make_tuple(FromNamed(r.config), FromMeasurement(r.measurement)));
        return out;
      });

  m.def("read_tables", &ReadTables, nb::arg("paths"), "Reads recorded tables (JSON lines), one Table per problem.");

  // The results store: every measurement, and the winners the decorator reuses.
  nb::class_<Store>(m, "Store")
      .def(nb::init<const std::string&, bool>(), nb::arg("path"), nb::arg("read_only") = false)
      .def_prop_ro("path", &Store::path)
      .def("add", [](Store& s, const nb::dict& problem, const nb::dict& config, const nb::dict& measurement,
                     const std::string& source) {
             TableRow row{ToNamed(config), ToMeasurement(measurement), kNaN};
             return s.Add(ToProblem(problem), row, source);
           }, nb::arg("problem"), nb::arg("config"), nb::arg("measurement"), nb::arg("source"),
           "Adds one measurement and returns its row's id (for rejudge).")
      .def("rejudge", &Store::Rejudge, nb::arg("now_wrong"), nb::arg("withdrawn"), nb::arg("why"),
           "Corrects rows (by id) judged against a reference later out-voted: `ok` rows of now_wrong "
           "become `wrong` (error `why`, times unknown), `wrong` rows of withdrawn are deleted; one "
           "transaction. Returns the rows changed.")
      .def("set_reference", [](Store& s, const nb::dict& problem, const std::string& name, double ms, double flops,
                               double bytes) { s.SetReference(ToProblem(problem), Reference{name, ms, flops, bytes}); })
      .def("problems", [](const Store& s) {
        nb::list out;
        for (const auto& p : s.Problems()) out.append(FromProblem(p));
        return out;
      })
      .def("rows", [](const Store& s, const nb::dict& problem) {
        nb::list out;
        for (const auto& r : s.Rows(ToProblem(problem)))
          out.append(nb::make_tuple(FromNamed(r.config), FromMeasurement(r.measurement)));
        return out;
      })
      .def("count", [](const Store& s) { return s.Count(); })
      .def("import_tables", &Store::Import, nb::arg("tables"), nb::arg("source") = "")
      .def("export_tables", &Store::Export)
      .def("put_winner", [](Store& s, const std::string& key, const nb::dict& config, double ms, int64_t evaluations,
                            const std::string& label, int64_t budget) {
        Winner w{ToNamed(config), ms, evaluations, kNaN};
        w.label = label;
        w.budget = budget;
        s.PutWinner(key, w);
      }, nb::arg("key"), nb::arg("config"), nb::arg("ms"), nb::arg("evaluations"), nb::arg("label") = "",
         nb::arg("budget") = 0)
      .def("get_winner", [](const Store& s, const std::string& key) -> nb::object {
        const auto w = s.GetWinner(key);
        if (!w) return nb::none();
        return nb::make_tuple(FromNamed(w->config), w->ms, w->evaluations);
      })
      .def("add_launches", [](Store& s, const std::vector<std::pair<std::string, int64_t>>& counts) {
        return s.AddLaunches(counts);
      }, nb::arg("counts"))
      .def("hottest_winners", [](const Store& s, int64_t n) {
        nb::list out;
        for (const auto& [key, w] : s.HottestWinners(n)) {
          nb::dict d;
          d["key"] = key;
          d["config"] = FromNamed(w.config);
          d["ms"] = w.ms;
          d["evaluations"] = w.evaluations;
          d["budget"] = w.budget;
          d["launches"] = w.launches;
          d["label"] = w.label;
          d["created"] = w.created;
          out.append(d);
        }
        return out;
      }, nb::arg("n"));

  m.def("write_tables", [](const std::vector<ProblemTable>& tables, const std::string& path) {
    std::ofstream out(path);
    if (!out) throw nb::value_error((path + ": cannot be written; check the folder exists and is writable").c_str());
    for (const auto& t : tables) WriteTable(out, t);
  });

  // The agent behind the ppo strategy.
  m.def("load_agent", [](const std::string& policy_path, const std::string& model_path) {
    agent::SetDefaultAgent(std::make_shared<agent::Agent>(agent::LoadAgent(policy_path, model_path)));
  }, nb::arg("policy_path"), nb::arg("model_path"));
  m.def("has_agent", [] { return agent::DefaultAgent() != nullptr; });
  // The valid configs of `space` in the order the agent's cost model predicts them fastest (its
  // prior, before any measurement): what a zero-wait launch takes, its first `n`.
  m.def("predicted_order", [](const nb::dict& problem, const Space& space, size_t n) {
    const auto trained = agent::DefaultAgent();
    if (!trained || !trained->model)
      throw StrategyError("there is no trained cost model to predict with: reinstall dr_kernel (it ships one) or "
                          "run `dr-kernel train`");
    const agent::Prior prior = agent::PriorFromModel(trained->model.get(), ToProblem(problem), space);
    nb::list out;
    for (size_t i = 0; i < prior.order.size() && i < n; ++i)
      out.append(FromNamed(space.Named(space.FromIndex(prior.order[i]))));
    return out;
  }, nb::arg("problem"), nb::arg("space"), nb::arg("n") = 1);
  m.def("train_agent", [](const std::vector<ProblemTable>& tables, int64_t ppo_steps, int bc_episodes,
                          int synthetic_tasks, uint64_t seed, const std::string& policy_path,
                          const std::string& model_path, nb::object on_update, bool counters, std::optional<double> alike) {
        agent::TrainOptions options;
        options.model.use_counters = counters;
        if (alike) options.pretrain.episodes.alike_width = *alike;
        options.pretrain.ppo_steps = ppo_steps;
        options.pretrain.bc_episodes = bc_episodes;
        options.synthetic_tasks = synthetic_tasks;
        options.seed = seed;
        agent::TrainReport report;
        agent::Agent trained;
        {
          nb::gil_scoped_release release;
          trained = agent::TrainAgent(tables, options, &report, [&](const rl::TrainLog& log) {
            if (on_update.is_none()) return;
            nb::gil_scoped_acquire acquire;
            on_update(log.steps, log.mean_return, log.mean_length);
          });
        }
        agent::SaveAgent(trained, policy_path, model_path);
        agent::SetDefaultAgent(std::make_shared<agent::Agent>(std::move(trained)));
        nb::dict out;
        out["demonstrations"] = report.pretrain.demonstrations;
        out["bc_accuracy"] = report.pretrain.bc.final.accuracy;
        out["bc_seconds"] = report.pretrain.bc_seconds;
        out["ppo_seconds"] = report.pretrain.ppo_seconds;
        out["ppo_steps"] = report.pretrain.ppo.empty() ? 0 : report.pretrain.ppo.back().steps;
        out["model_seconds"] = report.model_seconds;
        out["table_tasks"] = report.table_tasks;
        out["synthetic_tasks"] = report.synthetic_tasks;
        return out;
      }, nb::arg("tables"), nb::arg("ppo_steps"), nb::arg("bc_episodes"), nb::arg("synthetic_tasks"), nb::arg("seed"),
      nb::arg("policy_path"), nb::arg("model_path"), nb::arg("on_update") = nb::none(), nb::arg("counters") = false,
      nb::arg("alike") = nb::none());

  m.def("strategies", [] {
    nb::list out;
    for (const auto& s : Strategies()) {
      std::vector<std::tuple<std::string, std::string, double>> options;
      for (const auto& o : s.options) options.emplace_back(o.name, o.description, o.default_value);
      out.append(nb::make_tuple(s.name, s.description, options));
    }
    return out;
  });

  nb::class_<ReplayReport>(m, "ReplayReport")
      .def("to_json", &ReplayReport::ToJson)
      .def_prop_ro("curves", [](const ReplayReport& r) {
        nb::list out;
        for (const auto& p : r.problems) out.append(nb::make_tuple(FromProblem(p.problem), p.median_curve));
        return out;
      });

  m.def("replay", [](const std::vector<ProblemTable>& tables, const std::string& strategy, int64_t budget, int repeats,
                     double within, uint64_t seed, const std::map<std::string, double>& options, bool trace) {
        ReplaySettings s{strategy, budget, repeats, within, seed, options, {}, trace};
        nb::gil_scoped_release release;  // Pure C++ from here; lets a notebook stay responsive.
        return Replay(tables, s);
      }, nb::arg("tables"), nb::arg("strategy"), nb::arg("budget"), nb::arg("repeats"), nb::arg("within"),
      nb::arg("seed"), nb::arg("options") = std::map<std::string, double>{}, nb::arg("trace") = false);

  // A tuning session whose measurements come from Python: measure(list of config dicts) returns a
  // list of (measurement dict, cost seconds); on_trial(config, measurement, elapsed_s) sees each one;
  // observe(config dict) returns what is known of a config without measuring it (a measurement dict
  // whose status is "ok" when it compiled within the device's limits, with "binary" an integer that
  // configs of one binary share, or the compile failure), or None when nothing is known yet.
  // Returns the history: (config, measurement dict, elapsed cost seconds) per evaluation, the dict
  // with "why" the strategy proposed the config where it says (ppo's "climb", "twin: ...").
  m.def("tune", [](const nb::dict& problem, const Space& space, nb::callable measure, const std::string& strategy,
                   int64_t max_evals, double max_seconds, uint64_t seed, const std::map<std::string, double>& options,
                   nb::object on_trial, nb::object observe, const nb::list& opening) {
        auto measure_batch = [&space, measure](const std::vector<Config>& configs) {
          nb::list batch;
          for (const auto& c : configs) batch.append(FromNamed(space.Named(c)));
          std::vector<Evaluation> out;
          for (auto item : nb::cast<nb::list>(measure(batch))) {
            auto pair = nb::cast<nb::tuple>(item);
            out.push_back({ToMeasurement(nb::cast<nb::dict>(pair[0])), nb::cast<double>(pair[1])});
          }
          return out;
        };
        CallbackEnv::Static observe_one;
        if (!observe.is_none())
          observe_one = [&space, observe](const Config& c) -> std::optional<Measurement> {
            nb::object seen = observe(FromNamed(space.Named(c)));
            if (seen.is_none()) return std::nullopt;
            return ToMeasurement(nb::cast<nb::dict>(seen));
          };
        CallbackEnv env(ToProblem(problem), space, measure_batch, observe_one);
        Evaluator evaluator(env, Budget{max_evals, max_seconds});
        if (!on_trial.is_none())
          evaluator.OnTrial([&](const Trial& t) {
            on_trial(FromNamed(space.Named(t.config)), FromMeasurement(t.measurement), t.elapsed_s);
          });
        // The opening: configs measured before the strategy proposes anything (one batch, within the
        // budget), which every strategy finds in its history (a variant the cost model has no rows
        // of, so that it cannot rank it: BuiltinKernel.opening).
        std::vector<Config> first;
        for (auto item : opening) {
          Config c = ToConfig(space, nb::cast<nb::dict>(item));
          if (space.IsValid(c) && std::find(first.begin(), first.end(), c) == first.end()) first.push_back(std::move(c));
        }
        if (!first.empty()) {
          const std::vector<std::string> why(first.size(), "opening: a variant the cost model has no rows of");
          try {
            evaluator.Evaluate(first, &why);
          } catch (const StopTuning&) {
          }
        }
        RunStrategy(strategy, evaluator, seed, options);
        nb::list history;
        for (const auto& t : evaluator.history()) {
          nb::dict measured = FromMeasurement(t.measurement);
          if (!t.why.empty()) measured["why"] = t.why;  // Why the strategy proposed it (Trial::why).
          history.append(nb::make_tuple(FromNamed(space.Named(t.config)), measured, t.elapsed_s));
        }
        return history;
      }, nb::arg("problem"), nb::arg("space"), nb::arg("measure"), nb::arg("strategy"), nb::arg("max_evals"),
      nb::arg("max_seconds"), nb::arg("seed"), nb::arg("options") = std::map<std::string, double>{},
      nb::arg("on_trial") = nb::none(), nb::arg("observe") = nb::none(), nb::arg("opening") = nb::list());
}
