"""The replay loop from Python: strategies, the callback environment, the CLI."""

import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time

import pytest
from dr_kernel import POLICY_FILE, _core
from dr_kernel.cli import main

STRATEGIES = [s[0] for s in _core.strategies()]


def table_env(table):
    """A fake benchmarker over a recorded table: the same contract as the GPU measuring pool."""
    rows = {tuple(sorted(c.items())): m for c, m in table.rows()}
    names = list(table.rows()[0][0])
    values = {n: sorted({c[n] for c, _ in table.rows()}) for n in names}
    space = _core.Space(list(values.items()))
    calls = []

    def measure(batch):
        calls.append(len(batch))
        out = []
        for config in batch:
            m = rows.get(tuple(sorted(config.items())))
            out.append((m, 0.5) if m else ({"status": "invalid"}, 0.0))
        return out

    return space, measure, calls


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_tunes_through_a_python_benchmarker(tables, strategy):
    softmax = next(t for t in tables if t.problem["family"] == "softmax")
    space, measure, calls = table_env(softmax)
    seen = []
    history = _core.tune(softmax.problem, space, measure, strategy, max_evals=space.count_valid(),
                         max_seconds=math.inf, seed=2, on_trial=lambda c, m, s: seen.append(m["status"]))
    assert len(history) == space.count_valid() == len(seen)
    assert min(m["ms"] for _, m, _ in history if m["status"] == "ok") == softmax.oracle_ms
    assert sum(calls) == len(history)
    # The same seed gives the same trace; the budget holds.
    again = _core.tune(softmax.problem, space, measure, strategy, max_evals=25, max_seconds=math.inf, seed=2)
    first = _core.tune(softmax.problem, space, measure, strategy, max_evals=25, max_seconds=math.inf, seed=2)
    assert [c for c, _, _ in again] == [c for c, _, _ in first]
    assert len(first) == 25


def test_the_history_says_why_ppo_proposed_each_config(tables):
    # The reasons (Trial::why) come back with the history, so that a GPU run's rows can say where a
    # session climbed, jumped or measured a twin: the first is the prior's best.
    softmax = next(t for t in tables if t.problem["family"] == "softmax")
    space, measure, _ = table_env(softmax)
    history = _core.tune(softmax.problem, space, measure, "ppo", max_evals=12, max_seconds=math.inf, seed=0)
    reasons = [m.get("why", "") for _, m, _ in history]
    assert len(reasons) == 12 and reasons[0] == "jump: the prior's best"
    assert all(r.startswith(("jump: ", "move ", "climb", "twin: ", "check: ")) for r in reasons), reasons
    assert any(r.startswith("move ") for r in reasons), reasons


def test_ppo_asks_what_compiling_told_of_the_neighbours_and_never_measures_one_that_failed(tables):
    # The session's compile stage answers for the configs it has compiled (here: the recorded
    # table's compile verdicts, a config over the H200's shared memory refused).
    deep = next(t for t in tables if t.problem["family"] == "matmul" and t.problem["shape"]["N"] == 1000)
    space, measure, _ = table_env(deep)
    rows = {tuple(sorted(c.items())): m for c, m in deep.rows()}
    static_failures = {"out_of_resources", "compile_error", "compile_timeout"}

    def run(options):
        asked, refused, measured = [], set(), []

        def observe(config):
            asked.append((config, len(measured)))
            m = rows.get(tuple(sorted(config.items())))
            if m is None:
                return None  # Not compiled yet.
            if m["status"] in static_failures:
                refused.add(tuple(sorted(config.items())))
                return {"status": m["status"]}
            return {"status": "ok", "shared": m["shared"]}

        def measure_and_note(batch):
            # Refused before it was proposed: the strategy was told it fails.
            measured.extend((c, tuple(sorted(c.items())) in refused) for c in batch)
            return measure(batch)

        _core.tune(deep.problem, space, measure_and_note, "ppo", max_evals=40, max_seconds=math.inf, seed=0,
                   options=options, observe=observe)
        return asked, measured, refused

    asked, measured, refused = run({})
    assert len(measured) == 40 and asked
    # Asked about configs measured before (which binary they are) and their one-step neighbours,
    # or about a move's or jump's config before measuring it (measured next, or refused and not
    # measured), and nothing it was told fails to compile was measured after.
    for config, before in asked:
        near = any(config == c or config in space.neighbours(c) for c, _ in measured[:before])
        proposed = before < len(measured) and measured[before][0] == config
        assert near or proposed or tuple(sorted(config.items())) in refused, config
    assert not any(told for _, told in measured)
    assert run({"static": 0})[0] == []


