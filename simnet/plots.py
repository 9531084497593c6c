"""Human-readable pictures of a network simulation, written as PNG files.

Every public function draws one figure, writes it atomically (temp file beside
the target, then rename, via :func:`workload.results.atomic_write`) and returns
the path. A failed write leaves neither the target nor a temp file behind.

Units. Inputs are in bytes (``_bytes``), bytes per second (``_bytes_per_s``)
and seconds (``_s``). Display units are decimal: 1 KB = 1e3 B, 1 MB = 1e6 B,
1 GB = 1e9 B, and every title, axis or colorbar label names the unit it shows.
Conversion to a display unit happens only in :func:`choose_unit` and with the
constants of :mod:`workload.units` (``GB``, ``MS_PER_S``).

Backend. The module selects matplotlib's non-interactive Agg backend if pyplot
has not been imported yet (selecting it later would close the figures of an
interactive session). Figures are built as plain :class:`~matplotlib.figure.Figure`
objects with an Agg canvas, never registered with pyplot, so they are freed as
soon as a function returns, whatever the active backend: hundreds of calls do
not accumulate open figures.
"""

from __future__ import annotations

import math
import os
import sys
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

if "matplotlib.pyplot" not in sys.modules:
    matplotlib.use("Agg")

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure

from workload.results import atomic_write
from workload.units import BYTE_UNITS, GB, MS_PER_S, format_bytes

__all__ = [
    "bandwidth_heatmap",
    "choose_unit",
    "format_bytes",
    "link_utilisation_plot",
    "measured_vs_predicted",
    "timeline_bars",
    "traffic_heatmap",
]

PathLike = str | os.PathLike[str]

DPI = 100
IMAGE_SIDE_PX_AT_DPI = 560  # a large heatmap's side in pixels at DPI (8.5 x 7 in figure)
"""Pixels per inch of every PNG."""

ANNOTATE_MAX_N = 16
"""Heatmaps of at most this many rows get their values written in the cells."""

SEABORN_MAX_N = ANNOTATE_MAX_N
"""Larger heatmaps are drawn as one image (``imshow``), not seaborn's mesh of cells: the
same cells (nearest-neighbour where each spans several pixels) at a fraction of the
time, and without importing seaborn (and the pandas and scipy it brings), a second of a
big run's writing, for the route-bandwidth map of 128 x 128 blocks."""

LOG_SCALE_SPREAD = 10.0
"""A bandwidth heatmap whose largest value is more than this times its smallest is
coloured on a log scale."""

PER_CELL_TICKS_MAX_N = 32
"""Heatmaps of at most this many rows get one tick label per row/column."""

BARS_MAX_N = 64
"""Timelines of more ranks are drawn as filled steps (no per-rank bars, gaps or hatching)."""

MAX_LINES = 8
"""At most this many links are drawn in the utilisation-over-time panel."""

_UNITS = BYTE_UNITS
_MASKED_COLOUR = "#d0d0d0"  # light grey, unlike any colour of the colormap
_CMAP = "viridis"


def choose_unit(max_bytes: float) -> tuple[str, float]:
    """The decimal unit in which to show values up to ``max_bytes`` bytes.

    Returns ``(name, bytes_per_unit)``: the largest of B, KB (1e3 B), MB (1e6 B),
    GB (1e9 B), TB and PB whose size does not exceed ``max_bytes``; "B" for values
    below 1000 (including 0). Values are then displayed as ``bytes / bytes_per_unit``.
    """
    value = float(max_bytes)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"max_bytes must be finite and >= 0, got {max_bytes!r}")
    for name, size in _UNITS:
        if value >= size:
            return name, size
    return "B", 1.0


def _unit_note(unit: str, size: float) -> str:
    return unit if unit == "B" else f"{unit}, 1 {unit} = {size:.0e} B".replace("e+0", "e")


# ---------------------------------------------------------------------------
# Saving


def _new_figure(width_in: float, height_in: float) -> Figure:
    fig = Figure(figsize=(width_in, height_in), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, path: PathLike) -> Path:
    """Write ``fig`` as a PNG at ``path`` atomically, then release the figure."""
    try:
        return atomic_write(
            path,
            lambda f: fig.savefig(f, format="png", dpi=fig.dpi, facecolor="white"),
            binary=True,
        )
    finally:
        fig.clear()


