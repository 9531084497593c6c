"""The host model's calibration (workflows.hostcal, simnet.hostparams): fits recover
known parameters from synthetic micro-benchmark documents made from closed forms,
bad files and stale caches are refused with a clear message."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

import simnet
from simnet.hostparams import (
    HostCalibration,
    HostCalibrationError,
    HostParams,
    load_host_calibration,
)
from workflows import hostcal

GB = 1e9
# The host the synthetic documents describe.
C = {2: 16 * GB, 4: 14 * GB, 8: 12 * GB}  # copy capacity (bytes/s) by ranks per host
A = {2: 3e-6, 4: 40e-6, 8: 900e-6}  # per-message cost (s)
B = 9 * GB  # one rank's fastest copy (bytes/s)
ALPHA = A[2]  # pingpong per-message time (s): the same per-message cost
GAMMA = 0.25e-9  # s per reduced byte
STEP = 150e-6  # s per step of a collective the library runs
A2A_STEP = 400e-6  # s per step of the library's alltoall


def rabenseifner_s(n: int, size: int, gamma: float, step: float = 0.0) -> float:
    """MPICH's large allreduce at a power of two: recursive halving, then doubling;
    in each of the 2 lg n steps all n ranks send at once, each flow at min(B, C/n),
    and each step costs ``step`` more; the halving steps reduce what they receive."""
    rate = min(B, C[n] / n)
    steps = int(math.log2(n))
    moved = size * (1 - 1 / n)  # per rank, in each half
    return 2 * moved / rate + 2 * steps * (A[n] + step) + gamma * moved


def pairwise_alltoall_s(n: int, size: int, step: float) -> float:
    """MPICH's alltoall of more than 32 KiB per peer: n - 1 steps, in each every rank
    sends size / n bytes to one peer, all at once, each flow at min(B, C/n)."""
    per_peer = size // n
    return (n - 1) * (A[n] + per_peer / min(B, C[n] / n) + step)


def doc(n: int) -> dict:
    rows = []
    w = hostcal.EXCHANGE_WINDOW  # messages per rank in flight; time per message
    for s in (1 << 17, 1 << 19, 1 << 21, 1 << 23):
        t = (A[n] + n * w * s / C[n]) / w
        rows.append({"op": "exchange", "size_bytes": s, "time_s": {"min": t, "avg": t}})
    for s in (1 << 10, 1 << 14, 1 << 18):  # one message per rank: its cost, then its bytes
        t = A[n] + s / min(C[n] / n, B)
        rows.append({"op": hostcal.SINGLE, "size_bytes": s, "time_s": {"min": t, "avg": t}})
    for s in (1 << 20, 1 << 22, 1 << 24):
        t = rabenseifner_s(n, s, GAMMA, STEP)
        rows.append({"op": "allreduce", "size_bytes": s, "time_s": {"min": t, "avg": t}})
    for s in (1 << 20, 1 << 22, 1 << 24):  # the whole array: s / n per peer
        t = pairwise_alltoall_s(n, s, A2A_STEP)
        rows.append({"op": "alltoall", "size_bytes": s, "time_s": {"min": t, "avg": t}})
    if n == 2:
        for s in (8, 1 << 12, 1 << 16, 1 << 20, 1 << 24):
            t = ALPHA + s / B
            rows.append({"op": "pingpong", "size_bytes": s, "time_s": {"min": t, "avg": t}})
    return {"kind": "microbench", "world_size": n, "results": rows}


@pytest.fixture(scope="module")
def fitted() -> HostCalibration:
    return hostcal.fit_host({n: doc(n) for n in (2, 4, 8)}, stat="min", key={"hostname": "x"})


@pytest.mark.parametrize("n", [2, 4, 8])
def test_fit_recovers_the_copy_capacity_and_per_message_cost(fitted, n):
    p, note = fitted.at(n)
    assert note is None
    assert p.copy_bandwidth_gb_per_s == pytest.approx(C[n] / GB, rel=0.01)
    assert p.copy_latency_us == pytest.approx(A[n] * 1e6, rel=0.01)
    assert p.rank_copy_bandwidth_gb_per_s == pytest.approx(B / GB, rel=0.01)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_fit_recovers_gamma_and_the_step_cost(fitted, n):
    assert fitted.at(n)[0].gamma_s_per_byte == pytest.approx(GAMMA, rel=0.01)
    assert fitted.at(n)[0].step_latency_us == pytest.approx(STEP * 1e6, rel=0.01)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_fit_recovers_the_alltoall_step_cost(fitted, n):
    assert fitted.at(n)[0].alltoall_step_latency_us == pytest.approx(A2A_STEP * 1e6, rel=0.01)


def test_a_config_takes_the_alltoall_step_cost_and_the_simulation_pays_it(fitted, tmp_path):
    path = tmp_path / "host.json"
    path.write_text(json.dumps(fitted.to_json()))
    from simnet.config import load_config
    from simnet.hostparams import apply_host_params

    cfg = load_config(
        {
            "topology": {"type": "switch", "num_nodes": 4},
            "hosts": {"ranks_per_host": 4, "params_file": str(path)},
        }
    )
    cfg, notes = apply_host_params(cfg)
    assert cfg.collectives.step_latency_us_by_op == {
        "alltoall": pytest.approx(A2A_STEP * 1e6, rel=0.01)
    }
    assert any("step_latency_us_by_op" in n for n in notes)
    # The per-op cost replaces the general one for that op only: a pairwise alltoall
    # on 4 ranks pays it on each of its 3 steps.
    p = HostParams(4, C[4] / GB, A[4] * 1e6, B / GB, 0.0)
    g = hostcal.host_graph(p)
    t0 = simnet.collective_time(g, "alltoall", "pairwise", 1 << 18)
    t1 = simnet.collective_time(g, "alltoall", "pairwise", 1 << 18, step_latency_s=A2A_STEP)
    assert t1 - t0 == pytest.approx(3 * A2A_STEP, rel=1e-9)


def test_a_step_cost_adds_exactly_that_per_step():
    p = HostParams(8, C[8] / GB, A[8] * 1e6, B / GB, 0.0)
    g = hostcal.host_graph(p)
    t0 = simnet.collective_time(g, "allreduce", "rabenseifner", 1 << 22)
    t1 = simnet.collective_time(g, "allreduce", "rabenseifner", 1 << 22, step_latency_s=STEP)
    assert t1 - t0 == pytest.approx(2 * 3 * STEP, rel=1e-9)  # 2 lg 8 steps


def test_every_point_is_simulated_back_within_one_percent(fitted):
    assert fitted.points
    assert max(abs(p["error_pct"]) for p in fitted.points) < 1.0


def test_gamma_adds_exactly_gamma_times_the_reduced_bytes():
    # Host of 4 ranks; Rabenseifner's halving steps reduce (1 - 1/n) S per rank.
    p = HostParams(4, C[4] / GB, A[4] * 1e6, B / GB, 0.0)
    g = hostcal.host_graph(p)
    size = 1 << 24
    t0 = simnet.collective_time(g, "allreduce", "rabenseifner", size)
    t1 = simnet.collective_time(g, "allreduce", "rabenseifner", size, gamma_s_per_byte=GAMMA)
    assert t0 == pytest.approx(rabenseifner_s(4, size, 0.0), rel=1e-9)
    assert t1 - t0 == pytest.approx(GAMMA * size * (1 - 1 / 4), rel=1e-9)


def test_between_measured_counts_the_parameters_are_interpolated(fitted):
    p, note = fitted.at(6)
    assert p.copy_bandwidth_gb_per_s == pytest.approx((C[4] + C[8]) / 2 / GB, rel=0.01)
    assert "interpolated between 4 and 8" in note
    p, note = fitted.at(10)
    assert p.copy_bandwidth_gb_per_s == pytest.approx(C[8] / GB, rel=0.01)
    assert "taken from the measurement at 8" in note


def test_round_trip_through_the_file(fitted, tmp_path):
    path = tmp_path / "host.json"
    path.write_text(json.dumps(fitted.to_json()))
    again = load_host_calibration(str(path))
    assert again.by_ranks == fitted.by_ranks


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", "cannot read"),
        ('{"kind": "microbench"}', "not a host calibration"),
        ('{"kind": "host-calibration", "format": 99}', "format 99"),
        ('{"kind": "host-calibration", "format": 1}', "format 1"),
        ('{"kind": "host-calibration", "format": 3, "key": {}}', "malformed"),
    ],
)
def test_bad_parameter_files_get_one_clear_line(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(HostCalibrationError, match=message):
        load_host_calibration(str(path))


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("copy_latency_us", -5, "copy_latency_us = -5 at 2 ranks: a number >= 0"),
        (
            "copy_bandwidth_gb_per_s",
            True,
            "copy_bandwidth_gb_per_s = True at 2 ranks: a number > 0",
        ),
        ("copy_latency_us", "x", "copy_latency_us = 'x' at 2 ranks: a number >= 0"),
        ("send_overhead_us", float("nan"), "send_overhead_us = nan at 2 ranks: a number >= 0"),
        ("gamma_s_per_byte", -1e-9, "gamma_s_per_byte = -1e-09 at 2 ranks: a number >= 0"),
        ("ranks_per_host", 0, "ranks_per_host = 0: a count >= 1"),
    ],
)
def test_a_parameter_no_host_has_is_refused(fitted, field, value, message):
    doc = fitted.to_json()
    row = dict(doc["by_ranks_per_host"][0], ranks_per_host=2)
    row[field] = value
    doc["by_ranks_per_host"][0] = row
    with pytest.raises(HostCalibrationError) as e:
        HostCalibration.from_json(doc)
    assert str(e.value).startswith(f"host calibration: malformed host calibration ({message}")
    doc["by_ranks_per_host"] = []
    with pytest.raises(HostCalibrationError, match="by_ranks_per_host is empty"):
        HostCalibration.from_json(doc)


def test_a_missing_parameter_file_is_named(tmp_path):
    with pytest.raises(HostCalibrationError, match="no such file"):
        load_host_calibration(str(tmp_path / "none.json"))


def _measure_nothing(monkeypatch, fitted) -> None:
    """Calibrations that measure nothing and fit ``fitted``'s parameters (made now)."""
    monkeypatch.setattr(hostcal, "measure", lambda wanted, iters, timeout_s, say: {})
    sleep_fit = {"op": "sleep", "ranks": 1, "r2": None, "max_rel_error": 0.0}
    monkeypatch.setattr(hostcal, "measure_sleep", lambda: (0.0, 0.0, sleep_fit))
    monkeypatch.setattr(
        hostcal,
        "fit_host",
        lambda docs, stat, k, sleep: HostCalibration(k, fitted.created, fitted.by_ranks),
    )


