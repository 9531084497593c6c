"""Tests of simnet.plots: every picture is a readable PNG, written atomically.

Checks invariants (file opens, plausible size, unit named in the colorbar, no
temp files, no leaked figures), not pixel snapshots.
"""

from __future__ import annotations

import gc
import math
import time
import weakref
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.figure import Figure
from PIL import Image

from simnet import plots

# ----------------------------------------------------------------------------- helpers


def open_png(path: Path) -> tuple[int, int]:
    """The PNG's (width, height) in pixels, after checking PIL can decode it."""
    assert path.exists()
    with Image.open(path) as im:
        assert im.format == "PNG"
        im.load()
        return im.size


def plausible(size: tuple[int, int]) -> None:
    w, h = size
    assert 300 <= w <= 2000 and 150 <= h <= 2000, size


def only_file(directory: Path, name: str) -> None:
    """``name`` is the only entry in ``directory``: no temp file left behind."""
    assert sorted(p.name for p in directory.iterdir()) == [name]


@dataclass
class AxesSnapshot:
    xlabel: str
    ylabel: str
    xscale: str
    yscale: str
    n_patches: int
    lines: list[tuple[str, np.ndarray]]  # (label, ydata)


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> list[list[AxesSnapshot]]:
    """Per figure passed to ``plots._save`` (which still writes it), a snapshot of its axes.

    Taken before saving, since the figure is cleared once written.
    """
    figs: list[list[AxesSnapshot]] = []
    real = plots._save

    def spy(fig: Figure, path):
        figs.append(
            [
                AxesSnapshot(
                    ax.get_xlabel(),
                    ax.get_ylabel(),
                    ax.get_xscale(),
                    ax.get_yscale(),
                    len(ax.patches),
                    [(str(ln.get_label()), np.asarray(ln.get_ydata())) for ln in ax.get_lines()],
                )
                for ax in fig.axes
            ]
        )
        return real(fig, path)

    monkeypatch.setattr(plots, "_save", spy)
    return figs


def ylabels(fig: list[AxesSnapshot]) -> list[str]:
    """Y labels of every axes of a figure, colorbars included."""
    return [ax.ylabel for ax in fig]