def test_a_failing_benchmarker_keeps_what_was_measured(tables):
    softmax = next(t for t in tables if t.problem["family"] == "softmax")
    space, measure, _ = table_env(softmax)
    measured = []

    def flaky(batch):
        if len(measured) >= 5:
            raise RuntimeError("the GPU went away")
        out = measure(batch)
        measured.extend(out)
        return out

    kept = []
    with pytest.raises(RuntimeError, match="went away"):
        _core.tune(softmax.problem, space, flaky, "random", max_evals=50, max_seconds=math.inf, seed=0,
                   on_trial=lambda c, m, s: kept.append(c))
    assert len(kept) == 5


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "dr_kernel.cli", *args], capture_output=True, text=True)


def test_replay_json_has_the_published_schema_and_is_deterministic(recorded_paths):
    args = ["replay", "--data", *map(str, recorded_paths), "--strategy", "anneal", "--budget", "60", "--repeats", "5",
            "--seed", "7", "--json"]
    out = run_cli(*args)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert set(report) == {"strategy", "budget", "within", "repeats", "seed", "problems"}
    assert (report["strategy"], report["budget"], report["repeats"], report["seed"]) == ("anneal", 60, 5, 7)
    assert len(report["problems"]) == 8
    for p in report["problems"]:
        assert set(p) == {"family", "shape", "configs", "oracle_ms", "evals_to_within", "best_over_oracle",
                          "tuning_s_to_within", "evaluations_used", "final_over_oracle"}
        assert set(p["best_over_oracle"]) == {"10", "20", "50"}
        # Annealing uses its whole budget where the space is larger, and ends at least as near the
        # best as it was after 50 evaluations.
        assert p["evaluations_used"]["median"] == min(60, p["configs"])
        assert 1.0 <= p["final_over_oracle"] <= p["best_over_oracle"]["50"]
        runs = p["evals_to_within"]["runs"]
        assert len(runs) == 5 and all(1 <= r <= 61 for r in runs)
        assert p["best_over_oracle"]["50"] <= p["best_over_oracle"]["10"]
    matmul = [p for p in report["problems"] if p["family"] == "matmul"]
    assert [p["shape"] for p in matmul][0] == {"M": 1024, "N": 1024, "K": 1024}
    assert [p["configs"] for p in matmul] == [1368, 1368, 1368, 1440]
    assert run_cli(*args).stdout == out.stdout


def test_replay_trace_lists_each_runs_measurements_and_agrees_with_its_figures(table_paths, capsys):
    softmax = [p for p in table_paths if p.name == "softmax_4096x4096_bf16.jsonl"]
    args = ["replay", "--data", *map(str, softmax), "--strategy", "anneal", "--budget", "30", "--repeats", "3",
            "--seed", "4"]
    assert main([*args, "--json", "--trace"]) == 0
    problem = json.loads(capsys.readouterr().out)["problems"][0]
    traces = problem["traces"]
    assert len(traces) == 3 and all(len(run) == 30 for run in traces)
    for run, reached in zip(traces, problem["evals_to_within"]["runs"], strict=True):
        assert len({json.dumps(step["config"], sort_keys=True) for step in run}) == 30  # each config once
        over = [step["over_best"] if step["status"] == "ok" else math.inf for step in run]
        assert all(o >= 1.0 for o in over)
        # The run came within 1.05x of the best at the first measurement that did.
        first = next((i + 1 for i, o in enumerate(over) if o <= 1.05), 31)
        assert first == reached
    # Without --trace the report is the one it always was; as text, every run is listed in order.
    assert main([*args, "--json"]) == 0
    assert "traces" not in json.loads(capsys.readouterr().out)["problems"][0]
    assert main([*args, "--trace"]) == 0
    text = capsys.readouterr().out
    assert text.count("anneal, softmax rows=4096 cols=4096, run ") == 3
    assert "run 2 (seed 6):" in text and "\n    30 " in text
    assert {step["why"] for run in traces for step in run} == {""}  # Annealing does not say why.