def test_stale_caches_say_why(fitted):
    key = dict(fitted.key)
    assert hostcal.stale_reason(fitted, key, [2, 4], 7.0) is None
    assert "no measurement at [16]" in hostcal.stale_reason(fitted, key, [16], 7.0)
    other = key | {"hostname": "elsewhere"}
    assert "hostname changed" in hostcal.stale_reason(fitted, other, [2], 7.0)
    old = HostCalibration(key, "2020-01-01T00:00:00+00:00", fitted.by_ranks)
    assert "days old" in hostcal.stale_reason(old, key, [2], 7.0)
    # A date without a time zone (edited by hand) is no age: stale, one line (a
    # TypeError before).
    naive = HostCalibration(key, "2026-11-27T19:00:00", fitted.by_ranks)
    assert hostcal.stale_reason(naive, key, [2], 7.0) == (
        "creation date '2026-11-27T19:00:00' without a time zone"
    )


def test_an_unwritable_cache_is_refused_before_measuring(tmp_path, monkeypatch, capsys):
    # The cache is written after minutes of measurements: a file where its folder should
    # be was a traceback then, and every measurement lost.
    (tmp_path / "afile").write_text("")
    monkeypatch.setenv("COMMSIM_CACHE_DIR", str(tmp_path / "afile"))
    measured = []
    monkeypatch.setattr(hostcal, "measure", lambda *a: measured.append(a))
    rc = hostcal.main(["--ranks", "2", "--repeats", "1", "--force"])
    assert rc == 1 and not measured
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: the host calibration cache (COMMSIM_CACHE_DIR)")
    assert err.endswith("set COMMSIM_CACHE_DIR to a writable folder")
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-age-days", "nan"], "--max-age-days must be >= 0 (got nan)"),
        (["--timeout", "0"], "--timeout must be a finite number of seconds > 0 (got 0)"),
        (["--timeout", "inf"], "--timeout must be a finite number of seconds > 0 (got inf)"),
    ],
)
def test_options_that_would_turn_a_safeguard_off_are_refused(args, message, capsys):
    assert hostcal.main(args) == 2
    assert capsys.readouterr().err.strip() == f"error: {message}"


