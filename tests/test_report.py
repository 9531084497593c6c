"""report.html: one self-contained page per simulation, checked as text and in a browser."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from simnet.output import MAX_RANK_ROWS, write_all
from simnet.report import REPORT_NAME, comparison_section, render
from simnet.simulate import simulate

SECTIONS = ("summary", "figures", "ranks", "links", "configuration")


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[Path, list[Path]]:
    out = tmp_path_factory.mktemp("report")
    res = simulate(
        {
            "distributed": {"num_nodes": 4, "bandwidth_limit_gb_per_s": 10},
            "topology": {"type": "switch"},
            "workload": {"name": "dlrm", "scale": 0.01},
        }
    )
    files = write_all(res, out)
    return out, files


def test_every_simulation_writes_a_self_contained_report(written):
    out, files = written
    page = (out / REPORT_NAME).read_text()
    assert out / REPORT_NAME in files
    for sid in SECTIONS:
        assert f'<h2 id="{sid}">' in page
    # Every picture the run wrote is in the page itself; nothing is fetched from elsewhere.
    pngs = [f for f in files if f.suffix == ".png"]
    assert pngs and page.count("data:image/png;base64,") == len(pngs)
    assert not re.search(r'(src|href)\s*=\s*"(https?:)?//', page)
    assert "<script" not in page
    assert "predicted iteration time" in page
    assert "&quot;name&quot;: &quot;dlrm&quot;" in page  # the configuration as run (escaped)
    assert "jobs" not in re.findall(r'<h2 id="(\w+)"', page)


def test_comparison_and_long_rank_lists():
    table = comparison_section(
        [{"name": "allreduce 1 MiB", "measured_s": 0.002, "predicted_s": 0.0021, "error_pct": 5.0}]
    )
    assert "<td>2.000</td><td>2.100</td><td>+5.0%</td>" in table
    page = render("t", "s & <b>", sections=[("comparison", "Measured", table)])
    assert "s &amp; &lt;b&gt;" in page  # the summary is text, escaped
    assert page.index('id="summary"') < page.index('id="comparison"')
    assert MAX_RANK_ROWS == 256


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(
    _chromium() is None,
    reason="no headless browser here (Debian: apt-get install chromium) to load report.html",
)
def test_report_loads_in_a_real_browser(written, tmp_path):
    out, _ = written
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--enable-logging=stderr",
        "--v=0",
    ]
    url = (out / REPORT_NAME).as_uri()
    dom = subprocess.run(
        [_chromium(), *flags, "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    for sid in SECTIONS:
        assert f'id="{sid}"' in dom.stdout
    assert dom.stdout.count("<img") >= 4
    assert "CONSOLE" not in dom.stderr  # no script or page error was logged
    shot = tmp_path / "report.png"
    subprocess.run(
        [_chromium(), *flags, "--window-size=1200,1600", f"--screenshot={shot}", url],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert shot.stat().st_size > 10_000


def test_a_run_report_embeds_the_runs_pictures_not_an_earlier_runs(tmp_path):
    from simnet.plots import timeline_bars
    from simnet.report import write_run_report

    old = timeline_bars(["0"], [1.0], [0.0], [0.0], tmp_path / "earlier_run.png", title="old")
    new = timeline_bars(["0"], [2.0], [0.0], [0.0], tmp_path / "this_run.png", title="new")
    case = [{"name": "x", "measured_s": 1.0, "predicted_s": 1.1, "error_pct": 10.0}]
    page = write_run_report(tmp_path, "t", "summary", case, files=[new]).read_text()
    assert page.count("<img") == 1 and "this_run.png" in page and old.name not in page
