"""The parametric LLM workload: presets, message sizes and compute times against a
hand-derived table, ZeRO's volumes, pipeline schedules, layout errors, a real MPI run
and closed-form simulations."""

from __future__ import annotations

from collections import Counter

import pytest

from proxies.cli import build_parser, spec_from_namespace
from simnet.output import document, summary_text, throughput_line
from simnet.simulate import simulate
from tests.mpirun import mpirun, run_json
from workload.layout import LayoutError
from workload.models import MODELS
from workload.models.pipeline_schedule import stage_schedule
from workload.models.transformer import PRESETS
from workload.ops import Collective, Compute, Send
from workload.spec import RunSpec, SpecError

MPI_ENV = {
    "MPIR_CVAR_CH4_PROGRESS_THROTTLE": "1",
    "MPIR_CVAR_CH4_PROGRESS_THROTTLE_NO_PROGRESS_COUNT": "1",
}


def _ops(world: int, rank: int, **flags):
    return RunSpec("llm", flags=flags, world_size=world).workload().phases[0].program(rank)


def _sizes(ops, label: str) -> list[int]:
    return [o.count_elems for o in ops if getattr(o, "label", "") == label]


# -- presets: parameter counts written out by hand from the published shapes -------------
@pytest.mark.parametrize(
    ("preset", "params"),
    [
        # GPT-3: 12 h^2 per layer (4 h^2 attention, 8 h^2 MLP), tied embedding.
        ("gpt3-175b", 96 * 12 * 12288**2 + 50257 * 12288),
        # Llama 2 70B: GQA attention 2 h^2 + 2 h (8 x 128), SwiGLU 3 h f, untied.
        ("llama-2-70b", 80 * (2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 28672) + 2 * 32000 * 8192),
        ("llama-3-8b", 32 * (2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336) + 2 * 128256 * 4096),
        # Mixtral: 8 SwiGLU experts and a 4096 x 8 router per layer.
        (
            "mixtral-8x7b",
            32 * (2 * 4096**2 + 2 * 4096 * 1024 + 8 * 3 * 4096 * 14336 + 4096 * 8)
            + 2 * 32000 * 4096,
        ),
    ],
)
def test_preset_parameter_counts(preset, params):
    assert PRESETS[preset].total_params == params


def test_published_sizes_of_the_presets():
    # Within 0.5% of the sizes the models are known by (175B, 69B, 8.0B, 46.7B).
    billions = {"gpt3-175b": 175, "llama-2-70b": 69, "llama-3-8b": 8.03, "mixtral-8x7b": 46.7}
    for name, b in billions.items():
        assert PRESETS[name].total_params / 1e9 == pytest.approx(b, rel=0.005)


# -- the hand-derived table: Llama 2 70B, tp 8, pp 4, dp 2, b 1, s 4096 -------------------
HAND = {
    # b s h x 2 bytes = 1 x 4096 x 8192 x 2 = 67,108,864 B = 16,777,216 four-byte elements
    "activation_elems": 16_777_216,
    # per layer and rank: (2 h^2 + 2 h 1024 + 3 h f) / 8 = 855,638,016 / 8
    "layer_weights": 106_954_752,
    # V h / 8 = 32000 x 8192 / 8
    "embedding_weights": 32_768_000,
    # (2 b s (2 h^2 + 2 h 1024) + 4 b s^2 h) / 8 FLOPs at 989e12 x 0.5 FLOP/s, us
    "attention_us": (2 * 4096 * 150_994_944 + 4 * 4096**2 * 8192) / 8 / 494.5e12 * 1e6,
    # 2 b s 3 h f / 8 FLOPs
    "mlp_us": 2 * 4096 * 3 * 8192 * 28672 / 8 / 494.5e12 * 1e6,
    # 2 b s h V / 8 FLOPs
    "logits_us": 2 * 4096 * 8192 * 32000 / 8 / 494.5e12 * 1e6,
}
L70 = {"preset": "llama-2-70b", "tp": 8, "pp": 4}