def test_a_calibration_made_otherwise_than_asked_is_stale(fitted, tmp_path, monkeypatch):
    # calibrate-host --stat min after a default calibration measures again (it reused the
    # avg one without a word), and the file says how it was made.
    monkeypatch.setenv("COMMSIM_CACHE_DIR", str(tmp_path))
    key = hostcal.host_key()
    made = {"stat": "avg", "iters": 10, "repeats": 5}
    cal = HostCalibration(key, fitted.created, fitted.by_ranks, settings=made)
    hostcal.cache_path(key).write_text(json.dumps(cal.to_json()))
    assert hostcal.load_cached([2], settings=dict(made))[0] is not None
    asked = {"stat": "min", "iters": 3, "repeats": 1}
    got, line = hostcal.load_cached([2], settings=asked)
    assert got is None
    assert line.endswith(
        "is stale: made with stat avg, 10 iterations, 5 repeats, asked for stat min, "
        "3 iterations, 1 repeats"
    )
    unrecorded = HostCalibration(key, fitted.created, fitted.by_ranks)
    assert "made with settings not recorded" in hostcal.stale_reason(
        unrecorded, key, [2], 7.0, made
    )
    assert HostCalibration.from_json(cal.to_json()).settings == made
    with pytest.raises(HostCalibrationError, match="settings = 3: an object"):
        HostCalibration.from_json(cal.to_json() | {"settings": 3})
    # A calibration made now records its settings, and is reused when asked the same.
    _measure_nothing(monkeypatch, fitted)
    lines: list[str] = []
    new, path = hostcal.calibrate_host([2], stat="min", iters=3, repeats=1, say=lines.append)
    assert new.settings == asked and json.loads(path.read_text())["settings"] == asked
    assert any("asked for stat min" in x for x in lines)
    again, _ = hostcal.calibrate_host([2], stat="min", iters=3, repeats=1, say=lines.append)
    assert lines[-1].startswith("host calibration reused from")
    assert "(stat min, 3 iterations, 1 repeats)" in hostcal.summary_text(again)


