"""`dr-kernel report --html`: one self-contained page per store, rendered by headless Chromium.

The store holds a recorded H200 table (its tuning curve and a replay of the strategies over its
configs) and two stored winners of @optimize; the page is opened in Chromium (Debian's package,
which scripts/test installs), its DOM read back and a screenshot taken to show it draws."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from dr_kernel import _core
from dr_kernel.cli import main
from dr_kernel.store import open_store

DATA = Path(__file__).resolve().parents[1] / "python" / "dr_kernel" / "data" / "h200"


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("headless Chromium is missing on CI: scripts/test installs Debian's chromium package")
        pytest.skip("no chromium on this machine (scripts/test installs it)")
    return found


def render(page: Path, tmp_path: Path) -> tuple[str, Path]:
    browser = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*browser, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    shot = tmp_path / "page.png"
    done = subprocess.run([*browser, f"--screenshot={shot}", "--window-size=1200,2400", page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
    return dom.stdout, shot


def test_the_report_of_a_store_renders_its_problems_curves_winners_and_strategies(tmp_path, capsys):
    db = tmp_path / "r.db"
    store = open_store(db)
    store.import_tables(_core.read_tables([str(DATA / "softmax.jsonl")]))
    store.put_winner("scale|abc|triton 3.6.0|cpu|(4096,)|space 1", {"BLOCK": 256}, 0.125, 7, label="scale (4096,)")
    store.put_winner("scale|abc|triton 3.6.0|cpu|(1024,)|space 1", {"BLOCK": 64}, 0.031, 3, label="scale (1024,)")
    store.add_launches([("scale|abc|triton 3.6.0|cpu|(4096,)|space 1", 12)])
    page = tmp_path / "report.html"
    assert main(["report", "--db", str(db), "--html", str(page)]) == 0
    assert f"wrote {page}: 1 problems" in capsys.readouterr().out
    text = page.read_text()
    # Self-contained: nothing to fetch (the SVGs' xmlns URIs are names, not resources).
    assert not re.search(r"<link|<script|<img|(src|href)=[\"']https?:|url\(https?:", text)

    dom, shot = render(page, tmp_path)
    assert "<table id=\"problems\">" in dom and "rows=4096 cols=4096" in dom and "170 ok" in dom
    # The recorded table's three probe configs carry the counters ncu read on the H200.
    counters = dom[dom.index("<table id=\"counters\">"):]
    counters = counters[:counters.index("</table>")]
    assert counters.count("<tr>") == 4 and "(probe 0.25)" in counters and "(probe 0.75)" in counters
    assert ">45<" in counters and "not selected 2.84" in counters  # 44.65 % achieved occupancy, its top stall.
    assert dom.count("<svg") == 2  # The tuning curve and the strategies' comparison.
    assert "scale (4096,)" in dom and ">12<" in dom  # The hotter winner, with its launches.
    assert "random" in dom and "anneal" in dom and "ppo is left out on 1 of 1 problems" in dom

    import matplotlib.image

    pixels = matplotlib.image.imread(str(shot))
    assert pixels.shape[0] >= 2000 and pixels.std() > 0.05  # Drawn: text, tables and plots, not a blank page.


def test_an_empty_store_gives_a_page_that_says_so_and_a_folder_is_refused(tmp_path, capsys):
    db = tmp_path / "empty.db"
    open_store(db)
    page = tmp_path / "report.html"
    assert main(["report", "--db", str(db), "--html", str(page)]) == 0
    dom, _ = render(page, tmp_path)
    assert "The store holds no measurement yet" in dom
    assert main(["report", "--db", str(db), "--html", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err