def test_llama2_70b_tensor_and_pipeline_messages():
    first, last = _ops(64, 0, **L70), _ops(64, 63, **L70)
    m = 16  # default micro-batches: 4 x pp
    # Forward: the embedding's allreduce and 2 per layer (20 layers); backward: 2 per
    # layer, and the output layer's one on the last stage.
    assert _sizes(first, "tp_allreduce") == [HAND["activation_elems"]] * m * (1 + 40 + 40)
    assert _sizes(last, "tp_allreduce") == [HAND["activation_elems"]] * m * (40 + 40 + 1)
    assert _sizes(last, "cross_entropy_allreduce") == [4096] * 3 * m  # b s fp32
    for ops, labels in (
        (first, ("pp_send_activation", "pp_recv_gradient")),
        (last, ("pp_recv_activation", "pp_send_gradient")),
    ):
        for label in labels:
            assert _sizes(ops, label) == [HAND["activation_elems"]] * m
    # Rank 8 (stage 0, data-parallel rank 1) sends to rank 16 (stage 1): tp x dp apart.
    sends = {o.peer for o in _ops(64, 8, **L70) if isinstance(o, Send)}
    assert sends == {24}


def test_llama2_70b_compute_times():
    first, last = _ops(64, 0, **L70), _ops(64, 63, **L70)
    durations = Counter()
    for o in first:
        if isinstance(o, Compute):
            durations[o.label] += 1
            assert o.duration_us == pytest.approx(
                {
                    "attention_forward": HAND["attention_us"],
                    "mlp_forward": HAND["mlp_us"],
                    "attention_backward": 2 * HAND["attention_us"],
                    "mlp_backward": 2 * HAND["mlp_us"],
                }[o.label],
                rel=1e-12,
            )
    assert durations == {
        k: 20 * 16
        for k in ("attention_forward", "mlp_forward", "attention_backward", "mlp_backward")
    }
    logits = [o.duration_us for o in last if isinstance(o, Compute) and "logits" in o.label]
    assert logits == pytest.approx([HAND["logits_us"], 2 * HAND["logits_us"]] * 16, rel=1e-12)