def test_a_calibration_by_an_older_method_is_stale(fitted):
    key = hostcal.host_key()
    older = HostCalibration(key | {"method": hostcal.METHOD - 1}, fitted.created, fitted.by_ranks)
    assert "(method changed)" in hostcal.stale_reason(older, key, [2], 7.0)


def test_cached_calibration_is_reused_until_stale(fitted, tmp_path, monkeypatch):
    monkeypatch.setenv("COMMSIM_CACHE_DIR", str(tmp_path))
    key = hostcal.host_key()
    cal = HostCalibration(key, fitted.created, fitted.by_ranks)
    hostcal.cache_path(key).write_text(json.dumps(cal.to_json()))
    got, line = hostcal.load_cached([2, 8])
    assert got is not None and "reused" in line
    got, line = hostcal.load_cached([2, 16])
    assert got is None and "no measurement at [16]" in line


def test_a_calibration_at_new_counts_keeps_the_cached_ones(fitted, tmp_path, monkeypatch):
    # The main job calibrates at its counts, the testbed at others: a second calibration
    # measures only what the cache lacks (and 2) and keeps the rest.
    monkeypatch.setenv("COMMSIM_CACHE_DIR", str(tmp_path))
    key = hostcal.host_key()
    made = {"stat": hostcal.DEFAULT_STAT, "iters": 10, "repeats": 1}  # as asked below
    old_fits = [{"op": "x", "ranks": 8}, {"op": "sleep", "ranks": 1, "compute_stretch": 0.5}]
    cached = HostCalibration(key, fitted.created, fitted.by_ranks, old_fits, settings=made)
    hostcal.cache_path(key).write_text(json.dumps(cached.to_json()))
    measured = []

    def fake_measure(wanted, iters, timeout_s, say):
        measured.append(list(wanted))
        return {}

    new_params = [HostParams(n, 1.0, 2.0, 3.0, 0.0, compute_overhead_us=7.0) for n in (2, 16)]
    monkeypatch.setattr(hostcal, "measure", fake_measure)
    monkeypatch.setattr(hostcal, "measure_sleep", lambda: (0.0, 0.0, {"op": "sleep"}))
    monkeypatch.setattr(
        hostcal,
        "fit_host",
        lambda docs, stat, k, sleep: HostCalibration(k, "2099-01-01T00:00:00+00:00", new_params),
    )
    cal, path = hostcal.calibrate_host([2, 8, 16], repeats=1, say=lambda _: None)
    assert measured == [[2, 16]]
    assert cal.ranks() == sorted({2, 16} | set(fitted.ranks()))
    assert cal.at(2)[0].copy_bandwidth_gb_per_s == 1.0  # measured again: the new value
    # A kept count keeps its fits, but what a run measures once for every count (the
    # sleep, one rank's copy rate) is the new run's there too, as its sleep fit is: a
    # count between 8 and 16 interpolated between two runs' sleeps.
    kept = next(p for p in fitted.by_ranks if p.ranks_per_host == 8)
    once = {"rank_copy_bandwidth_gb_per_s": 3.0, "compute_overhead_us": 7.0, "compute_stretch": 0}
    assert cal.at(8)[0] == replace(kept, **once)
    assert cal.at(12)[0].compute_overhead_us == 7.0
    assert cal.created == fitted.created  # as old as its oldest part
    assert {"op": "x", "ranks": 8} in cal.fits
    assert [f for f in cal.fits if f["op"] == "sleep"] == [{"op": "sleep"}]  # the new run's
    assert json.loads(path.read_text())["created"] == fitted.created


