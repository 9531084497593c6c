"""simnet calibrate: fitting alpha and bandwidth to micro-benchmark results.

Synthetic microbench documents are generated here from chosen alpha and
bandwidth with the Hockney formula (and, for collectives, with the closed
forms of collective-costs.md written out independently), so the fit must
recover them.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

import simnet
from simnet.config import LINK_PARAM_KEYS, ConfigError
from workflows import calibrate as cal
from workload.collectives import alpha_beta_time_s, schedule_for

from .mpirun import mpirun

ALPHA_S = 3.7e-6
BW = 6.5e9  # bytes/s
P = 4
P2P_SIZES = [0, 8, 64, 512, 4096, 32768, 262144, 2**21, 2**23]
COLL_SIZES = [2**k for k in range(4, 24, 2)]  # 16 B .. 8 MB, whole array


def row(op, size_bytes, count_elems, t, algorithm="mpi"):
    return {
        "op": op,
        "algorithm": algorithm,
        "size_bytes": size_bytes,
        "count_elems": count_elems,
        "iterations": 20,
        "time_s": {"avg": t, "min": t * 0.98, "max": t * 1.05},
        "algbw_bytes_per_s": size_bytes / t,
        "busbw_bytes_per_s": size_bytes / t,
    }


EAGER = 65536  # simnet's default eager threshold: larger messages pay a request-to-send


def rts(*message_sizes, a=ALPHA_S):
    """The request-to-sends of a critical path of messages: one alpha each above EAGER."""
    return a * sum(1 for m in message_sizes if m > EAGER)


def hockney(size_bytes, a=ALPHA_S, bw=BW, handshake=True):
    return a + size_bytes / bw + (rts(size_bytes, a=a) if handshake else 0.0)


def allreduce_time(n, p=P, a=ALPHA_S, bw=BW):
    """MPICH's choice at a power-of-two p: recursive doubling up to 2 KB, else Rabenseifner
    (reduce-scatter halving n/2, n/4, ..., allgather doubling back)."""
    lg = int(math.log2(p))
    if n <= 2048 or n // 4 < p:
        return lg * (a + n / bw) + rts(*[n] * lg, a=a)
    halves = [n / 2**k for k in range(1, lg + 1)]
    return 2 * lg * a + 2 * (p - 1) / p * n / bw + rts(*halves, *halves, a=a)


def allgather_time(total, p=P, a=ALPHA_S, bw=BW):
    """n = total gathered; recursive doubling below 512 KB (power-of-two p: blocks of
    total/p, 2 total/p, ...), else ring (p - 1 blocks of total/p)."""
    if total < 524288:
        sizes = [total / p * 2**k for k in range(int(math.log2(p)))]
    else:
        sizes = [total / p] * (p - 1)
    return len(sizes) * a + (p - 1) / p * total / bw + rts(*sizes, a=a)


def doc(rows, world_size=P, kind="microbench"):
    return {
        "kind": kind,
        "world_size": world_size,
        "mpi": {"library": "MPICH Version: test", "thread_level": "single", "progress": "blocking"},
        "options": {"iters": 20},
        "versions": {"python": "3.11"},
        "results": rows,
    }


def synthetic(noise=0.0, ops=("pingpong", "allreduce", "allgather")):
    """Rows from the formulas; ``noise`` alternates +-noise relative error."""
    rows = []

    def add(r):
        sign = 1 if len(rows) % 2 else -1
        for k in ("avg", "min", "max"):
            r["time_s"][k] *= 1 + sign * noise
        rows.append(r)

    if "pingpong" in ops:
        for s in P2P_SIZES:
            add(row("pingpong", s, s // 4, hockney(s)))
    if "stream" in ops:
        for s in P2P_SIZES:
            add(row("stream", s, s // 4, hockney(s, a=1e-6, bw=2 * BW, handshake=False)))
    if "allreduce" in ops:
        for s in COLL_SIZES:
            add(row("allreduce", s, s // 4, allreduce_time(s)))
    if "allgather" in ops:
        for s in COLL_SIZES:
            add(row("allgather", s, s // 4 // P, allgather_time(s)))
    return rows


def write(tmp_path, data, name="mb.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def run(tmp_path, data, *extra):
    src = write(tmp_path, data)
    out = tmp_path / "link_params.json"
    rc = cal.main([str(src), "-o", str(out), *extra])
    return rc, out


def fit_of(lp, op):
    return next(f for f in lp["fit"]["ops"] if f["op"] == op)


# ---------------------------------------------------------------- recovery


@pytest.mark.parametrize("noise", [0.0, 0.005])
def test_recovers_alpha_and_bandwidth(tmp_path, noise, capsys):
    rc, out = run(tmp_path, doc(synthetic(noise)))
    assert rc == 0
    lp = json.loads(out.read_text())
    assert lp["alpha_us"] == pytest.approx(ALPHA_S * 1e6, rel=0.01)
    assert lp["bandwidth_limit_gb_per_s"] == pytest.approx(BW / 1e9, rel=0.01)
    # Each collective's effective alpha/bandwidth, fitted against MPICH's choice.
    for op in ("allreduce", "allgather"):
        f = fit_of(lp, op)
        assert f["alpha_us"] == pytest.approx(ALPHA_S * 1e6, rel=0.01), op
        assert f["bandwidth_gb_per_s"] == pytest.approx(BW / 1e9, rel=0.01), op
        assert f["max_rel_error"] <= 2 * noise + 1e-9
        assert f["r2"] > 0.999
    assert fit_of(lp, "allreduce")["algorithms_used"] == {
        "recursive_doubling": 4,
        "rabenseifner": 6,
    }
    text = capsys.readouterr().out
    assert "alpha = " in text and "folded into alpha" in text


def test_a_poor_fit_is_flagged(tmp_path, capsys):
    # Times tenfold apart from one size to the next: R^2 far below 0.9.
    rows = [row("pingpong", s, s // 4, hockney(s) * (3.0 if i % 2 else 0.3))
            for i, s in enumerate(P2P_SIZES)]  # fmt: skip
    rc, _ = run(tmp_path, doc(rows))
    assert rc == 0
    text = capsys.readouterr().out
    assert "  poor fit: the point-to-point times are not alpha + size / bandwidth here" in text
    # A good fit is not flagged.
    run(tmp_path, doc(synthetic()))
    assert "poor fit" not in capsys.readouterr().out


def test_stream_rows_when_no_pingpong(tmp_path):
    rc, out = run(tmp_path, doc(synthetic(ops=("stream",))))
    assert rc == 0
    lp = json.loads(out.read_text())
    assert lp["alpha_us"] == pytest.approx(1.0, rel=0.01)
    assert lp["bandwidth_limit_gb_per_s"] == pytest.approx(2 * BW / 1e9, rel=0.01)
    assert lp["fit"]["point_to_point"]["op"] == "stream"


def test_a_stream_fit_predicts_its_own_rows(tmp_path):
    # A stream's messages are posted together, their request-to-sends side by side: its
    # rows are alpha + size / bandwidth (none counted in the fit), and the report
    # predicts them so, above the eager threshold too (it added one alpha there: +27%).
    rep = tmp_path / "report"
    rc, out = run(tmp_path, doc(synthetic(ops=("stream",))), "--report", str(rep))
    assert rc == 0
    with (rep / "calibration_report.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(P2P_SIZES)
    big = [r for r in rows if int(r["size_bytes"]) > EAGER]
    assert big
    for r in rows:
        size = int(r["size_bytes"])
        want = hockney(size, a=1e-6, bw=2 * BW, handshake=False)
        assert float(r["predicted_s"]) == pytest.approx(want, rel=1e-6)
        assert float(r["closed_form_s"]) == pytest.approx(want, rel=1e-6)
    assert fit_of(json.loads(out.read_text()), "stream")["p2p_simulated_max_rel_error"] < 1e-6


def test_the_summary_gives_the_simulated_error_of_each_op(tmp_path, capsys):
    # bcast at 3 ranks, measured as simnet predicts it: the root's two eager sends of a
    # binomial tree overlap (1 alpha where the closed form counts ceil(lg 3) = 2), so
    # the closed-form fit's alpha is off; the simulated error, the column shown, is 0.
    import topologies

    p = 3
    g = topologies.switch(p, BW, 0.0)
    rows = [row("pingpong", s, s // 4, hockney(s)) for s in P2P_SIZES]
    for s in COLL_SIZES:
        t = simnet.collective_time(
            g,
            "bcast",
            "binomial",
            s,
            ALPHA_S,
            eager_threshold_bytes=EAGER,
            rendezvous_handshake=True,
        )
        rows.append(row("bcast", s, s // 4, t))
    assert rows[len(P2P_SIZES)]["time_s"]["avg"] < 1.5 * ALPHA_S  # 16 B: one alpha
    rc, out = run(tmp_path, doc(rows, world_size=p))
    assert rc == 0
    f = fit_of(json.loads(out.read_text()), "bcast")
    assert f["p2p_simulated_max_rel_error"] < 1e-6
    assert f["p2p_model_max_rel_error"] > 0.1  # the closed form's, kept in the file
    line = next(x for x in capsys.readouterr().out.splitlines() if x.strip().startswith("bcast"))
    assert line.split()[-1] == "0.0%"


def test_filled_send_buffers_are_said_on_the_terminal(tmp_path, capsys):
    data = doc(synthetic())
    data["options"]["send_buffer"] = "filled"
    rc, _ = run(tmp_path, data)
    assert rc == 0
    assert "note: send buffers: filled before timing" in capsys.readouterr().out
    data["options"]["send_buffer"] = "zero"
    run(tmp_path, data)
    assert "send buffers" not in capsys.readouterr().out


def test_least_squares_keeps_alpha_non_negative():
    import numpy as np

    sizes = np.array([1e3, 1e6, 1e7])
    t = sizes / BW - 1e-7  # a negative intercept
    alpha, beta, note = cal.least_squares(np.ones(3), sizes, t)
    assert alpha == 0.0 and beta > 0 and "alpha" in note


# ---------------------------------------------------------------- the file


def test_link_params_file_keys_and_fit_section(tmp_path):
    rc, out = run(tmp_path, doc(synthetic()), "--topology", "ring")
    assert rc == 0
    lp = json.loads(out.read_text())
    assert set(LINK_PARAM_KEYS) <= set(lp)
    assert set(lp) == {*LINK_PARAM_KEYS, "fit"}
    assert lp["link_latency_us"] == 0.0  # the latency is folded into alpha
    assert lp["intra_bandwidth_gb_per_s"] is None
    fit = lp["fit"]
    assert fit["source"] == str((tmp_path / "mb.json").resolve())
    assert fit["world_size"] == P
    assert fit["mpi"]["library"] == "MPICH Version: test"
    assert fit["topology"] == "ring"
    assert fit["date"][:2] == "20"
    assert {f["op"] for f in fit["ops"]} == {"pingpong", "allreduce", "allgather"}
    for f in fit["ops"]:
        assert {"alpha_us", "bandwidth_gb_per_s", "r2", "max_rel_error", "rows"} <= set(f)
    # The threshold whose request-to-sends the fits counted, for simnet to count them too.
    assert lp["eager_threshold_bytes"] == EAGER
    assert "eager_threshold_bytes" not in fit["not_calibrated"]
    assert not list(tmp_path.glob(".*.tmp"))  # written atomically


def pipeline_config(**network):
    # GPT-2 with 2 stages and 1 micro-batch on 2 ranks: one message forward, one back,
    # no compute: a ping-pong.
    return {
        "distributed": {"num_nodes": 2, "bandwidth_limit_gb_per_s": 10.0},
        "topology": {"type": "switch", "num_nodes": 2},
        "workload": {"name": "gpt2", "args": [8, 2, 1], "compute_scale": 0},
        "network": network,
        "logging": {"log_dir": "unused"},
    }


def test_link_params_change_the_prediction(tmp_path):
    rc, _ = run(tmp_path, doc(synthetic()))
    assert rc == 0
    msg = 808960 * 4  # bytes of one GPT-2 activation message
    cfg_path = tmp_path / "config.json"
    cfg_path.write_text(json.dumps(pipeline_config(link_params_file="link_params.json")))
    calibrated = simnet.simulate(cfg_path)
    lp = json.loads((tmp_path / "link_params.json").read_text())
    a, bw = lp["alpha_us"] * 1e-6, lp["bandwidth_limit_gb_per_s"] * 1e9
    # Each message is above the eager threshold: its request-to-send (a, as the calibrated
    # route has no latency of its own) goes first.
    assert calibrated.iteration_time_s == pytest.approx(2 * (a + a + msg / bw), rel=1e-9)
    assert any("calibrated: network.alpha_us" in s for s in calibrated.assumed)
    default = simnet.simulate(pipeline_config())
    # 10 GB/s, 5 us per link and two links per route, no alpha; the request-to-send
    # crosses the route first.
    assert default.iteration_time_s == pytest.approx(2 * (10e-6 + 10e-6 + msg / 10e9), rel=1e-9)
    assert calibrated.iteration_time_s != pytest.approx(default.iteration_time_s, rel=0.01)


# ---------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (None, "no such file"),
        ("{not json", "not JSON"),
        (json.dumps({"kind": "proxy-run", "phases": []}), "not a microbench document"),
        (json.dumps([1, 2]), "not a microbench document"),
        (json.dumps(doc(synthetic(ops=("allreduce",)))), "no point-to-point rows"),
        (json.dumps(doc([])), "non-empty list"),
        (json.dumps(doc([row("pingpong", 64, 16, 1e-6)] * 3)), "two message sizes"),
        (
            json.dumps(doc([{"op": "pingpong", "size_bytes": 8, "count_elems": 2}])),
            "time_s.avg",
        ),
        (json.dumps({**doc(synthetic()), "mpi": "x"}), "'mpi' is a str, not an object"),
        (json.dumps({**doc(synthetic()), "options": [1]}), "'options' is a list"),
    ],
    ids=[
        "missing",
        "not-json",
        "other-kind",
        "not-object",
        "no-p2p",
        "empty",
        "one-size",
        "no-time",
        "mpi-not-object",
        "options-not-object",
    ],
)
def test_bad_input_exits_2_with_one_line(tmp_path, capsys, content, needle):
    src = tmp_path / "mb.json"
    if content is not None:
        src.write_text(content)
    rc = cal.main([str(src), "-o", str(tmp_path / "lp.json")])
    assert rc == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and needle in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "lp.json").exists()


def test_cli_dispatch_and_exit_code(tmp_path):
    bad = write(tmp_path, {"kind": "proxy-run"})
    r = subprocess.run(
        [sys.executable, "-m", "simnet", "calibrate", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert r.returncode == 2
    assert "not a microbench document" in r.stderr


# ---------------------------------------------------------------- cost models


@pytest.mark.parametrize("p", [2, 3, 4, 6, 8, 12])
@pytest.mark.parametrize(
    ("op", "alg"),
    [
        ("allreduce", "ring"),
        ("allreduce", "recursive_doubling"),
        ("allreduce", "rabenseifner"),
        ("allgather", "ring"),
        ("allgather", "recursive_doubling"),
        ("allgather", "bruck"),
        ("reduce_scatter", "ring"),
        ("reduce_scatter", "recursive_halving"),
        ("alltoall", "pairwise"),
        ("alltoall", "bruck"),
        ("bcast", "binomial"),
        ("bcast", "scatter_recursive_doubling_allgather"),
        ("bcast", "scatter_ring_allgather"),
        ("reduce", "binomial"),
        ("reduce", "rabenseifner"),
    ],
)
def test_closed_forms_match_the_project_schedules(p, op, alg):
    count = 3 * 1024
    pow2_only = {
        ("allgather", "recursive_doubling"),
        ("reduce_scatter", "recursive_halving"),
        ("bcast", "scatter_recursive_doubling_allgather"),
    }
    if p & (p - 1) and (op, alg) in pow2_only:
        pytest.skip("a power of two only")
    ka, kb = cal.cost_terms(op, alg, p, count)
    s = schedule_for(op, alg, p, count)
    assert ka == pytest.approx(alpha_beta_time_s(s, 1.0, 0.0), rel=1e-9)
    assert kb == pytest.approx(alpha_beta_time_s(s, 0.0, 1.0), rel=1e-9)


@pytest.mark.parametrize("p", [3, 5, 6, 7, 12])
def test_rabenseifner_on_other_p_folds_to_the_largest_power_of_two(p):
    # The vector in, Rabenseifner among p' = 2^floor(lg p), the result out: (2 (p'-1)/p'
    # + 2) n bytes on the critical path (at p = 3: 3 n), as the schedule sends them.
    count = 3 * 1024
    q = 1 << (p.bit_length() - 1)
    ka, kb = cal.cost_terms("allreduce", "rabenseifner", p, count)
    assert kb == pytest.approx((2 * (q - 1) / q + 2) * 4 * count)
    s = schedule_for("allreduce", "rabenseifner", p, count)
    assert ka == alpha_beta_time_s(s, 1.0, 0.0)
    assert kb == pytest.approx(alpha_beta_time_s(s, 0.0, 1.0), rel=1e-9)


def test_request_to_sends_are_counted_on_the_critical_path():
    # A pingpong above the threshold: one; 4 ranks' Rabenseifner of 1 MiB: its four
    # messages (512, 256, 256, 512 KiB) all above 64 KiB, and with a threshold of 300 KB
    # only the two halves; a stream's window pays its side by side: none counted.
    assert cal.handshakes("pingpong", "message", 2, 16384, 65536) == 0.0
    assert cal.handshakes("pingpong", "message", 2, 16385, 65536) == 1.0
    assert cal.handshakes("stream", "message", 2, 1 << 20, 65536) == 0.0
    assert cal.handshakes("allreduce", "rabenseifner", 4, 1 << 18, 65536) == 4.0
    assert cal.handshakes("allreduce", "rabenseifner", 4, 1 << 18, 300_000) == 2.0
    assert cal.handshakes("allreduce", "rabenseifner", 4, 1 << 18, -1) == 0.0
    # Bruck's alltoall of 64 Ki elements a peer on 8 ranks: 3 messages of 4 blocks, each
    # above the threshold; 'direct' posts every block at once: one on the path.
    assert cal.handshakes("alltoall", "bruck", 8, 1 << 16, 65536) == 3.0
    assert cal.handshakes("alltoall", "direct", 8, 1 << 16, 65536) == 1.0


def test_without_a_threshold_no_request_to_send_is_fitted(tmp_path):
    # --eager-threshold -1 (a configuration without the handshake): the fits are the
    # closed forms alone, and the file leaves the threshold to the configuration.
    rows = [row("pingpong", s, s // 4, hockney(s, handshake=False)) for s in P2P_SIZES]
    rc, out = run(tmp_path, doc(rows), "--eager-threshold", "-1")
    assert rc == 0
    lp = json.loads(out.read_text())
    assert lp["alpha_us"] == pytest.approx(ALPHA_S * 1e6, rel=1e-6)
    assert lp["eager_threshold_bytes"] is None
    assert [r["k_alpha"] for r in lp["fit"]["point_to_point"]["rows"]] == [1.0] * len(P2P_SIZES)
    # With the default, the rows above 64 KiB count two alphas.
    rc, out = run(tmp_path, doc(rows))
    fitted = json.loads(out.read_text())["fit"]["point_to_point"]["rows"]
    assert [r["k_alpha"] for r in fitted] == [1.0 + (s > EAGER) for s in P2P_SIZES]
    assert run(tmp_path, doc(rows), "--eager-threshold", "-2")[0] == 2


def test_mpich_choice_thresholds():
    assert cal.mpich_algorithm("allreduce", 4, 512) == "recursive_doubling"  # 2 KB
    assert cal.mpich_algorithm("allreduce", 4, 513) == "rabenseifner"
    assert cal.mpich_algorithm("allgather", 4, 32767) == "recursive_doubling"
    assert cal.mpich_algorithm("allgather", 6, 1000) == "bruck"
    assert cal.mpich_algorithm("allgather", 4, 2**17) == "ring"
    assert cal.mpich_algorithm("alltoall", 8, 64) == "bruck"
    assert cal.mpich_algorithm("alltoall", 4, 64) == "scattered"
    assert cal.mpich_algorithm("alltoall", 4, 8193) == "pairwise"
    assert cal.mpich_algorithm("bcast", 4, 2**20) == "binomial"
    assert cal.mpich_algorithm("bcast", 8, 2**12) == "scatter_recursive_doubling_allgather"
    assert cal.mpich_algorithm("bcast", 8, 2**20) == "scatter_ring_allgather"


# ---------------------------------------------------------------- report


def test_report_predicts_pingpong_as_alpha_plus_size_over_bandwidth(tmp_path, capsys):
    rep = tmp_path / "report"
    rc, out = run(tmp_path, doc(synthetic()), "--report", str(rep))
    assert rc == 0
    lp = json.loads(out.read_text())
    a, bw = lp["alpha_us"] * 1e-6, lp["bandwidth_limit_gb_per_s"] * 1e9
    with (rep / "calibration_report.csv").open() as f:
        rows = list(csv.DictReader(f))
    pp = [r for r in rows if r["op"] == "pingpong"]
    assert len(pp) == len(P2P_SIZES)
    for r in pp:
        size = int(r["size_bytes"])
        want = a + size / bw + (a if size > EAGER else 0.0)  # and a request-to-send above
        assert float(r["predicted_s"]) == pytest.approx(want, rel=1e-9)
        assert abs(float(r["error_pct"])) < 1.0
    # Collectives simulated on a switch with the calibrated parameters match the
    # synthetic (closed-form) measurements: simnet reproduces the closed forms.
    for r in rows:
        assert abs(float(r["error_pct"])) < 1.0, r
    assert len(rows) == len(P2P_SIZES) + 2 * len(COLL_SIZES)
    for op in ("pingpong", "allreduce", "allgather"):
        assert (rep / f"calibration_report_{op}.png").stat().st_size > 0
    text = (rep / "calibration_report.txt").read_text()
    assert "measured (us)" in text and "pingpong" in text
    assert "prediction report" in capsys.readouterr().out


def test_fit_plots(tmp_path):
    # An earlier calibration's plot of an op this one did not measure goes.
    (tmp_path / "fits").mkdir()
    (tmp_path / "fits" / "fit_allreduce_mpi.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (tmp_path / "fits" / "notes.txt").write_text("kept: not a plot of ours")
    rc, _ = run(tmp_path, doc(synthetic(ops=("pingpong",))), "--plot", str(tmp_path / "fits"))
    assert rc == 0
    names = sorted(p.name for p in (tmp_path / "fits").iterdir())
    assert names == ["fit_pingpong_mpi.png", "notes.txt"]


# ---------------------------------------------------------------- the real micro-benchmark

HAVE_MICROBENCH = importlib.util.find_spec("proxies.microbench") is not None


@pytest.mark.skipif(not HAVE_MICROBENCH, reason="proxies.microbench not available")
def test_real_microbench_calibrates(tmp_path):
    mb = tmp_path / "real.json"
    r = mpirun(
        2,
        "proxies.microbench",
        "--ops",
        "pingpong,allreduce",
        "-b",
        "8",
        "-e",
        "2M",
        "-f",
        "16",
        "-n",
        "5",
        "-w",
        "1",
        "--json",
        str(mb),
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    out = tmp_path / "lp.json"
    # The minimum over iterations: robust to a busy machine's outliers.
    args = [str(mb), "-o", str(out), "--stat", "min", "--report", str(tmp_path / "rep")]
    assert cal.main(args) == 0, mb.read_text()
    lp = json.loads(out.read_text())
    assert lp["alpha_us"] >= 0 and lp["bandwidth_limit_gb_per_s"] > 0
    assert lp["fit"]["world_size"] == 2
    assert Path(tmp_path / "rep" / "calibration_report.csv").exists()


def test_a_link_params_file_without_link_parameters_is_refused(tmp_path):
    # The micro-benchmark's output named where its fit belongs: nothing would apply.
    mb = tmp_path / "microbench.json"
    mb.write_text(json.dumps(doc(synthetic())))
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(pipeline_config(link_params_file="microbench.json")))
    with pytest.raises(ConfigError) as e:
        simnet.simulate(cfg)
    assert str(e.value).startswith(
        f"network.link_params_file: {mb} (a 'microbench' document) holds none of the link "
        "parameters (alpha_us, bandwidth_limit_gb_per_s, "
    )
    assert str(e.value).endswith("; give the file `python -m simnet calibrate` writes")


def test_validate_refuses_a_wrong_link_params_file_before_running(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(pipeline_config(link_params_file="missing.json")))
    r = subprocess.run(
        [sys.executable, "-m", "simnet", "validate", "--config", str(cfg), "--out",
         str(tmp_path / "v"), "--quiet"],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.strip() == (
        f"error: network.link_params_file: no such file '{tmp_path / 'missing.json'}'"
    )
    assert not (tmp_path / "v" / "measured.json").exists()


def test_rows_of_an_op_not_modelled_are_one_note(tmp_path, capsys):
    # The micro-benchmark's exchange (in its default ops) at three sizes: one line.
    rows = synthetic() + [row("exchange", 4 << i, 1 << i, 1e-5) for i in range(3)]
    rc, _ = run(tmp_path, doc(rows))
    assert rc == 0
    out = capsys.readouterr()
    text = out.out + out.err
    assert text.count("'exchange'") == 1
    assert "op 'exchange': 3 rows not modelled (results[" in text


def test_times_in_another_unit_are_warned_of(tmp_path, capsys):
    # Microseconds written where seconds belong: a fine fit of alpha = 3.7 s and
    # bandwidth 6.5 kB/s, which no network has.
    rows = [row("pingpong", s, s // 4, hockney(s) * 1e6) for s in P2P_SIZES]
    rc, _ = run(tmp_path, doc(rows))
    assert rc == 0
    out = capsys.readouterr().out
    assert (
        "  warning: alpha 3,700,000 us and bandwidth 6.5e-06 GB/s is no network's (alpha "
        "above 100,000 us, bandwidth below 1 MB/s): the file's times are read as seconds "
        "(time_s); were they written in another unit?"
    ) in out
    run(tmp_path, doc(synthetic()))
    assert "warning:" not in capsys.readouterr().out