def test_llama2_70b_gradient_buckets():
    # Stage 0 holds 20 layers and the embedding: 2,171,863,040 weights, 2 bytes each,
    # in 25 MiB buckets: 165 full ones and 18,350,080 bytes left.
    weights = 20 * HAND["layer_weights"] + HAND["embedding_weights"]
    assert weights == 2_171_863_040
    sizes = _sizes(_ops(64, 0, **L70), "grad_allreduce")
    assert sizes == [26_214_400 // 4] * 165 + [18_350_080 // 4]
    # The last stage: 20 layers and the untied output layer, the same count here.
    assert _sizes(_ops(64, 63, **L70), "grad_allreduce") == sizes
    # Overlapped: issued during the last micro-batch's backward, waited once at the end.
    ops = _ops(64, 0, **L70)
    reqs = [o for o in ops if isinstance(o, Collective) and o.label == "grad_allreduce"]
    assert all(o.req is not None for o in reqs)
    assert [o.label for o in ops].index("grad_allreduce") > [o.label for o in ops].index(
        "pp_recv_gradient"
    ) + 15 * 81  # after the 15 earlier backwards' collectives


def test_sequence_parallel_splits_over_tp():
    ops = _ops(64, 0, **L70, sp=1)
    block = HAND["activation_elems"] // 8  # b s h x 2 / tp bytes
    assert "tp_allreduce" not in {getattr(o, "label", "") for o in ops}
    # Forward: the embedding's reduce-scatter, 2 all-gathers and 2 reduce-scatters per
    # layer; backward: the same per layer, and the embedding's all-gather (its
    # reduce-scatter's backward).
    assert _sizes(ops, "sp_reduce_scatter") == [block] * 16 * (1 + 40 + 40)
    assert _sizes(ops, "sp_allgather") == [block] * 16 * (80 + 1)
    middle = _ops(64, 16, **L70, sp=1)  # stage 1: layers only
    assert _sizes(middle, "sp_allgather") == [block] * 16 * 80
    assert _sizes(ops, "pp_send_activation") == [block] * 16


def test_moe_alltoall_and_expert_gradients():
    # Mixtral, dp 8 with ep 4: per peer b s k h x 2 / ep = 4096 x 2 x 4096 x 2 / 4 bytes.
    ops = _ops(8, 0, preset="mixtral-8x7b", ep=4, layers=2, micro_batches=1)
    a2a = [o for o in ops if isinstance(o, Collective) and o.op == "alltoall"]
    assert [o.count_elems for o in a2a] == [16_777_216 // 4] * 4 * 2  # 4 per layer
    assert {o.group for o in a2a} == {"ep"}
    # Expert weights: 8 / 4 = 2 experts of 3 h f per rank, reduced over edp (dp / ep = 2);
    # attention and router over dp: two layers each.
    expert_bytes = 2 * (2 * 3 * 4096 * 14336) * 2
    dense_bytes = 2 * (2 * 4096**2 + 2 * 4096 * 1024 + 4096 * 8) * 2 + 32000 * 4096 * 2 * 2
    by_group = Counter()
    for o in ops:
        if isinstance(o, Collective) and o.label == "grad_allreduce":
            by_group[o.group] += o.count_elems * 4
    assert by_group == {"edp": expert_bytes, "dp": dense_bytes}
    wl = RunSpec(
        "llm", flags={"preset": "mixtral-8x7b", "ep": 4, "layers": 2}, world_size=8
    ).workload()
    assert wl.groups["ep"] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert wl.groups["edp"] == [(0, 4), (1, 5), (2, 6), (3, 7)]


def _volume(ops, n: int) -> int:
    """Bytes a rank moves in ZeRO's accounting: an allreduce of S bytes is a
    reduce-scatter and an all-gather of S bytes each (2 S), a reduce-scatter or an
    all-gather of S bytes in all is S."""
    total = 0
    for o in ops:
        if not isinstance(o, Collective) or o.group != "dp":
            continue
        if o.op == "allreduce":
            total += 2 * o.count_elems * 4
        elif o.op in ("reduce_scatter", "allgather"):
            total += o.count_elems * 4 * n
    return total


@pytest.mark.parametrize(("zero", "factor"), [(0, 2), (1, 2), (2, 2), (3, 3)])
def test_zero_volumes_match_the_zero_analysis(zero, factor):
    # Rajbhandari et al.: DDP, ZeRO-1 and ZeRO-2 move 2 psi per rank and iteration,
    # ZeRO-3 3 psi (psi: the rank's bf16 weights); here one micro-batch, 4 ranks.
    flags = {"preset": "llama-3-8b", "layers": 2, "micro_batches": 1, "zero": zero}
    psi = (2 * (2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336) + 2 * 128256 * 4096) * 2
    vol = _volume(_ops(4, 0, **flags), 4)
    # Buckets are rounded up to whole elements per rank: at most 16 bytes per call.
    assert psi * factor <= vol <= psi * factor + 16 * 200


def test_zero2_reduces_every_micro_batch_zero1_once():
    base = {"preset": "llama-3-8b", "layers": 2, "micro_batches": 3}
    rs1 = _sizes(_ops(4, 0, **base, zero=1), "grad_reduce_scatter")
    rs2 = _sizes(_ops(4, 0, **base, zero=2), "grad_reduce_scatter")
    assert len(rs2) == 3 * len(rs1) and sum(rs2) == 3 * sum(rs1)
    ag = _sizes(_ops(4, 0, **base, zero=3), "zero3_allgather")
    assert len(ag) == 3 * 2 * 4  # 3 micro-batches x (forward, backward) x 4 units


# -- pipeline schedules (hand-written orders) ------------------------------------------
def test_1f1b_and_gpipe_orders():
    f = [("F", i) for i in range(6)]
    b = [("B", i) for i in range(6)]
    assert stage_schedule("gpipe", 0, 4, 6) == f + b
    assert stage_schedule("1f1b", 0, 4, 6) == [
        *f[:3],
        f[3],
        b[0],
        f[4],
        b[1],
        f[5],
        b[2],
        *b[3:],
    ]
    assert stage_schedule("1f1b", 3, 4, 3) == [f[0], b[0], f[1], b[1], f[2], b[2]]
    # Fewer micro-batches than warm-up forwards: all forwards, then all backwards.
    assert stage_schedule("1f1b", 0, 8, 2) == [f[0], f[1], b[0], b[1]]


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_pipeline_time_is_the_closed_form(schedule):
    # No tensor or data parallelism, a network ~free at this scale: one iteration of m
    # micro-batches on p equal stages takes (m + p - 1)(t_f + t_b), for both schedules.
    p, m = 4, 6
    flags = {"preset": "llama-3-8b", "pp": p, "micro_batches": m, "vocab": 1, "schedule": schedule}
    cfg = {
        "distributed": {"num_nodes": p, "bandwidth_limit_gb_per_s": 1e6},
        "topology": {"type": "ring", "link_latency_us": 0},
        "workload": {"name": "llm", "world_size": p, "scale": 1e-4, "flags": flags},
    }
    res = simulate(cfg, record_series=False)
    shape = PRESETS["llama-3-8b"]
    t_f = 8 * (shape.attention_flops(1) + shape.mlp_flops(1)) / 494.5e12
    assert res.iteration_time_s == pytest.approx((m + p - 1) * 3 * t_f, rel=1e-5)


def test_compute_only_iteration_is_the_flops_sum():
    # Data parallel on a network ~free at this scale: each rank computes 3 x the forward
    # FLOPs of every layer and the logits, at the sustained rate.
    cfg = {
        "distributed": {"num_nodes": 2, "bandwidth_limit_gb_per_s": 1e6},
        "topology": {"type": "ring", "link_latency_us": 0},
        "workload": {
            "name": "llm",
            "world_size": 2,
            "scale": 1e-6,
            "flags": {"preset": "mixtral-8x7b", "micro_batches": 2, "peak_tflops": 312},
        },
    }
    res = simulate(cfg, record_series=False)
    s = PRESETS["mixtral-8x7b"]
    flops = 2 * 3 * (32 * (s.attention_flops(1) + s.mlp_flops(1)) + s.logits_flops(1))
    assert res.iteration_time_s == pytest.approx(flops / (312e12 * 0.5), rel=1e-6)
    # Nothing but compute: the summary's utilisation is the assumed efficiency, and its
    # throughput 2 ranks x 2 micro-batches x 4096 tokens per iteration.
    line = throughput_line(res.workload.info, 2, res.iteration_time_s)
    assert line is not None and "model FLOPs utilisation 50.0% of 2 x 312 TFLOP/s" in line
    assert f"{2 * 2 * 4096 / res.iteration_time_s:,.0f} tokens/s" in line
    assert throughput_line({"tokens_per_iteration": 1}, 2, 1.0) is None
    # This run's messages are at 1e-6 of their size: its summary and results give no
    # throughput, saying why (the figures would not be the full-size job's).
    said = "messages at 1e-06x and compute at 1x their full size (workload.scale"
    assert f"  throughput: not given: {said}" in summary_text(res)
    assert said in document(res)["throughput"]["not_given"]
    full = simulate({**cfg, "workload": {**cfg["workload"], "scale": 1.0}}, record_series=False)
    t = document(full)["throughput"]
    assert t["tokens_per_s"] == pytest.approx(2 * 2 * 4096 / full.iteration_time_s, rel=1e-12)
    assert 0 < t["model_flops_utilisation"] <= 0.5 and t["peak_flops_per_device"] == 312e12
    assert throughput_line(full.workload.info, 2, full.iteration_time_s) in summary_text(full)


# -- errors ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("world", "flags", "message"),
    [
        (48, {"tp": 8, "pp": 4}, "the world size must be a multiple of tp x pp = 32"),
        (64, {"tp": 8, "pp": 4, "dp": 4}, "tp x pp x dp = 8 x 4 x 4 = 128 must equal"),
        (32, {"tp": 16}, "kv_heads (8) must be a multiple of tp (16); nearest valid tp: 4, 8"),
        (24, {"preset": "llama-2-70b", "pp": 3}, "layers (80) must be a multiple of pp (3)"),
        (4, {"ep": 2}, "ep = 2 needs experts"),
        (4, {"top_k": 4}, "top_k = 4 needs experts (the llama-3-8b shape has none"),
        (8, {"preset": "mixtral-8x7b", "ep": 3}, "experts (8) must be a multiple of ep (3)"),
        (4, {"zero": 4}, "zero must be 0, 1, 2 or 3 (got 4)"),
        (4, {"zero": 2, "pp": 2}, "zero = 2 with pp = 2: ZeRO-2 and ZeRO-3 do not work"),
        (4, {"zero": 3, "pp": 2}, "zero = 3 with pp = 2: ZeRO-2 and ZeRO-3 do not work"),
        # The model's rules come before the world size's, and their suggestions meet
        # every rule of the option (tp divides heads, kv_heads, ffn and, with sp, seq).
        (8, {"tp": 3}, "heads (32) must be a multiple of tp (3); nearest valid tp: 2, 4"),
        (
            4,
            {"tp": 4, "sp": 1, "seq": 4097},
            "seq (4097) must be a multiple of tp (4); nearest valid tp: 1",
        ),
        (
            4,
            {"tp": 4, "ffn": 14337},
            "ffn (14337) must be a multiple of tp (4); nearest valid tp: 1",
        ),
        (
            4,
            {"hidden": 4096 + 8 * 3},
            "hidden (4120) must be a multiple of heads (32); nearest valid heads: 8, 40",
        ),
        (2, {"peak_tflops": 0}, "peak_tflops must be > 0 (got 0)"),
        (2, {"efficiency_pct": 0}, "efficiency_pct must be above 0 and at most 100 (got 0)"),
        (4, {"preset": "mixtral-8x7b", "tp": 2, "ep": 2}, "MoE with tp = 2 needs sequence"),
        # Shapes no model has, refused before a program is built (a billion layers ran out
        # of memory in a traceback; a huge hidden made the divisor search hang).
        (4, {"layers": 10**9}, "layers must be at most 10,000 (got 1000000000)"),
        (4, {"hidden": 10**12}, "hidden must be at most 10,000,000 (got 1000000000000)"),
    ],
)
def test_layout_errors_name_the_rule(world, flags, message):
    with pytest.raises(LayoutError) as e:
        RunSpec("llm", flags=flags, world_size=world).workload()
    assert str(e.value).startswith(f"llm: {message}")


def test_layout_hints_meet_every_rule_of_the_option():
    # ep divides experts and dp: with dp = 2, 3 experts leave ep 1 only (it said 1, 3).
    with pytest.raises(LayoutError) as e:
        RunSpec("llm", flags={"preset": "mixtral-8x7b", "experts": 3, "ep": 2},
                world_size=2).workload()  # fmt: skip
    assert str(e.value) == "llm: experts (3) must be a multiple of ep (2); nearest valid ep: 1"
    with pytest.raises(LayoutError) as e:
        RunSpec("llm", flags={"hidden": 100, "heads": 3}, world_size=4).workload()
    assert str(e.value) == (
        "llm: hidden (100) must be a multiple of heads (3); no heads value both divides 100 "
        "and is a multiple of kv_heads (8)"
    )


def test_unknown_preset_and_word_flags():
    with pytest.raises(SpecError, match="preset: must be one of gpt3-175b, llama-2-70b"):
        RunSpec("llm", flags={"preset": "llama-9"})
    with pytest.raises(SpecError, match="tp: must be a number"):
        RunSpec("llm", flags={"tp": "eight"})
    ns = build_parser(MODELS["llm"]).parse_args(["--preset", "gpt3-175b", "--tp", "8"])
    assert spec_from_namespace(MODELS["llm"], ns).flags == {"preset": "gpt3-175b", "tp": 8}
    assert RunSpec("llm", flags={"preset": "gpt3-175b"}).proxy_options() == [
        "--preset",
        "gpt3-175b",
    ]


def test_bad_layout_over_mpi_is_one_line():
    r = mpirun(2, "proxies.llm", "--tp", "4", timeout=60, env=MPI_ENV)
    assert r.returncode == 2
    assert (r.stdout + r.stderr).strip().splitlines() == [
        "error: llm: the world size must be a multiple of tp x pp = 4 (world size 2); "
        "nearest valid world sizes: 4"
    ]


# -- a real run ------------------------------------------------------------------------
def test_runs_over_mpi_with_the_hand_counted_calls(tmp_path):
    flags = ["--preset", "llama-3-8b", "--tp", "2", "--pp", "2", "--layers", "2"]
    doc = run_json(
        tmp_path,
        4,
        "proxies.llm",
        *flags,
        "--scale",
        "0.001",
        "--compute",
        "none",
        "--iters",
        "1",
        "--warmup",
        "0",
    )
    assert doc["info"]["global_batch"] == 8 and doc["info"]["micro_batches"] == 8
    # One layer per stage, 8 micro-batches. b s h x 2 bytes x 0.001 = 16,777.216 -> 16,777
    # elements = 67,108 B per tensor-parallel allreduce and pipeline message; b s fp32
    # x 0.001 -> 8 elements = 32 B per cross-entropy allreduce.
    # Stage 0: forward 1 (embedding) + 2, backward 2 allreduces; 8 sends and 8 receives.
    # Stage 1: forward 2 + 3 (cross-entropy), backward 1 (output layer) + 2.
    expect = {
        0: ({"tp": 40, "pp": 16}, {"tp": 40 * 67_108, "pp": 16 * 67_108}),
        1: ({"tp": 64, "pp": 16}, {"tp": 40 * 67_108 + 24 * 32, "pp": 16 * 67_108}),
    }
    for r in doc["phases"][0]["per_rank"]:
        calls, nbytes = expect[r["rank"] // 2]
        assert r["program"]["calls_by_group"] == calls, r["rank"]
        assert r["program"]["call_bytes_by_group"] == nbytes, r["rank"]


def test_recomputation_runs_each_layers_forward_collectives_again():
    flags = {"preset": "llama-3-8b", "tp": 2, "pp": 2, "layers": 2, "micro_batches": 2}
    plain, again = _ops(8, 0, **flags), _ops(8, 0, **flags, recompute=1)
    n = 16_777_216  # b s h x 2 bytes in elements: 8192 x 4096 x 2 / 4

    def count(ops, label):
        return len(_sizes(ops, label))

    # Stage 0 holds the embedding and 1 layer: 2 tensor-parallel allreduces per layer more
    # per micro-batch; the recomputed forward's compute is labelled as such.
    assert count(again, "tp_allreduce") == count(plain, "tp_allreduce") + 2 * 2
    assert set(_sizes(again, "tp_allreduce")) == {n}
    fwd = [o.duration_us for o in plain if getattr(o, "label", "") == "attention_forward"]
    rec = [o.duration_us for o in again if getattr(o, "label", "") == "attention_recompute"]
    assert rec == fwd
    back = {o.duration_us for o in again if getattr(o, "label", "") == "attention_backward"}
    assert back == {2 * fwd[0]}
    # The last stage's output layer is not recomputed: its backward is 2 forwards.
    last = _ops(8, 4, **flags, recompute=1)
    (logits,) = {o.duration_us for o in last if getattr(o, "label", "") == "logits_forward"}
    assert {o.duration_us for o in last if getattr(o, "label", "") == "logits_backward"} == {
        2 * logits
    }
    # With experts and sequence parallelism the all-to-alls run again too.
    moe = {"preset": "mixtral-8x7b", "tp": 2, "sp": 1, "ep": 2, "layers": 2, "micro_batches": 1}
    a, b = _ops(8, 0, **moe), _ops(8, 0, **moe, recompute=1)
    assert count(b, "moe_dispatch_recompute") == count(a, "moe_dispatch") == 2
    assert count(b, "sp_allgather") == count(a, "sp_allgather") + 2 * 2


def test_blocking_gradient_reductions_come_after_the_gradient_sent_upstream():
    # Without overlap, a stage sends its last micro-batch's input gradient to the stage
    # before first, then reduces: the reductions are off the pipeline's path.
    flags = {"preset": "llama-3-8b", "pp": 2, "layers": 2, "micro_batches": 2, "overlap": 0}
    ops = _ops(4, 2, **flags)  # stage 1 (dp 2)
    labels = [getattr(o, "label", "") for o in ops]
    last_send = max(i for i, lab in enumerate(labels) if lab == "pp_send_gradient")
    first_reduce = labels.index("grad_allreduce")
    assert last_send < first_reduce
    assert all(not o.req for o in ops if getattr(o, "label", "") == "grad_allreduce")
    # Simulated: stages' reductions no longer add up along the pipeline. 4 stages of
    # equal work, dp 1 and 2 on 10 GB/s links: dp 2 adds about one stage's reduction.
    cfg = {
        "distributed": {"num_nodes": 8, "bandwidth_limit_gb_per_s": 10},
        "topology": {"type": "switch", "num_nodes": 8},
        "workload": {"name": "llm", "world_size": 4, "flags": {}},
    }
    base = {"preset": "llama-3-8b", "pp": 4, "layers": 4, "vocab": 8, "micro_batches": 8,
            "overlap": 0}  # fmt: skip
    cfg["workload"]["flags"] = base
    one = simulate(cfg, record_series=False).iteration_time_s
    cfg["workload"].update(world_size=8, flags=dict(base, dp=2))
    two = simulate(cfg, record_series=False)
    # One stage's gradients, allreduced by 2 ranks on their own 10 GB/s links: S / B.
    stage_s = sum(
        o.count_elems * 4 for o in two.workload.phases[0].program(0)
        if getattr(o, "label", "") == "grad_allreduce"
    ) / 10e9  # fmt: skip
    # 1.47 here; 4.06 when each stage reduced before sending its gradient upstream.
    assert 0.5 * stage_s < two.iteration_time_s - one < 2 * stage_s


def test_peak_and_efficiency_take_fractions_other_options_whole_numbers():
    from workload.spec import RunSpec, SpecError

    flags = {"preset": "llama-3-8b", "pp": 2, "layers": 2}
    a = RunSpec("llm", flags={**flags, "peak_tflops": 312.5, "efficiency_pct": 42.5}, world_size=4)
    b = RunSpec("llm", flags={**flags, "peak_tflops": 312, "efficiency_pct": 50}, world_size=4)
    wa, wb = a.workload(), b.workload()
    assert wa.info["peak_flops_per_device"] == 312.5e12
    # A rank's compute time is FLOPs over peak x efficiency: 312.5 x 0.425 against 312 x 0.5.
    ca = sum(op.duration_us for op in wa.phases[0].program(0) if hasattr(op, "duration_us"))
    cb = sum(op.duration_us for op in wb.phases[0].program(0) if hasattr(op, "duration_us"))
    assert ca / cb == pytest.approx((312 * 0.5) / (312.5 * 0.425), rel=1e-9)
    with pytest.raises(SpecError, match=r"pp: must be a whole number \(got 2\.5\)"):
        RunSpec("llm", flags={**flags, "pp": 2.5}, world_size=4)
    assert RunSpec("llm", flags={**flags, "pp": 2.0}, world_size=4).flags["pp"] == 2
    ns = build_parser(MODELS["llm"]).parse_args(["--peak-tflops", "312.5", "--pp", "2"])
    assert ns.peak_tflops == 312.5 and ns.pp == 2


def test_a_device_under_one_tflops_and_a_fractional_efficiency_are_taken():
    # A CPU socket's 0.5 TFLOP/s at 0.5% of it: 2.5 GFLOP/s sustained.
    cfg = {
        "distributed": {"num_nodes": 2, "bandwidth_limit_gb_per_s": 1e6},
        "topology": {"type": "ring", "link_latency_us": 0},
        "workload": {"name": "llm", "world_size": 2, "scale": 1e-6, "flags": {
            "preset": "llama-3-8b", "layers": 1, "micro_batches": 1,
            "peak_tflops": 0.5, "efficiency_pct": 0.5}},
    }  # fmt: skip
    slow = simulate(cfg, record_series=False)
    cfg["workload"]["flags"].update(peak_tflops=1, efficiency_pct=1)
    fast = simulate(cfg, record_series=False)
    assert slow.iteration_time_s == pytest.approx(4 * fast.iteration_time_s, rel=1e-3)


def test_the_shape_that_ran_is_recorded_and_aggregated():
    # Flags of 0 mean "the preset's" (or "derived"): the workload records what ran, and
    # aggregate shows those values, not the zeros.
    from workflows.aggregate import _args_text
    from workload.spec import RunSpec

    w = RunSpec("llm", flags={"preset": "llama-3-8b", "layers": 2}, world_size=4).workload()
    assert w.info["shape"] == {"layers": 2, "hidden": 4096, "heads": 32, "kv_heads": 8,
                               "ffn": 14336, "seq": 8192, "vocab": 128256, "experts": 0,
                               "top_k": 0}  # fmt: skip
    text = _args_text(w.params, w.info)
    assert "hidden=4096" in text and "dp=4" in text and "micro_batches=4" in text
    assert "hidden=0" not in text