def test_a_config_takes_the_host_model_from_the_file(fitted, tmp_path):
    (tmp_path / "host.json").write_text(json.dumps(fitted.to_json()))
    cfg = {
        "distributed": {"num_nodes": 4},
        "topology": {"type": "switch", "num_nodes": 1},
        "hosts": {"ranks_per_host": 4, "params_file": "host.json"},
        "workload": {"name": "dlrm", "scale": 0.01},
    }
    path = tmp_path / "c.json"
    path.write_text(json.dumps(cfg))
    res = simnet.simulate(str(path))
    text = " ".join(res.assumed)
    assert "calibrated: hosts.copy_bandwidth_gb_per_s = 14" in text
    assert "calibrated: collectives.gamma_s_per_byte = 2.5e-10" in text
    assert "calibrated: collectives.step_latency_us = 150" in text


def test_emulated_compute_takes_its_overhead_and_stretch():
    # One rank of ResNet-152: its collectives are on groups of one, so an iteration is
    # its compute: each operation of d seconds takes d (1 + stretch) + overhead.
    base = {"distributed": {"num_nodes": 1}, "topology": {"type": "switch", "num_nodes": 1},
            "workload": {"name": "resnet152", "scale": 0.01}}  # fmt: skip
    plain = simnet.simulate(base)
    ops = [op for op in plain.workload.phases[0].program(0) if type(op).__name__ == "Compute"]
    total_s = sum(op.duration_us for op in ops) * 1e-6
    assert plain.iteration_time_s == pytest.approx(total_s, rel=1e-12)
    slow = simnet.simulate(base | {"hosts": {"compute_overhead_us": 80.0, "compute_stretch": 0.02}})
    assert slow.iteration_time_s == pytest.approx(total_s * 1.02 + 80e-6 * len(ops), rel=1e-9)


def test_repeated_calibrations_keep_the_typical_run_whole(fitted):
    # Per rank count, the run of median copy bandwidth is kept whole: its step latency
    # and gamma (fitted together, trading off) stay together, not each field's median
    # (3,841 us here, a step latency no run paired with its gamma).
    from dataclasses import replace

    sets = [(10.0, 0.0, 3e-10), (30.0, 3841.0, 1e-11), (12.0, 4000.0, 2e-11)]
    runs = [
        HostCalibration(
            fitted.key,
            fitted.created,
            [
                replace(p, copy_bandwidth_gb_per_s=c, step_latency_us=s, gamma_s_per_byte=g)
                for p in fitted.by_ranks
            ],
            [{"op": "allreduce", "ranks": n, "r2": 1.0, "max_rel_error": 0.0, "run": i}
             for n in fitted.ranks()],
            [{"op": "allreduce", "ranks": n, "error_pct": float(i)} for n in fitted.ranks()],
        )
        for i, (c, s, g) in enumerate(sets)
    ]  # fmt: skip
    cal = hostcal.median_calibration(runs)
    assert [(p.copy_bandwidth_gb_per_s, p.step_latency_us, p.gamma_s_per_byte)
            for p in cal.by_ranks] == [sets[2]] * len(fitted.ranks())  # fmt: skip
    assert cal.at(4)[0].copy_latency_us == pytest.approx(A[4] * 1e6, rel=0.01)
    # The fits and points shown are the kept run's.
    assert {f["run"] for f in cal.fits if f["op"] == "allreduce"} == {2}
    assert {p["error_pct"] for p in cal.points} == {2.0}
    (rep4,) = [f for f in cal.fits if f["op"] == "repeats" and f["ranks"] == 4]
    assert rep4["copy_bandwidth_gb_per_s"] == [10.0, 30.0, 12.0]
    assert rep4["step_latency_us"] == [0.0, 3841.0, 4000.0]
    assert "step us: 0, 3841, 4000" in hostcal.summary_text(cal)