def test_replay_trace_says_why_the_agent_measured_each_config(table_paths, tmp_path):
    # As a kernel the agent has not seen (its family renamed), it first measures the prior's best
    # guess, then climbs from its best config (one-step neighbours) before its policy moves or jumps.
    table = next(p for p in table_paths if p.name == "rmsnorm_16384x8192_bf16.jsonl")
    renamed = tmp_path / "unseen.jsonl"
    renamed.write_text(table.read_text().replace('"family":"rmsnorm"', '"family":"unseen rmsnorm"'))
    tables = _core.read_tables([str(renamed)])
    assert tables[0].problem["family"] == "unseen rmsnorm"
    report = json.loads(_core.replay(tables, "ppo", 40, 2, 1.05, 0, {}, True).to_json())
    for run in report["problems"][0]["traces"]:
        why = [step["why"] for step in run]
        assert why[0] == "jump: the prior's best"
        assert "climb" in why[1:4]
        assert all(w == "climb" or w.startswith(("move ", "jump: ")) for w in why), why
        assert any(w.startswith(("move ", "jump: ")) for w in why[4:])
        for step in run:
            if step["why"].startswith("move "):
                assert step["why"].split()[1] in step["config"]


def test_replay_plot_and_table(tmp_path, capsys):
    png = tmp_path / "r.png"
    assert main(["replay", "--budget", "30", "--repeats", "3", "--plot", str(png)]) == 0
    text = capsys.readouterr().out
    for name in STRATEGIES:
        if name != "ppo":
            assert f" {name} " in text
    # The shipped agent was trained on every bundled table: its rows there would be in-sample.
    assert not [line for line in text.splitlines() if " ppo " in line]
    assert "ppo: the shipped agent was trained on all" in text and "--holdout family" in text
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_replay_shows_the_agent_only_on_problems_it_was_not_trained_on(tmp_path, table_paths):
    trained = json.loads((POLICY_FILE.parent / "trained_on.json").read_text())
    seen = table_paths[[p.name for p in table_paths].index("rmsnorm_4096x4096_fp16.jsonl")]
    assert {"family": "rmsnorm", "shape": {"rows": 4096, "cols": 4096}, "dtype": "", "device": "NVIDIA H200"} in \
        trained["problems"]
    # The same table under a shape the agent has never seen is out of sample.
    unseen = tmp_path / "rmsnorm_4000x4096.jsonl"
    lines = [json.loads(line) for line in seen.read_text().splitlines()]
    for line in lines:
        line["shape"]["rows"] = 4000
    unseen.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = run_cli("replay", "--data", str(seen), str(unseen), "--strategy", "random,ppo", "--budget", "20",
                  "--repeats", "2")
    assert out.returncode == 0, out.stderr
    ppo_rows = [line for line in out.stdout.splitlines() if " ppo " in line]
    assert len(ppo_rows) == 1 and "rows=4000" in ppo_rows[0]
    assert len([line for line in out.stdout.splitlines() if " random " in line]) == 2
    assert "1 of 2 are in its training data and left out" in out.stdout
    report = json.loads(run_cli("replay", "--data", str(seen), str(unseen), "--strategy", "ppo", "--budget", "20",
                                "--repeats", "2", "--json").stdout)
    assert [p["shape"]["rows"] for p in report["problems"]] == [4000]
    assert report["in_sample_problems_left_out"] == 1


