"""One self-contained page per run: ``report.html``.

The page opens offline: no script, style sheet or font comes from elsewhere, and the
pictures are embedded (PNG as data URIs). It holds, each under a heading with an ``id``
that tests and links use:

- ``summary``: the run's summary text, as printed;
- ``jobs``: with several jobs, each one's time alone and shared and the links they share;
- ``comparison``: where a measurement exists, measured against predicted per case with
  the error;
- ``figures``: every PNG the run wrote (heatmaps, link utilisation, per-rank breakdown);
- ``ranks``: per phase, every rank's compute, communication and exposed communication;
- ``links``: the busiest links of every phase;
- ``configuration``: the configuration as simulated (JSON).

This module draws the page from parts; a simulation's parts come from
:func:`simnet.output.simulation_sections`, a measured run's from
:func:`write_run_report`.
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from workload.results import write_text

REPORT_NAME = "report.html"

_STYLE = """
* { box-sizing: border-box; }
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px;
       padding: 0 1em; color: #222; line-height: 1.4; }
h1 { font-size: 1.5em; } h2 { border-bottom: 1px solid #ccc; margin-top: 2em; }
pre { background: #f6f6f6; padding: 1em; overflow-x: auto; font-size: 0.85em; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
figure { margin: 1em 0; } figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; }
figcaption { font-size: 0.85em; color: #555; }
.bad { color: #b00; } .ok { color: #070; }
"""


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_cell(c))}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _figure(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    name = html.escape(path.name)
    return (
        f'<figure><img alt="{name}" src="data:image/png;base64,{data}">'
        f"<figcaption>{name}</figcaption></figure>"
    )


def comparison_section(cases: Sequence[dict[str, Any]], unit: str = "ms") -> str:
    """Measured against predicted: ``cases`` of ``name``, ``measured_s``, ``predicted_s``
    and ``error_pct`` (seconds and percent), shown in ``unit`` ("ms" or "s")."""
    scale = 1e3 if unit == "ms" else 1.0
    rows = []
    for c in cases:
        err = c["error_pct"]
        rows.append(
            (
                c["name"],
                f"{c['measured_s'] * scale:.3f}",
                f"{c['predicted_s'] * scale:.3f}",
                f"{err:+.1f}%",
            )
        )
    return table(["case", f"measured ({unit})", f"predicted ({unit})", "error"], rows)


def render(
    title: str,
    summary: str,
    *,
    figures: Sequence[Path] = (),
    config: dict[str, Any] | None = None,
    sections: Sequence[tuple[str, str, str]] = (),
    details: Sequence[tuple[str, str, str]] = (),
) -> str:
    """The page: ``title``, the ``summary`` text, ``sections`` as (id, heading, HTML
    body), the ``figures`` (PNG files, embedded), the ``details`` sections (as
    ``sections``) and the ``config`` (JSON)."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        '<h2 id="summary">Summary</h2>',
        f"<pre>{html.escape(summary)}</pre>",
    ]
    for sid, heading, body in sections:
        parts.append(f'<h2 id="{html.escape(sid)}">{html.escape(heading)}</h2>{body}')
    if figures:
        parts.append('<h2 id="figures">Figures</h2>')
        parts += [_figure(p) for p in figures]
    for sid, heading, body in details:
        parts.append(f'<h2 id="{html.escape(sid)}">{html.escape(heading)}</h2>{body}')
    if config is not None:
        text = json.dumps(config, indent=1, default=str)
        parts.append('<h2 id="configuration">Configuration</h2>')
        parts.append(f"<details><summary>as run</summary><pre>{html.escape(text)}</pre></details>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(
    out_dir: str | Path,
    title: str,
    summary: str,
    files: Sequence[Path],
    *,
    config: dict[str, Any] | None = None,
    sections: Sequence[tuple[str, str, str]] = (),
    details: Sequence[tuple[str, str, str]] = (),
    name: str = REPORT_NAME,
) -> Path:
    """Write the page ``name`` (``report.html``) into ``out_dir`` (atomically), embedding
    the PNGs among ``files``; returns its path."""
    figures = [Path(f) for f in files if str(f).endswith(".png") and Path(f).is_file()]
    page = render(
        title, summary, figures=figures, config=config, sections=sections, details=details
    )
    return write_text(Path(out_dir) / name, page)


def write_run_report(
    out_dir: str | Path,
    title: str,
    summary: str,
    cases: Sequence[dict[str, Any]],
    *,
    files: Sequence[Path],
    config: dict[str, Any] | None = None,
) -> Path:
    """``report.html`` of a run that measured and predicted (the main job, validate, the
    testbed, a scaling study): the summary, measured against predicted per case (see
    :func:`comparison_section`), the PNGs among ``files`` (the run's own: a folder may
    hold an earlier run's pictures) and the configuration."""
    out = Path(out_dir)
    sections = [("comparison", "Measured vs predicted", comparison_section(cases))]
    return write_report(out, title, summary, files, config=config, sections=sections)