def traffic(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    m = rng.integers(1, 50_000_000, size=(n, n)).astype(np.int64)
    m[rng.random((n, n)) < 0.3] = 0
    np.fill_diagonal(m, 0)
    return m


# ----------------------------------------------------------------------------- units


@pytest.mark.parametrize(
    ("max_bytes", "expected"),
    [
        (0, ("B", 1.0)),
        (1, ("B", 1.0)),
        (999, ("B", 1.0)),
        (999.999, ("B", 1.0)),
        (1000, ("KB", 1e3)),
        (999_999, ("KB", 1e3)),
        (1e6, ("MB", 1e6)),
        (999_999_999, ("MB", 1e6)),
        (1e9, ("GB", 1e9)),
        (2.5e9, ("GB", 1e9)),
        (7e12, ("TB", 1e12)),  # (the summary's units: a plot said 7,000 GB)
        (7e15, ("PB", 1e15)),
    ],
)
def test_choose_unit_exact(max_bytes: float, expected: tuple[str, float]) -> None:
    assert plots.choose_unit(max_bytes) == expected


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf")])
def test_choose_unit_rejects(bad: float) -> None:
    with pytest.raises(ValueError):
        plots.choose_unit(bad)


def test_format_bytes() -> None:
    assert plots.format_bytes(0) == "0 B"
    assert plots.format_bytes(999) == "999 B"
    assert plots.format_bytes(1500) == "1.5 KB"
    assert plots.format_bytes(2.5e9) == "2.5 GB"
    assert plots.format_bytes(1.5e15) == "1.5 PB"
    # Rounded up to 1,000 of a unit: the next unit (it said "1e+03 KB").
    assert plots.format_bytes(999_999) == "1 MB"
    assert plots.format_bytes(999_499) == "999 KB"
    assert plots.format_bytes(999_950_000) == "1 GB"
    assert plots.format_bytes(999.6) == "1 KB"


def test_tick_indices_are_few_and_round() -> None:
    assert plots._tick_indices(5) == [0, 1, 2, 3, 4]
    assert plots._tick_indices(1024) == list(range(0, 1024, 128))
    assert plots._tick_indices(1000) == list(range(0, 1000, 200))
    assert plots._tick_indices(100) == list(range(0, 100, 20))


# ----------------------------------------------------------------------------- heatmaps


@pytest.mark.parametrize("n", [2, 10])
def test_traffic_heatmap_small(tmp_path: Path, n: int, captured: list[list[AxesSnapshot]]) -> None:
    out = plots.traffic_heatmap(traffic(n), tmp_path / "t.png", title=f"{n} ranks")
    assert out == tmp_path / "t.png"
    plausible(open_png(out))
    only_file(tmp_path, "t.png")
    # max < 50e6 B and >= 1e6 B: megabytes, named with their definition
    assert "traffic (MB, 1 MB = 1e6 B)" in ylabels(captured[0])


def test_traffic_heatmap_unit_follows_max(
    tmp_path: Path, captured: list[list[AxesSnapshot]]
) -> None:
    plots.traffic_heatmap(np.array([[0, 999], [5, 0]]), tmp_path / "b.png", title="B")
    plots.traffic_heatmap(np.array([[0, 2.5e9], [1, 0]]), tmp_path / "g.png", title="GB")
    plots.traffic_heatmap(np.zeros((3, 3)), tmp_path / "z.png", title="all zero")
    assert "traffic (B)" in ylabels(captured[0])
    assert "traffic (GB, 1 GB = 1e9 B)" in ylabels(captured[1])
    assert "traffic (B)" in ylabels(captured[2])
    for name in ("b.png", "g.png", "z.png"):
        plausible(open_png(tmp_path / name))


def test_traffic_heatmap_labels_and_axis_name(tmp_path: Path) -> None:
    out = plots.traffic_heatmap(
        traffic(4), tmp_path / "n.png", title="nodes", labels=["a", "b", "c", "d"], axis_name="node"
    )
    plausible(open_png(out))
    with pytest.raises(ValueError):
        plots.traffic_heatmap(traffic(4), tmp_path / "x.png", title="x", labels=["a"])


def test_traffic_heatmap_1024_is_fast_and_small(
    tmp_path: Path, captured: list[list[AxesSnapshot]]
) -> None:
    m = traffic(1024)
    t0 = time.perf_counter()
    out = plots.traffic_heatmap(m, tmp_path / "big.png", title="1024 ranks")
    elapsed_s = time.perf_counter() - t0
    assert elapsed_s < 6.0
    assert out.stat().st_size < 3_000_000
    w, h = open_png(out)
    plausible((w, h))
    assert w <= 1200 and h <= 1200
    only_file(tmp_path, "big.png")
    assert "traffic (MB, 1 MB = 1e6 B)" in ylabels(captured[0])


@pytest.mark.parametrize(
    "bad", [np.zeros((2, 3)), np.zeros(4), np.zeros((0, 0)), -np.ones((2, 2)), np.eye(2) * np.nan]
)
def test_traffic_heatmap_rejects(tmp_path: Path, bad: np.ndarray) -> None:
    with pytest.raises(ValueError):
        plots.traffic_heatmap(bad, tmp_path / "x.png", title="x")
    assert not (tmp_path / "x.png").exists()


def test_bandwidth_heatmap_with_inf_and_nan_diagonal(
    tmp_path: Path, captured: list[list[AxesSnapshot]]
) -> None:
    rng = np.random.default_rng(1)
    bw = 5e9 + rng.random((6, 6)) * 20e9  # (within tenfold: a linear scale)
    np.fill_diagonal(bw, np.inf)
    bw[2, 2] = np.nan
    bw[0, 1] = 0.0
    out = plots.bandwidth_heatmap(bw, tmp_path / "bw.png", title="bandwidth")
    plausible(open_png(out))
    only_file(tmp_path, "bw.png")
    assert "bandwidth (GB/s, 1 GB/s = 1e9 B/s)" in ylabels(captured[0])


def test_bandwidth_heatmap_all_masked_and_large(tmp_path: Path) -> None:
    plausible(
        open_png(plots.bandwidth_heatmap(np.full((3, 3), np.nan), tmp_path / "a.png", title="a"))
    )
    bw = np.full((200, 200), 12.5e9)
    np.fill_diagonal(bw, np.nan)
    plausible(open_png(plots.bandwidth_heatmap(bw, tmp_path / "l.png", title="large")))


# ----------------------------------------------------------------------------- links


def link_data(n: int) -> tuple[list[str], list[float], list[int]]:
    rng = np.random.default_rng(2)
    names = [f"sw{i // 4}->node{i}:nic0" for i in range(n)]
    return names, list(rng.random(n)), [int(b) for b in rng.integers(0, 10**10, n)]


def test_link_utilisation_bars_only(tmp_path: Path) -> None:
    names, frac, nbytes = link_data(50)
    out = plots.link_utilisation_plot(names, frac, nbytes, tmp_path / "l.png", title="links")
    plausible(open_png(out))
    only_file(tmp_path, "l.png")


def test_link_utilisation_with_series(tmp_path: Path, captured: list[list[AxesSnapshot]]) -> None:
    names, frac, nbytes = link_data(30)
    series = {
        name: [(0.0, 0.0), (1e-4 * i, 5e9 + 1e8 * i), (2e-3 + 1e-4 * i, 0.0)]
        for i, name in enumerate(names)
    }
    caps = dict.fromkeys(names, 25e9)
    out = plots.link_utilisation_plot(
        names,
        frac,
        nbytes,
        tmp_path / "s.png",
        title="links",
        series=series,
        capacities_bytes_per_s=caps,
        top=12,
    )
    plausible(open_png(out))
    ax_bar, ax_line = captured[0]
    assert ax_bar.n_patches == 12
    assert len(ax_line.lines) == plots.MAX_LINES
    # the lines are the busiest links, in order
    busiest = [names[i] for i in np.argsort(-np.asarray(frac), kind="stable")]
    assert [label for label, _ in ax_line.lines] == busiest[: plots.MAX_LINES]
    assert ax_line.xlabel == "time (ms)"
    # without capacities: rates in GB/s; missing links are skipped
    plots.link_utilisation_plot(
        names, frac, nbytes, tmp_path / "r.png", title="r", series={busiest[1]: series[busiest[1]]}
    )
    assert "rate (GB/s, 1 GB/s = 1e9 B/s)" in ylabels(captured[1])
    assert len(captured[1][1].lines) == 1


def test_link_utilisation_edge_cases(tmp_path: Path) -> None:
    plausible(open_png(plots.link_utilisation_plot([], [], [], tmp_path / "e.png", title="e")))
    with pytest.raises(ValueError):
        plots.link_utilisation_plot(["a"], [0.5, 0.1], [1], tmp_path / "x.png", title="x")
    with pytest.raises(ValueError):
        plots.link_utilisation_plot(["a"], [1.5], [1], tmp_path / "x.png", title="x")
    with pytest.raises(ValueError):  # capacity missing for a plotted link
        plots.link_utilisation_plot(
            ["a"],
            [0.5],
            [1],
            tmp_path / "x.png",
            title="x",
            series={"a": [(0.0, 1.0)]},
            capacities_bytes_per_s={},
        )
    assert not (tmp_path / "x.png").exists()


# ----------------------------------------------------------------------------- ranks


def test_timeline_bars_ms_and_s(tmp_path: Path, captured: list[list[AxesSnapshot]]) -> None:
    ranks = [f"rank {i}" for i in range(8)]
    out = plots.timeline_bars(
        ranks, [0.2] * 8, [0.05] * 8, [0.03] * 8, tmp_path / "ms.png", title="step"
    )
    plausible(open_png(out))
    assert captured[0][0].xlabel == "time (ms)"
    plots.timeline_bars(ranks, [2.0] * 8, [0.5] * 8, [0.1] * 8, tmp_path / "s.png", title="s")
    assert captured[1][0].xlabel == "time (s)"
    # 1024 ranks: still readable size, few tick labels
    n = 1024
    plots.timeline_bars(
        [str(i) for i in range(n)],
        [0.1] * n,
        [0.01] * n,
        [0.02] * n,
        tmp_path / "big.png",
        title="big",
    )
    plausible(open_png(tmp_path / "big.png"))
    with pytest.raises(ValueError):
        plots.timeline_bars(["a"], [1.0], [-1.0], [0.0], tmp_path / "x.png", title="x")


# ----------------------------------------------------------------------------- validation


def test_measured_vs_predicted(tmp_path: Path, captured: list[list[AxesSnapshot]]) -> None:
    x = [2.0**k for k in range(4, 20)]
    measured = [1e-5 + s / 1e10 for s in x]
    predicted = [1.1e-5 + s / 1.05e10 for s in x]
    out = plots.measured_vs_predicted(
        x,
        measured,
        predicted,
        tmp_path / "m.png",
        title="allreduce",
        xlabel="size (B)",
        ylabel="time (s)",
        logx=True,
        logy=True,
    )
    plausible(open_png(out))
    top, err = captured[0]
    assert top.xscale == "log" and top.yscale == "log"
    assert err.xlabel == "size (B)"
    rel = err.lines[-1][1]
    assert rel[0] == pytest.approx(100 * (predicted[0] - measured[0]) / measured[0])
    # Two predictions of one run (e.g. the configured network and this machine): a line
    # and an error line each, by name, in x order.
    plots.measured_vs_predicted(
        [2, 1],
        [1.0, 2.0],
        {"configured": [0.5, 1.0], "this machine": [1.1, 1.8]},
        tmp_path / "two.png",
        title="two",
        xlabel="epoch",
        ylabel="time (s)",
    )
    top, err = captured[-1]
    assert [name for name, _ in top.lines] == ["measured", "configured", "this machine"]
    assert top.lines[1][1].tolist() == [1.0, 0.5]
    errors = {name: y for name, y in err.lines if name in ("configured", "this machine")}
    assert errors["configured"].tolist() == pytest.approx([-50.0, -50.0])
    assert errors["this machine"].tolist() == pytest.approx([-10.0, 10.0])
    with pytest.raises(ValueError, match="differ in length"):
        plots.measured_vs_predicted(
            [1], [1.0], {"a": [1.0, 2.0]}, tmp_path / "bad.png", title="", xlabel="", ylabel=""
        )
    # zero measurements and unsorted x are tolerated
    plots.measured_vs_predicted(
        [3, 1, 2],
        [0, 1, 2],
        [1, 1, 2],
        tmp_path / "z.png",
        title="z",
        xlabel="x (1)",
        ylabel="y (1)",
    )
    plausible(open_png(tmp_path / "z.png"))


# ----------------------------------------------------------------------------- atomicity


def test_failed_write_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def half_then_fail(self: Figure, f, **kwargs) -> None:
        f.write(b"\x89PNG half a file")
        raise OSError("disk full")

    monkeypatch.setattr(Figure, "savefig", half_then_fail)
    with pytest.raises(OSError, match="disk full"):
        plots.traffic_heatmap(traffic(3), tmp_path / "t.png", title="t")
    with pytest.raises(OSError, match="disk full"):
        plots.timeline_bars(["0"], [1.0], [0.0], [0.0], tmp_path / "sub" / "b.png", title="b")
    assert not (tmp_path / "t.png").exists()
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_failed_overwrite_keeps_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = plots.traffic_heatmap(traffic(3), tmp_path / "t.png", title="old")
    old = target.read_bytes()

    def fail(self: Figure, f, **kwargs) -> None:
        f.write(b"junk")
        raise RuntimeError("boom")

    monkeypatch.setattr(Figure, "savefig", fail)
    with pytest.raises(RuntimeError):
        plots.traffic_heatmap(traffic(3, seed=9), target, title="new")
    assert target.read_bytes() == old
    only_file(tmp_path, "t.png")


def test_figures_are_released(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    refs: list[weakref.ref[Figure]] = []
    real = plots._save

    def spy(fig: Figure, path):
        refs.append(weakref.ref(fig))
        return real(fig, path)

    monkeypatch.setattr(plots, "_save", spy)
    before = plt.get_fignums()
    for i in range(2):
        plots.traffic_heatmap(traffic(3), tmp_path / f"t{i}.png", title="t")
        plots.timeline_bars(["0"], [0.1], [0.0], [0.0], tmp_path / f"b{i}.png", title="b")
    gc.collect()
    assert plt.get_fignums() == before
    assert all(r() is None for r in refs)


def test_identical_link_series_share_one_labelled_line():
    # 8 links of a symmetric collective with the very same series, and one other.
    same = [(0.0, 5e9), (1e-3, 0.0)]
    series = {f"l{i}": same for i in range(8)} | {"odd": [(0.0, 2e9), (2e-3, 0.0)]}
    names = [*(f"l{i}" for i in range(8)), "odd"]
    curves = plots.distinct_curves(names, series, dict.fromkeys(names, 10e9), limit=8)
    assert [label for label, _, _ in curves] == ["l0 (+7 alike)", "odd"]
    assert list(curves[0][2]) == [0.5, 0.0, 0.0]  # utilisation, until the longest series ends
    assert list(curves[0][1]) == [0.0, 1.0, 2.0]  # ms


def test_timeline_bars_end_at_each_ranks_time(tmp_path: Path, monkeypatch) -> None:
    # Compute 200 ms, exposed 50 ms, 300 ms of communication overlapped (more than the
    # compute: drawn over the compute only): the bars reach 250 ms, not 550.
    spans: list[tuple[float, float]] = []
    real = plots._save

    def spy(fig, path):
        for patch in fig.axes[0].patches:
            x, w = patch.get_x(), patch.get_width()
            spans.append((round(x, 9), round(x + w, 9)))
        return real(fig, path)

    monkeypatch.setattr(plots, "_save", spy)
    plots.timeline_bars(
        ["0", "1"], [0.2, 0.1], [0.05, 0.0], [0.3, 0.04], tmp_path / "b.png", title="b"
    )
    assert max(end for _, end in spans) == 250.0
    assert sorted(set(spans)) == sorted(
        {(0.0, 200.0), (0.0, 100.0), (200.0, 250.0), (100.0, 100.0), (60.0, 100.0)}
    )


def test_timeline_bars_start_where_each_rank_started(tmp_path: Path, monkeypatch) -> None:
    spans: list[tuple[float, float]] = []
    labels: list[str] = []
    real = plots._save

    def spy(fig, path):
        for patch in fig.axes[0].patches:
            x, w = patch.get_x(), patch.get_width()
            spans.append((round(x, 9), round(x + w, 9)))
        labels.append(fig.axes[0].get_xlabel())
        return real(fig, path)

    monkeypatch.setattr(plots, "_save", spy)
    plots.timeline_bars(
        ["0", "1"], [0.2, 0.1], [0.05, 0.0], [0.0, 0.0], tmp_path / "b.png", title="b",
        start_s=[0.0, 0.5],
    )  # fmt: skip
    assert (0.0, 200.0) in spans and (200.0, 250.0) in spans  # rank 0 from 0
    assert (500.0, 600.0) in spans  # rank 1's compute from its start at 500 ms
    assert labels == ["time from the run's start (ms)"]
    with pytest.raises(ValueError, match="start_s must give every rank"):
        plots.timeline_bars(["0"], [1.0], [0.0], [0.0], tmp_path / "x.png", title="x",
                            start_s=[-1.0])  # fmt: skip


def test_a_big_heatmap_keeps_its_peaks_each_pixel_the_largest_of_its_cells(
    tmp_path: Path, captured: list[list[AxesSnapshot]]
) -> None:
    # 1,024 cells a side on about 560 pixels: alternate cells hold the maximum, the others
    # a sixth of it; averaged into pixels they would show no maximum at all.
    m = np.zeros((1024, 1024))
    m[::2, 1::2] = 240e6
    m[1::2, ::2] = 40e6
    out = plots.traffic_heatmap(m, tmp_path / "h.png", title="t")
    with Image.open(out) as im:
        rgb = np.asarray(im.convert("RGB")).astype(int)
    top = np.array(plt.get_cmap(plots._CMAP)(1.0)[:3]) * 255
    assert (np.abs(rgb - top).sum(axis=2) < 30).sum() > 100_000  # the maximum's colour
    assert any("each pixel the largest of 2 x 2 cells" in s.xlabel for s in captured[0])
    nan = np.nan
    cells = np.array([[1.0, nan, 3.0], [2.0, nan, nan], [nan, nan, nan]])
    pooled, empty = plots._max_pool(cells, 2)
    assert pooled[0].tolist() == [2.0, 3.0]
    assert empty.tolist() == [[False, False], [True, True]]


def test_a_long_rate_series_is_drawn_as_its_mean_per_time_bin():
    # A link busy every other microsecond for 2 ms: drawn point by point it is a solid
    # block at 1; its mean per bin is 0.5 everywhere.
    from simnet.plots import RATE_BINS, _binned_means

    t = np.arange(2001, dtype=float) * 1e-3  # ms
    v = np.where(np.arange(2001) % 2 == 0, 1.0, 0.0)
    edges, means = _binned_means(t, v, RATE_BINS)
    assert len(edges) == len(means) == RATE_BINS + 1
    assert edges[0] == 0.0 and edges[-1] == pytest.approx(2.0)
    np.testing.assert_allclose(means, 0.5, rtol=1e-9)
    # Uneven steps: the time-weighted mean.
    edges, means = _binned_means(np.array([0.0, 3.0, 4.0]), np.array([1.0, 0.0, 0.0]), 1)
    assert means[0] == pytest.approx(0.75)


def test_a_long_runs_link_rates_are_drawn_against_seconds() -> None:
    from matplotlib.figure import Figure

    for end_s, label, right in ((20.0, "time (s)", 20.0), (2.0, "time (ms)", 2000.0)):
        ax = Figure().subplots()
        series = {"a->b": [(0.0, 5e9), (end_s / 2, 0.0), (end_s, 5e9)]}
        plots._utilisation_panel(ax, ["a->b"], series, {"a->b": 1e10})
        assert ax.get_xlabel() == label
        assert max(ax.lines[0].get_xdata()) == right


def test_a_big_bandwidth_heatmap_keeps_its_slow_pairs_each_pixel_the_smallest(
    tmp_path: Path, captured: list[list[AxesSnapshot]]
) -> None:
    # 1,024 endpoints at 25 GB/s but one sender's routes at 5 GB/s (a degraded link):
    # each pixel the largest of its 2 x 2 cells hid that row; the smallest shows it.
    m = np.full((1024, 1024), 25e9)
    np.fill_diagonal(m, np.inf)
    m[301, :] = 5e9
    m[301, 301] = np.inf
    out = plots.bandwidth_heatmap(m, tmp_path / "b.png", title="t")
    assert any("each pixel the smallest of 2 x 2 cells" in s.xlabel for s in captured[0])
    with Image.open(out) as im:
        rgb = np.asarray(im.convert("RGB")).astype(int)
    low = np.array(plt.get_cmap(plots._CMAP)(5 / 25)[:3]) * 255
    assert (np.abs(rgb - low).sum(axis=2) < 30).sum() > 200  # the slow row is drawn
    nan = np.nan
    cells = np.array([[1.0, nan, 3.0], [2.0, nan, nan], [nan, nan, nan]])
    pooled, empty = plots._max_pool(cells, 2, smallest=True)
    assert pooled[0].tolist() == [1.0, 3.0]
    assert empty.tolist() == [[False, False], [True, True]]


@pytest.mark.parametrize("n", [6, 200])
def test_a_bandwidth_heatmap_spanning_more_than_tenfold_is_on_a_log_scale(
    tmp_path: Path, captured: list[list[AxesSnapshot]], n: int
) -> None:
    # NVLink pairs at 300 GB/s beside NIC pairs at 25 and 12.5 GB/s: on a linear scale
    # from 0 the two NICs are 4% of the colour range apart, on a log one 22%.
    m = np.full((n, n), 25e9)
    m[: n // 2, : n // 2] = 300e9
    m[n // 2 :, : n // 2] = 12.5e9
    np.fill_diagonal(m, np.inf)
    out = plots.bandwidth_heatmap(m, tmp_path / "b.png", title="t")
    assert "bandwidth (GB/s, 1 GB/s = 1e9 B/s), log scale" in ylabels(captured[0])
    if n > plots.SEABORN_MAX_N:  # one image: its colours are the log scale's
        with Image.open(out) as im:
            rgb = np.asarray(im.convert("RGB")).astype(int)
        where = (math.log(25) - math.log(12.5)) / (math.log(300) - math.log(12.5))
        mid = np.array(plt.get_cmap(plots._CMAP)(where)[:3]) * 255
        assert (np.abs(rgb - mid).sum(axis=2) < 30).sum() > 1000
    # Within tenfold (25 and 5 GB/s): linear from 0, as before.
    m[m > 25e9] = 5e9
    m[m == 12.5e9] = 5e9
    plots.bandwidth_heatmap(m, tmp_path / "c.png", title="t")
    assert "bandwidth (GB/s, 1 GB/s = 1e9 B/s)" in ylabels(captured[1])