def test_dr_kernel_agent_names_the_agent_and_its_training_data(tmp_path, table_paths):
    # An agent trained on rmsnorm's two tables (`dr-kernel train --data`), named by DR_KERNEL_AGENT:
    # replay's train/test split is its own, so softmax's ppo row is out of sample and shown.
    names = [p.name for p in table_paths]
    seen = table_paths[names.index("rmsnorm_4096x4096_fp16.jsonl")]
    other = table_paths[names.index("softmax_8192x1024_fp16.jsonl")]
    agent = tmp_path / "agent"
    out = run_cli("train", "--data", str(seen), str(table_paths[names.index("rmsnorm_16384x8192_bf16.jsonl")]),
                  "--ppo-steps", "2048", "--bc-episodes", "20", "--synthetic", "0", "--out", str(agent))
    assert out.returncode == 0, out.stderr
    env = dict(os.environ, DR_KERNEL_AGENT=str(agent))
    replay = [sys.executable, "-m", "dr_kernel.cli", "replay", "--data", str(seen), str(other), "--strategy", "ppo",
              "--budget", "20", "--repeats", "2"]
    out = subprocess.run(replay, capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    rows = [line for line in out.stdout.splitlines() if " ppo " in line]
    assert len(rows) == 1 and "softmax" in rows[0], out.stdout
    assert "1 of 2 are in its training data and left out" in out.stdout
    # The shipped agent was trained on both: nothing of ppo is shown.
    shipped = subprocess.run(replay, capture_output=True, text=True)
    assert not [line for line in shipped.stdout.splitlines() if " ppo " in line]
    # A folder without an agent is one clear error naming the variable and the fix.
    env["DR_KERNEL_AGENT"] = str(tmp_path / "nothing")
    bad = subprocess.run([sys.executable, "-c", "import dr_kernel"], capture_output=True, text=True, env=env)
    assert bad.returncode != 0
    assert f"DR_KERNEL_AGENT={tmp_path / 'nothing'}" in bad.stderr and "dr-kernel train --out" in bad.stderr


def test_bad_input_gets_one_clear_line(tmp_path, table_paths):
    out = run_cli("replay", "--strategy", "simplex")
    assert out.returncode == 2
    assert "unknown strategy 'simplex'" in out.stderr and "random" in out.stderr
    assert "Traceback" not in out.stderr

    broken = tmp_path / "broken.jsonl"
    lines = table_paths[0].read_text().splitlines()[:5]
    lines[3] = lines[3][:40]
    broken.write_text("\n".join(lines) + "\n")
    out = run_cli("replay", "--data", str(broken), "--strategy", "random")
    assert out.returncode == 2
    assert f"{broken}:4: not valid JSON" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1

    out = run_cli("replay", "--strategy", "anneal", "--option", "t0")
    assert out.returncode == 2 and "NAME=NUMBER" in out.stderr
    out = run_cli("replay", "--strategy", "anneal", "--option", "heat=1")
    assert out.returncode == 2 and "has no option 'heat'" in out.stderr

    # Numbers the engine cannot hold or that make every run "never" are refused before any work.
    for flag, value, message in [("--budget", "1000000000", "from 1 to 100,000"),
                                 ("--budget", "99999999999999999999", "from 1 to 100,000"),
                                 ("--repeats", "0", "from 1 to 1,000"), ("--seed", "-1", "from 0 to"),
                                 ("--within", "0.9", "at least 1"), ("--within", "0", "at least 1"),
                                 ("--within", "-1", "at least 1"), ("--within", "nan", "at least 1")]:
        out = run_cli("replay", "--strategy", "random", flag, value)
        assert out.returncode == 2 and f"{flag} {value}: give a number {message}" in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1


def test_replay_refuses_files_that_hold_no_tables(tmp_path, table_paths):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    for data, message in [(empty, "is empty"), (tmp_path, "is a folder"), ("/dev/null", "is not a regular file"),
                          (tmp_path / "typo.jsonl", "does not exist")]:
        for extra in ([], ["--plot", str(tmp_path / "p.png")]):
            out = run_cli("replay", "--data", str(data), "--strategy", "random", *extra)
            assert out.returncode == 2 and f"--data {data} {message}" in out.stderr, out.stderr
            assert len(out.stderr.strip().splitlines()) == 1 and out.stdout == ""
    assert not (tmp_path / "p.png").exists()


def test_replay_leaves_out_problems_where_nothing_ran(tmp_path, table_paths):
    # A problem without one 'ok' row has no best: replayed, every run "reached" it at once.
    softmax = next(p for p in table_paths if p.name == "softmax.jsonl")
    first = json.loads(softmax.read_text().splitlines()[0])["shape"]
    dead = tmp_path / "dead.jsonl"
    dead.write_text("".join(
        line.replace('"status":"ok"', '"status":"crashed"').replace(json.dumps(first, separators=(",", ":")),
                                                                    '{"rows":7,"cols":7}') + "\n"
        for line in softmax.read_text().splitlines() if json.loads(line)["shape"] == first))
    assert _core.read_tables([str(dead)])[0].problem["shape"] == {"rows": 7, "cols": 7}
    out = run_cli("replay", "--data", str(softmax), str(dead), "--strategy", "random", "--repeats", "2", "--json")
    assert out.returncode == 0, out.stderr
    assert "left out 1 problem(s) where no config ran correctly: softmax rows=7 cols=7" in out.stderr
    shapes = [p["shape"] for p in json.loads(out.stdout)["problems"]]
    assert {"rows": 7, "cols": 7} not in shapes and first in shapes
    out = run_cli("replay", "--data", str(dead), "--strategy", "random")
    assert out.returncode == 2 and "no problem in --data has a config that ran correctly" in out.stderr
    # Through the Python API, such a problem is never reached (budget + 1), not reached at once.
    report = json.loads(_core.replay(_core.read_tables([str(dead)]), "random", 20, 2, 1.05, 0, {}).to_json())
    assert report["problems"][0]["evals_to_within"]["runs"] == [21, 21]


def test_db_import_export_round_trip(tmp_path, table_paths):
    db = tmp_path / "r.db"
    softmax = next(p for p in table_paths if p.name == "softmax.jsonl")
    assert main(["db", "import", str(softmax), "--db", str(db)]) == 0
    out = tmp_path / "out.jsonl"
    assert main(["db", "export", str(out), "--db", str(db)]) == 0
    original = _core.read_tables([str(softmax)])[0]
    again = _core.read_tables([str(out)])[0]
    # Unknown numbers are NaN on both sides (the recorded tables have no occupancy), and NaN is not
    # equal to itself: compare the rows as JSON, where NaN is a word.
    assert again.problem == original.problem
    assert json.dumps(again.rows()) == json.dumps(original.rows())
    assert all(math.isnan(m["occupancy"]) for _, m in again.rows())
    missing = tmp_path / "missing" / "deeper" / "x.db"
    res = run_cli("db", "stats", "--db", str(missing))  # Reading creates nothing: a typo is said, not made.
    assert res.returncode == 2 and f"{missing} does not exist" in res.stderr and not missing.parent.parent.exists()
    bad = tmp_path / "not.db"
    bad.write_text("hello\n" * 100)
    res = run_cli("db", "stats", "--db", str(bad))
    assert res.returncode == 2 and str(bad) in res.stderr and "Traceback" not in res.stderr


def run_read_only(folder, *args):
    """Runs the CLI with `folder` read-only: by permissions, or (root writes anyway) by a read-only bind
    mount in a mount namespace of its own."""
    if os.geteuid() != 0:
        for f in folder.iterdir():
            f.chmod(0o444)
        folder.chmod(0o555)
        try:
            return run_cli(*args)
        finally:
            folder.chmod(0o755)
    if not shutil.which("unshare"):
        pytest.skip("running as root without unshare: no way to make a folder read-only")
    script = f"mount --bind -o ro {shlex.quote(str(folder))} {shlex.quote(str(folder))} && exec \"$@\""
    out = subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", sys.executable, "-m", "dr_kernel.cli", *args],
                         capture_output=True, text=True)
    if "mount" in out.stderr and "dr-kernel" not in out.stderr:
        pytest.skip(f"cannot make a read-only mount here: {out.stderr.strip()}")
    return out