# ---------------------------------------------------------------------------
# Heatmaps


def _square(matrix: np.ndarray, what: str) -> np.ndarray:
    m = np.asarray(matrix, dtype=float)
    if m.ndim != 2 or m.shape[0] != m.shape[1] or m.shape[0] == 0:
        raise ValueError(f"{what} must be a non-empty square matrix, got shape {m.shape}")
    return m


def _tick_indices(n: int, max_ticks: int = 8) -> list[int]:
    """A handful of evenly spaced, round indices in ``range(n)``."""
    if n <= max_ticks:
        return list(range(n))
    if n & (n - 1) == 0:  # power of two: ticks at multiples of a power of two
        step = 1
        while n / step > max_ticks:
            step *= 2
    else:
        step = next(m * 10**k for k in range(12) for m in (1, 2, 5) if n / (m * 10**k) <= max_ticks)
    return list(range(0, n, step))


def _max_pool(values: np.ndarray, k: int, smallest: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``values`` (NaN: no value) in blocks of ``k`` x ``k`` cells, each block its
    largest value (its smallest with ``smallest``), and where a block holds none."""
    if k == 1:
        return values, np.isnan(values)
    n = values.shape[0]
    m = -(-n // k)
    padded = np.full((m * k, m * k), np.nan)
    padded[:n, :n] = values
    blocks = padded.reshape(m, k, m, k)
    empty = np.isnan(blocks).all(axis=(1, 3))
    if smallest:
        picked = np.where(np.isnan(blocks), np.inf, blocks).min(axis=(1, 3))
    else:
        picked = np.where(np.isnan(blocks), -np.inf, blocks).max(axis=(1, 3))
    return np.where(empty, np.nan, picked), empty


TITLE_WRAP_CHARS = 60
"""Characters per line of a heatmap's title (longer ones wrap)."""


def wrapped(title: str, width: int = TITLE_WRAP_CHARS) -> str:
    """``title`` with its long lines (a job's, naming every job it shares with) broken
    at ``width`` characters; its own line breaks kept."""
    return "\n".join(w for line in title.split("\n") for w in textwrap.wrap(line, width) or [""])


def _heatmap(
    values: np.ndarray,
    mask: np.ndarray,
    path: PathLike,
    *,
    title: str,
    cbar_label: str,
    masked_note: str,
    labels: Sequence[str] | None,
    axis_name: str,
    pool_smallest: bool = False,
    log_scale: bool = False,
) -> Path:
    """Draw ``values`` (already in display units) with ``mask``ed cells grey; with more
    cells than pixels each pixel shows the largest of its cells (the smallest with
    ``pool_smallest``: what stands out in the matrix, a peak or a slow pair); with
    ``log_scale`` (values > 0 where not masked) colours on a log scale from the smallest
    value to the largest, else linear from 0."""
    n = values.shape[0]
    if labels is not None and len(labels) != n:
        raise ValueError(f"{len(labels)} labels for a {n}x{n} matrix")
    names = [str(s) for s in labels] if labels is not None else [str(i) for i in range(n)]
    annotate = n <= ANNOTATE_MAX_N
    if annotate:
        side = min(max(2.5 + 0.6 * n, 4.0), 11.0)
        fig = _new_figure(side + 1.5, side)
    else:
        fig = _new_figure(8.5, 7.0)
    ax = fig.add_subplot()
    ax.set_facecolor(_MASKED_COLOUR)
    shown = np.where(mask, np.nan, values)
    vmax = float(np.nanmax(shown)) if not mask.all() else 1.0
    cmap = matplotlib.colormaps[_CMAP].with_extremes(bad=_MASKED_COLOUR)
    font = 9 if n <= 8 else 7
    vmax = vmax if vmax > 0 else 1.0
    scale: dict = {"vmin": 0.0, "vmax": vmax}
    if log_scale:
        scale = {"norm": LogNorm(vmin=float(np.nanmin(shown)), vmax=vmax)}
        cbar_label += ", log scale"
    if n <= SEABORN_MAX_N:
        # Imported here: seaborn brings pandas and scipy (a second of start-up), which a
        # big run's heatmaps (drawn as images) never use.
        import seaborn as sns

        sns.heatmap(
            shown,
            mask=mask,
            ax=ax,
            cmap=cmap,
            **scale,
            square=True,
            annot=annotate,
            fmt=".3g",
            annot_kws={"fontsize": font},
            xticklabels=False,
            yticklabels=False,
            rasterized=True,
            cbar_kws={"label": cbar_label},
        )
    else:  # one image instead of n*n quads: ~10x faster
        # More cells than pixels: each pixel shows the largest of its k x k cells (averaged
        # by the renderer, a matrix's peaks would blend into the grey of its empty cells),
        # or on a bandwidth map the smallest: the slow pairs (a degraded link) are what
        # it is read for, and the largest hid them.
        k = math.ceil(n / IMAGE_SIDE_PX_AT_DPI)
        pooled, empty = _max_pool(shown, k, smallest=pool_smallest)
        if k > 1:
            which = "smallest" if pool_smallest else "largest"
            masked_note += f"; each pixel the {which} of {k} x {k} cells"
        image = ax.imshow(
            np.ma.masked_array(pooled, mask=empty),
            cmap=cmap,
            **scale,
            extent=(0, n, n, 0),
            interpolation="nearest",
            rasterized=True,
        )
        fig.colorbar(image, ax=ax, label=cbar_label)
    ticks = list(range(n)) if n <= PER_CELL_TICKS_MAX_N else _tick_indices(n)
    rotation = 90 if max(len(names[i]) for i in ticks) > 4 else 0
    ax.set_xticks(
        [i + 0.5 for i in ticks], [names[i] for i in ticks], rotation=rotation, fontsize=font
    )
    ax.set_yticks([i + 0.5 for i in ticks], [names[i] for i in ticks], rotation=0, fontsize=font)
    ax.set_xlabel(f"receiver {axis_name}\n({masked_note})")
    ax.set_ylabel(f"sender {axis_name}")
    ax.set_title(wrapped(title))
    return _save(fig, path)


def traffic_heatmap(
    matrix_bytes: np.ndarray,
    path: PathLike,
    *,
    title: str,
    labels: Sequence[str] | None = None,
    axis_name: str = "rank",
    block: int = 1,
) -> Path:
    """Heatmap of bytes sent, row = sender, column = receiver; returns the PNG path.
    ``block`` > 1: each cell sums a block of ``block`` x ``block`` endpoint pairs, as the
    colorbar label says.

    ``matrix_bytes[i, j]`` is the number of bytes (finite, >= 0) sent from
    ``i`` to ``j``. The whole matrix is shown in one decimal unit chosen from
    its maximum by :func:`choose_unit` and named in the colorbar label, e.g.
    "traffic (MB, 1 MB = 1e6 B)". Zero cells are grey, so they never look like
    small non-zero ones. Up to :data:`ANNOTATE_MAX_N` rows the cells carry
    their values; larger matrices (1024x1024 is fine) get no annotations, a
    handful of tick labels and a fixed 850x700 pixel figure. ``labels`` name
    the rows/columns (default: indices); ``axis_name`` completes the axis
    labels "sender <axis_name>" / "receiver <axis_name>".
    """
    m = _square(matrix_bytes, "matrix_bytes")
    if not np.isfinite(m).all() or (m < 0).any():
        raise ValueError("matrix_bytes must be finite and >= 0")
    unit, size = choose_unit(float(m.max()))
    return _heatmap(
        m / size,
        m == 0,
        path,
        title=title,
        cbar_label=(
            f"traffic ({_unit_note(unit, size)})"
            if block == 1
            else f"traffic per block of {block} x {block} pairs ({_unit_note(unit, size)})"
        ),
        masked_note="grey = no traffic (0 B)",
        labels=labels,
        axis_name=axis_name,
    )


def bandwidth_heatmap(
    matrix_bytes_per_s: np.ndarray,
    path: PathLike,
    *,
    title: str,
    labels: Sequence[str] | None = None,
    axis_name: str = "rank",
) -> Path:
    """Heatmap of bandwidths in GB/s (1 GB/s = 1e9 B/s), row = sender, column = receiver.

    ``matrix_bytes_per_s[i, j]`` is a bandwidth in bytes/s (>= 0). Non-finite
    entries (NaN or inf, typically the diagonal: a rank to itself) and zeros
    are drawn grey (blank). Layout, annotations and ticks as
    :func:`traffic_heatmap`, but with more cells than pixels each pixel is the smallest
    of its cells (the slow pairs stay in sight), and where the largest bandwidth is more
    than :data:`LOG_SCALE_SPREAD` times the smallest (NVLink's 300 GB/s beside NICs of
    12.5 and 25 GB/s, which a linear scale from 0 draws alike) the colours are on a log
    scale, as the colour bar says. Returns the PNG path.
    """
    m = _square(matrix_bytes_per_s, "matrix_bytes_per_s")
    with np.errstate(invalid="ignore"):
        if (m < 0).any():
            raise ValueError("matrix_bytes_per_s must be >= 0")
    mask = ~np.isfinite(m) | (m == 0)
    shown = m[~mask]
    spread = shown.max() / shown.min() if shown.size else 1.0
    return _heatmap(
        np.where(mask, 0.0, m) / GB,
        mask,
        path,
        title=title,
        cbar_label="bandwidth (GB/s, 1 GB/s = 1e9 B/s)",
        masked_note="grey = self or no value",
        labels=labels,
        axis_name=axis_name,
        pool_smallest=True,
        log_scale=spread > LOG_SCALE_SPREAD,
    )


# ---------------------------------------------------------------------------
# Links


def _step_xy(points: Sequence[tuple[float, float]], t_end_s: float) -> tuple[np.ndarray, ...]:
    """Change points ``(time_s, rate)`` as arrays for a ``where="post"`` step plot to t_end."""
    pts = np.asarray(points, dtype=float).reshape(-1, 2)
    t, r = pts[:, 0], pts[:, 1]
    if (np.diff(t) < 0).any():
        raise ValueError("series change points must be sorted by time")
    if t[-1] < t_end_s:
        t, r = np.append(t, t_end_s), np.append(r, r[-1])
    return t, r


def link_utilisation_plot(
    link_names: Sequence[str],
    busy_fraction: Sequence[float],
    link_bytes: Sequence[int],
    path: PathLike,
    *,
    title: str,
    series: Mapping[str, Sequence[tuple[float, float]]] | None = None,
    capacities_bytes_per_s: Mapping[str, float] | None = None,
    top: int = 20,
) -> Path:
    """Busiest links, and optionally their utilisation over time; returns the PNG path.

    Top panel: horizontal bars of the ``top`` links with the largest
    ``busy_fraction`` (fraction of the simulated time a link carried traffic,
    0..1), busiest at the top, each annotated with its bytes carried
    (``link_bytes``, shown in its own decimal unit). Ties are broken by bytes,
    then by input order.

    Bottom panel, only if ``series`` is given: for the first
    :data:`MAX_LINES` of those top links that have an entry in ``series``
    (link name -> change points ``(time_s, rate_bytes_per_s)``, sorted by
    time; the rate holds until the next point, the last one until the end of
    the longest series), a step plot against time in ms. With
    ``capacities_bytes_per_s`` (which must then cover every plotted link) the
    y axis is the utilisation rate / capacity (0..1); without it, the rate in
    GB/s (1e9 B/s).
    """
    names = [str(s) for s in link_names]
    frac = np.asarray(busy_fraction, dtype=float)
    nbytes = np.asarray(link_bytes, dtype=float)
    if not len(names) == len(frac) == len(nbytes):
        raise ValueError("link_names, busy_fraction and link_bytes differ in length")
    if top < 1:
        raise ValueError(f"top must be >= 1, got {top}")
    if not np.isfinite(frac).all() or (frac < 0).any() or (frac > 1 + 1e-9).any():
        raise ValueError("busy_fraction must be in [0, 1]")
    order = sorted(range(len(names)), key=lambda i: (-frac[i], -nbytes[i], i))[:top]
    k = len(order)

    bar_h = max(1.6, 0.28 * k + 1.2)
    line_h = 3.6 if series is not None else 0.0
    fig = _new_figure(9.0, bar_h + line_h)
    if series is not None:
        ax_bar, ax_line = fig.subplots(2, 1, height_ratios=[bar_h, line_h])
    else:
        ax_bar, ax_line = fig.add_subplot(), None

    y = np.arange(k)
    ax_bar.barh(y, frac[order], color="tab:blue", height=0.7)
    for yi, i in zip(y, order, strict=True):
        ax_bar.text(frac[i] + 0.01, yi, format_bytes(nbytes[i]), va="center", fontsize=8)
    ax_bar.set_yticks(y, [names[i] for i in order], fontsize=8)
    ax_bar.set_ylim(max(k, 1) - 0.5, -0.5)  # busiest at the top
    ax_bar.set_xlim(0, 1.22)
    ax_bar.set_xticks(np.linspace(0, 1, 6))
    ax_bar.set_xlabel("busy fraction (share of simulated time carrying traffic, 0–1)")
    ax_bar.set_title(f"{title}\nbusiest {k} of {len(names)} links (labels: bytes carried)")
    ax_bar.grid(axis="x", alpha=0.3)
    if k == 0:
        ax_bar.text(0.5, 0.5, "no links", ha="center", va="center", transform=ax_bar.transAxes)

    if ax_line is not None:
        assert series is not None
        _utilisation_panel(ax_line, [names[i] for i in order], series, capacities_bytes_per_s)
    return _save(fig, path)


def distinct_curves(
    names: Sequence[str],
    series: Mapping[str, Sequence[tuple[float, float]]],
    capacities_bytes_per_s: Mapping[str, float] | None,
    limit: int,
) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """The step curves ``(label, time_ms, shown)`` of ``names`` (in order) that have a
    series, at most ``limit``; links whose curves are identical share one, labelled
    "first (+k alike)" (a symmetric collective gives many links the same series, and
    identical lines drawn on top of each other would look like one unnamed line).
    ``shown`` is rate / capacity with capacities, else GB/s."""
    have = [n for n in names if len(series.get(n, ())) > 0]
    if not have:
        return []
    if capacities_bytes_per_s is not None:
        missing = [n for n in have if n not in capacities_bytes_per_s]
        if missing:
            raise ValueError(f"no capacity for links {missing}")
    t_end_s = max(float(series[n][-1][0]) for n in have)
    groups: dict[tuple, list] = {}
    for name in have:
        t_s, rate = _step_xy(series[name], t_end_s)
        if capacities_bytes_per_s is None:
            shown = rate / GB
        else:
            cap = float(capacities_bytes_per_s[name])
            if not cap > 0:
                raise ValueError(f"capacity of {name!r} must be > 0, got {cap}")
            shown = rate / cap
        key = (tuple(np.round(t_s, 12)), tuple(np.round(shown, 9)))
        if key in groups:
            groups[key][0].append(name)
        elif len(groups) < limit:
            groups[key] = [[name], t_s * MS_PER_S, shown]
    out = []
    for members, t_ms, shown in groups.values():
        more = len(members) - 1
        out.append((members[0] + (f" (+{more} alike)" if more else ""), t_ms, shown))
    return out


RATE_BINS = 200
"""A link's rate series with more change points than twice this is drawn as its mean
over this many equal time bins."""


def _binned_means(t: np.ndarray, v: np.ndarray, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """The step function ``v`` (value ``v[i]`` from ``t[i]`` to ``t[i + 1]``, the last
    one a point) averaged over ``bins`` equal bins of ``[t[0], t[-1]]``: the bins' left
    edges and their means (the last repeated at the right edge, for a post step)."""
    area = np.concatenate(([0.0], np.cumsum(v[:-1] * np.diff(t))))
    edges = np.linspace(t[0], t[-1], bins + 1)
    # The integral of a step function is piecewise linear between its change points.
    means = np.diff(np.interp(edges, t, area)) / np.diff(edges)
    return edges, np.append(means, means[-1])


def _utilisation_panel(
    ax: Axes,
    top_names: Sequence[str],
    series: Mapping[str, Sequence[tuple[float, float]]],
    capacities_bytes_per_s: Mapping[str, float] | None,
) -> None:
    curves = distinct_curves(top_names, series, capacities_bytes_per_s, MAX_LINES)
    ax.set_xlabel("time (ms)")
    if capacities_bytes_per_s is None:
        ax.set_ylabel("rate (GB/s, 1 GB/s = 1e9 B/s)")
    else:
        ax.set_ylabel("utilisation (rate / capacity)")
    ax.set_title(f"rate over time of the busiest links with a series ({len(curves)} distinct)")
    if not curves:
        ax.text(
            0.5, 0.5, "no series for these links", ha="center", va="center", transform=ax.transAxes
        )
        return
    binned = False
    # Seconds once the run is 10 s or longer (a time axis of 100,000 ms reads badly).
    seconds = max(float(np.max(t_ms)) for _, t_ms, _ in curves) >= 10 * MS_PER_S
    if seconds:
        ax.set_xlabel("time (s)")
    for label, t_ms, shown in curves:
        t, v = np.asarray(t_ms, dtype=float), np.asarray(shown, dtype=float)
        if seconds:
            t = t / MS_PER_S
        if len(t) > 2 * RATE_BINS:
            t, v = _binned_means(t, v, RATE_BINS)
            binned = True
        ax.step(t, v, where="post", label=label, linewidth=1.2)
    if binned:
        # A link that switches on and off thousands of times would draw a solid block at
        # its peak: the mean per bin shows how much of the time it is busy.
        ax.set_title(ax.get_title() + f"; mean over {RATE_BINS} equal time bins")
    if capacities_bytes_per_s is not None:
        ax.set_ylim(bottom=0, top=max(1.05, ax.get_ylim()[1]))
    else:
        ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)


# ---------------------------------------------------------------------------
# Ranks


def timeline_bars(
    rank_labels: Sequence[str],
    compute_s: Sequence[float],
    exposed_comm_s: Sequence[float],
    overlapped_comm_s: Sequence[float],
    path: PathLike,
    *,
    title: str,
    start_s: Sequence[float] | None = None,
) -> Path:
    """Horizontal bars per rank: compute, then exposed communication, so a bar ends at
    the rank's time; the communication that overlapped compute is drawn as a thinner
    band over the end of the compute it ran behind (at most the compute's length).

    Inputs are durations in seconds (>= 0), one per rank. ``start_s``: when each rank
    started (seconds; a job starting later on a shared network), its bar drawn from
    there; default all at 0. The axis is in ms when the longest bar ends under 1 s,
    else in s. Many ranks get a handful of tick labels. Returns the PNG path.
    """
    labels = [str(s) for s in rank_labels]
    parts = [np.asarray(a, dtype=float) for a in (compute_s, exposed_comm_s, overlapped_comm_s)]
    if any(len(p) != len(labels) for p in parts):
        raise ValueError("rank_labels and the three duration lists differ in length")
    if any((~np.isfinite(p)).any() or (p < 0).any() for p in parts):
        raise ValueError("durations must be finite and >= 0")
    n = len(labels)
    compute, exposed = parts[0], parts[1]
    hidden = np.minimum(parts[2], compute)
    start = np.zeros(n) if start_s is None else np.asarray(start_s, dtype=float)
    if len(start) != n or (~np.isfinite(start)).any() or (start < 0).any():
        raise ValueError("start_s must give every rank a finite start >= 0")
    total_s = start + compute + exposed
    unit, per_s = ("ms", MS_PER_S) if (total_s.max() if n else 0.0) < 1.0 else ("s", 1.0)

    fig = _new_figure(9.0, min(max(2.5, 0.3 * n + 1.6), 12.0))
    ax = fig.add_subplot()
    y = np.arange(n)
    begin = start * per_s
    end = begin + compute * per_s
    segments = (
        ("compute", "tab:green", None, begin, end, 0.8),
        ("exposed communication", "tab:red", None, end, end + exposed * per_s, 0.8),
        (
            "communication overlapped with compute (drawn over it)",
            "tab:orange",
            "//",
            end - hidden * per_s,
            end,
            0.35,
        ),
    )
    for label, colour, hatch, left, right, height in segments:
        if n <= BARS_MAX_N:
            ax.barh(
                y,
                right - left,
                left=left,
                height=height,
                color=colour,
                hatch=hatch,
                edgecolor="white",
                linewidth=0.5,
                label=label,
            )
        else:  # one polygon per segment kind instead of n bars: fast for 1000s of ranks
            edges = np.column_stack([y - height / 2, y + height / 2]).ravel()
            # (Ranks a pixel apart merge their bars into one area: the overlapped band
            # would hide the compute under it, and read as communication after it.)
            ax.fill_betweenx(
                edges,
                np.repeat(left, 2),
                np.repeat(right, 2),
                color=colour,
                alpha=0.45 if hatch else 1.0,
                lw=0,
                aa=False,
                label=label,
            )
    ticks = list(range(n)) if n <= 48 else _tick_indices(n, 12)
    ax.set_yticks(ticks, [labels[i] for i in ticks], fontsize=8)
    ax.set_ylim(n - 0.5, -0.5)  # first rank at the top
    ax.set_xlim(left=0)
    ax.set_xlabel(f"time ({unit})" if start_s is None else f"time from the run's start ({unit})")
    ax.set_ylabel("rank")
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(title)
    fig.legend(loc="outside lower center", ncols=3, fontsize=8, frameon=False)
    return _save(fig, path)


# ---------------------------------------------------------------------------
# Model validation


def measured_vs_predicted(
    x: Sequence[float],
    measured: Sequence[float],
    predicted: Sequence[float] | Mapping[str, Sequence[float]],
    path: PathLike,
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    logx: bool = False,
    logy: bool = False,
    integer_x: bool = False,
) -> Path:
    """Measured and predicted series against ``x``, and their relative error in %.
    ``predicted``: one series, or several by name (e.g. two models of the same run),
    each with its own error line. ``integer_x``: ticks at whole numbers only (x counts
    something, e.g. epochs).

    Put the units in ``xlabel`` and ``ylabel`` (e.g. "message size (B)",
    "time (ms)"): values are plotted as given. Points are sorted by ``x``.
    Lower panel: ``100 * (predicted - measured) / measured``; points with
    ``measured == 0`` have no relative error and are left out. ``logx``
    applies to both panels, ``logy`` to the upper one. Returns the PNG path.
    """
    named = dict(predicted) if isinstance(predicted, Mapping) else {"predicted": predicted}
    xs, meas = (np.asarray(a, dtype=float) for a in (x, measured))
    preds = {k: np.asarray(v, dtype=float) for k, v in named.items()}
    if not preds or any(not len(xs) == len(meas) == len(p) for p in preds.values()):
        raise ValueError("x, measured and predicted differ in length")
    order = np.argsort(xs, kind="stable")
    xs, meas = xs[order], meas[order]
    fig = _new_figure(8.0, 6.5)
    ax, ax_err = fig.subplots(2, 1, sharex=True, height_ratios=[2.2, 1.0])
    ax.plot(xs, meas, "o-", label="measured", color="tab:blue", markersize=5)
    styles = [("s--", "tab:orange"), ("^--", "tab:green"), ("v--", "tab:purple")]
    errors = []
    for k, (name, pred) in enumerate(preds.items()):
        pred = pred[order]
        marker, colour = styles[k % len(styles)]
        ax.plot(xs, pred, marker, label=name, color=colour, markersize=5)
        with np.errstate(divide="ignore", invalid="ignore"):
            rel_pct = np.where(meas != 0, 100.0 * (pred - meas) / meas, np.nan)
        errors.append((name, rel_pct, colour))
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()
    ax.grid(alpha=0.3, which="both")
    if logy:
        ax.set_yscale("log")
    ax_err.axhline(0.0, color="black", linewidth=0.8)
    for name, rel_pct, colour in errors:
        one = len(errors) == 1
        ax_err.plot(xs, rel_pct, "d-", color="tab:red" if one else colour, markersize=4, label=name)
    if len(errors) > 1:
        ax_err.legend()
    ax_err.set_ylabel("relative error (%)\n(pred − meas) / meas")
    ax_err.set_xlabel(xlabel)
    ax_err.grid(alpha=0.3, which="both")
    if logx:
        ax_err.set_xscale("log")  # shared with the upper panel
    if integer_x:
        from matplotlib.ticker import MaxNLocator

        ax_err.xaxis.set_major_locator(MaxNLocator(integer=True))
    return _save(fig, path)