def test_without_a_progress_thread_a_collective_moves_on_only_in_mpi_calls():
    # Each of 4 ranks posts a ring allreduce (6 steps of 1 ms each on these links),
    # computes 20 ms, then waits. With background progress the allreduce is over
    # before the compute ends; without it, only its first step ran before the wait.
    import topologies
    from simnet.executor import SimExecutor
    from simnet.network import FlowNetwork
    from workload.program import BuildOptions, Phase, ProgramBuilder, Workload

    p, step_bytes = 4, 10**6
    g = topologies.switch(p, 1e9)  # 1 ms per step of 1 MB (each flow crosses 2 links)
    count = step_bytes * p // 4  # elements: a ring step moves 1/p of the vector

    def program(rank: int) -> list:
        b = ProgramBuilder(BuildOptions(algorithm="ring"))
        r = b.allreduce("world", count, blocking=False)
        b.compute(20_000)
        b.wait(r)
        return b.ops

    wl = Workload("t", p, {}, {"world": [tuple(range(p))]}, [Phase("it", program)])
    router = topologies.Router(g)

    def run(async_progress: bool) -> float:
        ex = SimExecutor(
            wl,
            lambda env: FlowNetwork(env, g, router.path),
            list(range(p)),
            async_progress=async_progress,
        )
        return ex.run_phase().makespan_s

    assert run(True) == pytest.approx(20e-3)
    assert run(False) == pytest.approx(20e-3 + (2 * (p - 1) - 1) * 1e-3)


def test_the_joint_fit_separates_the_senders_overhead_from_the_per_message_cost():
    # Rows made by the model itself at known parameters (4 ranks): the single messages
    # pay a + o, a step of the allreduce a + o + L, the small alltoall's 3 concurrent
    # messages a + 3 o (the sender's overhead is serialised) + La2a, its pairwise steps
    # a + o + La2a each: together they pin down every parameter.
    truth = HostParams(4, C[4] / GB, 40.0, B / GB, GAMMA, 150.0, 400.0, 0.0, 0.0, 120.0)
    rows = []
    for op, sizes in (
        (hostcal.SINGLE, (1 << 10, 1 << 14, 1 << 18)),
        ("allreduce", (1 << 20, 1 << 22, 1 << 24)),
        ("alltoall", (1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22)),
    ):
        for s in sizes:
            t = hostcal.simulate_row(op, s, truth)
            rows.append({"op": op, "size_bytes": s, "time_s": {"avg": t, "min": t}})
    start = HostParams(4, C[4] / GB, 0.0, B / GB, 0.0)
    v, fits = hostcal.fit_joint({"results": rows}, "avg", start)
    assert v["copy_latency_s"] == pytest.approx(40e-6, rel=0.01)
    assert v["send_overhead_s"] == pytest.approx(120e-6, rel=0.01)
    assert v["gamma_s_per_byte"] == pytest.approx(GAMMA, rel=0.01)
    assert v["step_latency_s"] == pytest.approx(150e-6, rel=0.01)
    assert v["alltoall_step_latency_s"] == pytest.approx(400e-6, rel=0.01)
    assert all(f["max_rel_error"] < 1e-6 for f in fits)


def test_exchange_capacity_follows_the_largest_exchanges():
    """Small exchanges copy within the caches, faster than the large ones a gradient
    makes: the capacity is the large ones' (absolute residuals), not a compromise."""
    ranks, window = 10, 8
    rows = []
    for size in (1 << 17, 1 << 19, 1 << 21, 1 << 23, 1 << 25):
        capacity = 20e9 if size <= 1 << 21 else 15e9  # bytes/s, all ranks together
        rows.append((size, 200e-6 / window + ranks * size / capacity))  # s per message
    _, cap, fit = hostcal.fit_exchange(rows, ranks, window)
    assert 14.5e9 < cap < 15.5e9, cap
    assert fit["op"] == "exchange" and fit["ranks"] == ranks