def test_reading_commands_read_a_read_only_store_and_create_nothing(tmp_path, recorded_paths):
    folder = tmp_path / "shared"
    folder.mkdir()
    db = folder / "r.db"
    softmax = next(p for p in recorded_paths if p.name == "softmax.jsonl")
    assert main(["db", "import", str(softmax), "--db", str(db)]) == 0
    before = db.read_bytes()
    out = run_read_only(folder, "report", "--db", str(db), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)[0]["family"] == "softmax"
    out = run_read_only(folder, "db", "stats", "--db", str(db))
    assert out.returncode == 0 and "1 problems" in out.stdout, out.stderr
    assert db.read_bytes() == before
    # A mistyped store is one line naming it, and neither it nor its folders are made.
    typo = tmp_path / "typo" / "typo.db"
    out = run_cli("report", "--db", str(typo))
    assert out.returncode == 2 and f"{typo} does not exist" in out.stderr and "Traceback" not in out.stderr
    assert not typo.parent.exists()
    # A file where the store's folder should be: one sentence naming it, not a raw errno.
    (tmp_path / "afile").write_text("x")
    out = run_cli("db", "import", str(softmax), "--db", str(tmp_path / "afile" / "r.db"))
    assert out.returncode == 2 and "afile is a file, not a folder" in out.stderr and "Errno" not in out.stderr