def test_a_poor_fit_is_flagged_in_the_summary(fitted):
    import dataclasses

    text = hostcal.summary_text(fitted)
    assert "poor fit" not in text  # synthetic measurements: every fit exact
    bad = [dict(f, r2=-6.678) if f["op"] == "exchange" else f for f in fitted.fits]
    text = hostcal.summary_text(dataclasses.replace(fitted, fits=bad))
    flagged = [line for line in text.splitlines() if "poor fit" in line]
    assert flagged and all("R^2 -6.678" in line for line in flagged)
    assert len(flagged) == sum(f["op"] == "exchange" for f in bad)


def test_the_time_estimate_grows_with_the_ranks():
    # Measured here: a repeat at 2, 4, 8 and 10 ranks took about 24 s; one at 2 and 33
    # ranks about 40 s (202 s for 5), where the old estimate said 12 s.
    assert hostcal.estimate_s([2, 4, 8, 10], 1) == pytest.approx(24, rel=0.25)
    assert hostcal.estimate_s([2, 33], 5) == pytest.approx(202, rel=0.4)


def test_no_cache_measures_and_leaves_the_users_cache_alone(fitted, tmp_path, monkeypatch, capsys):
    # A private checkout's calibration (or a trial with other settings) would replace
    # this user's shared one: --no-cache writes only the -o file.
    cache = tmp_path / "cache"
    monkeypatch.setenv("COMMSIM_CACHE_DIR", str(cache))
    assert hostcal.main(["--no-cache"]) == 2
    assert "--no-cache writes the calibration only where -o/--out says" in capsys.readouterr().err
    key = hostcal.host_key()
    cache.mkdir()
    stale = HostCalibration(key, "2020-01-01T00:00:00+00:00", fitted.by_ranks)
    hostcal.cache_path(key).write_text(json.dumps(stale.to_json()))
    before = hostcal.cache_path(key).read_text()
    _measure_nothing(monkeypatch, fitted)
    out = tmp_path / "mine.json"
    assert hostcal.main(["--ranks", "2", "--repeats", "1", "--no-cache", "-o", str(out)]) == 0
    assert hostcal.cache_path(key).read_text() == before  # neither read (stale) nor written
    assert HostCalibration.from_json(json.loads(out.read_text())).created == fitted.created
    printed = capsys.readouterr().out
    assert "parameter file:" not in printed and f"wrote {out}" in printed


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([(100, 1e-6), (100, 2e-6)], r"got sizes \[100\], least time 1e-06 s"),
        ([(8, 0.0), (1 << 20, 1e-4)], r"got sizes \[8, 1048576\], least time 0 s"),
    ],
)
def test_degenerate_pingpong_rows_are_one_calibration_error(rows, message):
    # (not the network calibration's error, which calibrate-host does not catch)
    with pytest.raises(HostCalibrationError, match="pingpong: need at least 2 distinct sizes"):
        hostcal.fit_pingpong(rows)
    with pytest.raises(HostCalibrationError, match=message):
        hostcal.fit_pingpong(rows)


def test_a_merged_calibration_is_as_old_as_its_oldest_part_across_time_zones(fitted):
    # 10:00 at +02:00 is 08:00 UTC: earlier than 09:00 UTC, though later as text.
    old = replace(fitted, created="2026-11-28T10:00:00+02:00")
    new = replace(fitted, created="2026-11-28T09:00:00+00:00")
    assert hostcal.merge_calibrations(old, new).created == "2026-11-28T10:00:00+02:00"
    assert hostcal.merge_calibrations(new, old).created == "2026-11-28T10:00:00+02:00"


def test_a_one_rank_job_takes_the_host_model_measured_at_two(fitted, monkeypatch):
    from workflows.machine import ThisMachine

    asked = []

    def fake_calibrate_host(ranks, force=False, say=None):
        asked.append(list(ranks))
        return fitted, "cache.json"

    monkeypatch.setattr(hostcal, "calibrate_host", fake_calibrate_host)
    machine = ThisMachine.calibrate(1, print)
    assert asked and min(asked[0]) == 2  # nothing measured on one rank
    assert machine.params.ranks_per_host == 1
    assert (
        "host model at 1 ranks per host taken from the measurement at 2 (outside the "
        "measured counts [2, 4, 8])" in machine.notes
    )