def test_report_names_each_problems_best_config(tmp_path, recorded_paths):
    db = tmp_path / "r.db"
    softmax = next(p for p in recorded_paths if p.name == "softmax.jsonl")
    assert main(["db", "import", str(softmax), "--db", str(db)]) == 0
    out = run_cli("report", "--db", str(db), "--json")
    assert out.returncode == 0, out.stderr
    (report,) = json.loads(out.stdout)
    table = _core.read_tables([str(softmax)])[0]
    assert report["best_ms"] == table.oracle_ms and report["measurements"] == len(table)
    best = [c for c, m in table.rows() if m["status"] == "ok" and m["ms"] == table.oracle_ms][0]
    assert report["best_config"] == best
    assert run_cli("report", "--db", str(db), "--family", "matmul", "--json").stdout.strip() == "[]"


@pytest.mark.parametrize("command", [["replay", "--strategy", "anneal", "--budget", "300", "--repeats", "500"],
                                     ["train", "--ppo-steps", "10000000"]])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_and_sigterm_stop_replay_and_train_at_once(tmp_path, command, signum):
    # Both run in C++ for minutes; they used to finish the current strategy first (60 s and more),
    # then claim that results were "in the store". Each gets a few seconds to reach its C++ loop.
    out = tmp_path / "agent"
    if command[0] == "train":
        command = [*command, "--out", str(out)]
    process = subprocess.Popen([sys.executable, "-m", "dr_kernel.cli", *command], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(5)
    assert process.poll() is None, "it ended before the signal: give it more work"
    sent = time.monotonic()
    process.send_signal(signum)
    _, err = process.communicate(timeout=60)
    waited = time.monotonic() - sent
    assert process.returncode == 130, err[-2000:]
    assert waited < 10, f"{command[0]} took {waited:.1f} s to stop"
    assert "interrupted" in err and "in the store" not in err and "Traceback" not in err
    if command[0] == "train":
        assert not out.exists() or not any(out.iterdir())  # No agent file half written.
