"""The run specification: one check, one workload, one proxy command line."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import pytest

import workload.models as models_pkg
from proxies.cli import build_parser, spec_from_namespace
from workload.models import MODELS, discover
from workload.spec import CONFIG_NAMES, STUDY_NAMES, RunSpec, SpecError

ROOT = Path(__file__).resolve().parents[1]


# -- validation ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "field", "option_text", "config_text"),
    [
        (
            {"model": "nope"},
            "model",
            "model: unknown model 'nope'; known: gpt2, bert,",
            "workload.name: unknown model 'nope'",
        ),
        (
            {"model": "gpt2", "scale": 0.0},
            "scale",
            "--scale must be a positive number up to 1000 (got 0.0)",
            "workload.scale must be a positive number up to 1000 (got 0.0)",
        ),
        (
            {"model": "gpt2", "scale": math.inf},
            "scale",
            "--scale must be a positive number up to 1000 (got inf)",
            "workload.scale must be a positive number",
        ),
        (
            {"model": "gpt2", "scale": 1e30},
            "scale",
            "--scale must be a positive number up to 1000 (got 1e+30)",
            "workload.scale must be a positive number up to 1000",
        ),
        (
            {"model": "dlrm", "compute": "busy"},
            "compute",
            "--compute must be one of sleep, spin, none (got 'busy')",
            "workload.compute must be one of",
        ),
        (
            {"model": "dlrm", "algorithm": "bogus"},
            "algorithm",
            "--algorithm must be one of",
            "collectives.algorithm must be one of",
        ),
        (
            {"model": "dlrm", "flags": {"nope": 3}},
            "flags",
            "--flag nope: dlrm has no such option (it has: none)",
            "workload.flags nope: dlrm has no such option",
        ),
        (
            {"model": "gpt2", "args": (1, 2, 3, 4)},
            "args",
            "gpt2: too many arguments; usage: gpt2 [layers=48] [stages=4] [microbatches=8]",
            "workload.args: gpt2: too many arguments",
        ),
        (
            {"model": "gpt2", "args": (0,)},
            "args",
            "gpt2: layers must be >= 1 (got 0)",
            "workload.args: gpt2: layers must be >= 1",
        ),
        (
            {"model": "resnet152", "per_tensor": True},
            "per_tensor",
            "--per-tensor is not available for resnet152 (the reference has aggregated "
            "gradient messages only)",
            "workload.per_tensor is not available for resnet152",
        ),
        (
            {"model": "dlrm", "fix_quirks": True},
            "fix_quirks",
            "--fix-quirks is not available for dlrm (it reproduces no quirk of its reference)",
            "workload.fix_quirks is not available for dlrm",
        ),
        (
            {"model": "gpt3_one_pipe_step", "args": (2, 2), "fix_quirks": True},
            "fix_quirks",
            "--fix-quirks is not available for gpt3_one_pipe_step (a step's rank programs "
            "have neither quirk of gpt3's iteration: it waits for its send and runs no "
            "micro-batch loop; only the printed micro-batch count would change)",
            None,
        ),
        (
            {"model": "gpt3_moe_one_pipe_step", "fix_quirks": True},
            "fix_quirks",
            "--fix-quirks is not available for gpt3_moe_one_pipe_step (a step's rank "
            "programs have neither quirk of gpt3_moe's iteration",
            None,
        ),
        (
            {"model": "llm", "fix_quirks": True},
            "fix_quirks",
            "--fix-quirks is not available for llm (it has no reference proxy, hence no "
            "quirk to repair)",
            None,
        ),
        (
            {"model": "llm", "per_tensor": True},
            "per_tensor",
            "--per-tensor is not available for llm (its gradients go in buckets of "
            "--bucket-mib, as DDP sends them)",
            None,
        ),
        (
            {"model": "chakra", "per_tensor": True},
            "per_tensor",
            "--per-tensor is not available for chakra (a trace's messages are replayed as "
            "the trace gives them)",
            None,
        ),
        ({"model": "dlrm", "iters": 0}, "iters", "--iters must be >= 1 (got 0)", None),
        ({"model": "dlrm", "warmup": -1}, "warmup", "--warmup must be >= 0 (got -1)", None),
    ],
)
def test_validation_names_the_field(kwargs, field, option_text, config_text):
    with pytest.raises(SpecError) as e:
        RunSpec(**kwargs)
    assert e.value.field == field
    assert option_text in str(e.value)
    if config_text is not None:
        assert e.value.render(CONFIG_NAMES).startswith(config_text)


@pytest.mark.parametrize("model", ["llm", "chakra"])
def test_a_model_without_a_reference_proxy_does_not_speak_of_one(model, capsys):
    from proxies.cli import build_parser
    from workload.models import get_model

    text = build_parser(get_model(model)).format_help()
    for said in ("the reference runs", "reference's own counts", "reference summary"):
        assert said not in text
    counts = get_model(model).counts
    assert (
        f"use the model's fixed counts, having no reference ({counts.reference_warmup} "
        f"warm-up, {counts.reference_runs} timed)" in " ".join(text.split())
    )
    assert "(default 3, sized for a 2-core machine)" in " ".join(text.split())


def test_study_names_and_valid_specs():
    with pytest.raises(SpecError) as e:
        RunSpec(model="nope")
    assert e.value.render(STUDY_NAMES).startswith("--model: unknown model 'nope'")
    spec = RunSpec(model="gpt2", args=[8, 2], flags={}, scale=0.5)
    assert spec.args == (8, 2)  # normalised to a tuple
    assert spec.params() == {"layers": 8, "stages": 2, "microbatches": 8}
    # A flag given keeps its value, even 0; absent flags take the model's default.
    ring = RunSpec(model="alexnet_ring", flags={"compute_us": 0})
    assert ring.params()["compute_us"] == 0 and ring.params()["hierarchical"] == 0
    with pytest.raises(SpecError, match="needed to build"):
        spec.workload()


def test_iteration_counts():
    gpt2 = MODELS["gpt2"]
    assert RunSpec(model="gpt2").iteration_counts() == (1, 10)
    assert (
        RunSpec(model="gpt2", reference_counts=True).iteration_counts()
        == (
            gpt2.counts.reference_warmup,
            gpt2.counts.reference_runs,
        )
        == (10, 256)
    )
    assert RunSpec(model="gpt2", iters=3, warmup=0).iteration_counts() == (0, 3)


# -- the command line and the workload describe the same program -------------------------
def _programs(wl):
    return {ph.name: [ph.program(r) for r in range(wl.world_size)] for ph in wl.phases}


@pytest.mark.parametrize(
    "spec",
    [
        RunSpec(model="gpt2", args=(8, 2), scale=0.01, compute="none", iters=3, warmup=1),
        RunSpec(model="bert", args=(8, 4, 3), fix_quirks=True),
        RunSpec(model="gpt2", args=(4, 2, 2), per_tensor=True, scale=0.123456789),
        RunSpec(model="resnet152_scal", flags={"scaling_size": 512}, reference_counts=True),
        RunSpec(model="resnet152", algorithm="ring"),
        RunSpec(model="alexnet_ring", args=(1, 100), flags={"compute_us": 1234}, scale=0.5),
        RunSpec(model="gpt3", args=(2,)),  # one argument: the reference's quirk
    ],
)
def test_proxy_argv_parses_back_to_the_same_workload(spec):
    argv = spec.proxy_argv()
    assert argv[0] == "-m"
    if argv[1] == "proxies":  # no proxies.<model> shim: the generic entry point
        assert argv[2] == spec.model
        rest = argv[3:]
    else:
        assert argv[1] == f"proxies.{spec.model}"
        rest = argv[2:]
    model = MODELS[spec.model]
    back = spec_from_namespace(model, build_parser(model).parse_args(rest))
    assert back == spec
    p = 8
    a, b = spec.workload(p), back.workload(p)
    assert a.params == b.params and a.groups == b.groups and a.info == b.info
    assert _programs(a) == _programs(b)


def test_proxy_argv_text():
    spec = RunSpec(model="gpt2", args=(8, 2), scale=0.01, compute="none", iters=3, warmup=1)
    assert spec.proxy_argv() == [
        "-m", "proxies.gpt2", "8", "2", "--scale", "0.01", "--compute", "none",
        "--iters", "3", "--warmup", "1",
    ]  # fmt: skip
    assert RunSpec(model="alexnet_ring").proxy_argv() == ["-m", "proxies.alexnet_ring"]


# -- the registry ----------------------------------------------------------------------------
def test_a_model_is_one_file(tmp_path, monkeypatch):
    (tmp_path / "tiny_extra.py").write_text(
        "from workload.models.base import Arg, Model\n"
        "from workload.layout import world_groups\n"
        "from workload.program import Phase, ProgramBuilder\n\n"
        "class Tiny(Model):\n"
        "    name = 'tiny_extra'\n"
        "    description = 'one allreduce'\n"
        "    args = (Arg('count', 16, 'elements'),)\n\n"
        "    def _build(self, req):\n"
        "        world_size, params, options, _ = req\n\n"
        "        def program(rank):\n"
        "            b = ProgramBuilder(options)\n"
        "            b.allreduce('world', params['count'])\n"
        "            return b.ops\n"
        "        return self.workload(world_size, params, {'world': world_groups(world_size)},\n"
        "                             [Phase('iteration', program)], info={'global_batch': 7},\n"
        "                             summary=[('world_size', world_size)])\n"
    )
    monkeypatch.setattr(models_pkg, "__path__", [*models_pkg.__path__, str(tmp_path)])
    try:
        found = discover()
        assert list(found)[: len(MODELS)] == list(MODELS)  # the others keep their order
        assert list(found)[-1] == "tiny_extra"
        tiny = found["tiny_extra"]
        wl = tiny.build(2, tiny.params([4]), RunSpec(model="dlrm").options())
        assert wl.phases[0].program(0)[0].count_elems == 4
        assert wl.summary(0, 0.5, "iteration") == (
            "world_size = 2, runtime per iteration = 0.500000 s"
        )
        assert tiny.samples_per_iteration(2, wl.params, wl.info) == 7.0
    finally:
        sys.modules.pop("workload.models.tiny_extra", None)


# -- per-model samples per iteration, from the reference definitions ------------------------
# (the table in the docstring of workflows/study/models.py)
@pytest.mark.parametrize(
    ("model", "p", "args", "flags", "samples"),
    [
        ("resnet152", 8, (), {}, 128 * 8),  # local batch 128 x P
        ("resnet152_scal", 4, (), {"scaling_size": 512}, 64 * 4),  # the 512 row: local 64
        ("resnet152_scal", 2, (), {"scaling_size": 2048}, 16 * 2),  # the 2048 row: local 16
        ("cosmoflow", 16, (), {}, 8 * (16 // 4)),  # 8 x data shards (P / 4)
        ("dlrm", 8, (), {}, 2048),  # fixed
        ("dlrm", 64, (), {}, 2048),
        ("gpt3", 16, (2, 3), {}, 16 * 3 / 4),  # P x acc_scale / 4
        ("gpt3_moe", 32, (2, 1), {}, 32 * 1),  # P x acc_scale
        ("gpt2", 8, (8, 4, 6), {}, 6 * 1 * (8 // 4)),  # micro-batches x 1 x P / stages
        ("bert", 8, (8, 2, 4), {}, 4 * 8 * (8 // 2)),  # micro-batches x 8 x P / stages
        ("alexnet_ring", 4, (), {}, 32 * 4),  # 32 x 5000 / 5000 per process
        ("alexnet_ring", 4, (), {"compute_us": 2500}, 32 * 2500 / 5000 * 4),
        ("resnet50", 4, (), {}, None),  # refused: no batch
        ("gpt3_one_pipe_step", 16, (2, 2), {}, None),
        ("gpt3_moe_one_pipe_step", 32, (2, 2), {}, None),
    ],
)
def test_samples_per_iteration_by_hand(model, p, args, flags, samples):
    wl = RunSpec(model=model, args=args, flags=flags).workload(p)
    got = MODELS[model].samples_per_iteration(p, wl.params, wl.info)
    assert got == samples
    if samples is None:
        assert MODELS[model].no_batch_reason
    else:
        assert MODELS[model].batch_definition


def test_strong_scaling_facts_live_on_the_models():
    strong = {n for n, m in MODELS.items() if m.strong_scaling}
    assert strong == {"resnet152_scal", "alexnet_ring"}
    scal = MODELS["resnet152_scal"]
    assert scal.strong_anchor_flags({}) == {"scaling_size": 256}
    assert [scal.strong_point_flags({}, p, 2)["scaling_size"] for p in (2, 4, 8, 16)] == [
        256, 512, 1024, 2048,
    ]  # fmt: skip
    with pytest.raises(ValueError, match="rows for 2, 4, 8, 16 processes only"):
        scal.strong_point_flags({}, 6, 2)
    ring = MODELS["alexnet_ring"]
    assert ring.strong_point_flags({"compute_us": 3000}, 6, 2) == {"compute_us": 1000}


def test_no_model_name_branches_in_simnet_and_workflows():
    pattern = re.compile(r"(==|!=|\bin\b) *\"(" + "|".join(MODELS) + r")\"")
    for pkg in ("simnet", "workflows"):
        for path in (ROOT / pkg).rglob("*.py"):
            text = path.read_text()
            assert not pattern.search(text), f"{path} branches on a model name"


def test_a_models_option_is_named_as_each_front_end_names_it():
    # It was "--flag tp" on a proxy's command line, whose option is --tp, and
    # "workload.flags tp" in a configuration file.
    with pytest.raises(SpecError) as e:
        RunSpec(model="llm", flags={"tp": "x"})
    assert e.value.field == "flags"
    assert e.value.render() == "--tp: must be a number (got 'x')"
    assert e.value.render(CONFIG_NAMES) == "workload.flags.tp: must be a number (got 'x')"
    assert e.value.render(STUDY_NAMES) == "--flag tp: must be a number (got 'x')"
    # A message about two fields names both; a dashed option keeps its dashes.
    both = SpecError("algorithm", "{field} x needs {field:flags.scaling_size} and {field:iters}")
    assert str(both) == "--algorithm x needs --scaling-size and --iters"
    assert both.render(CONFIG_NAMES) == (
        "collectives.algorithm x needs workload.flags.scaling_size and workload.iterations"
    )
    assert both.render(STUDY_NAMES) == "--algorithm x needs --flag scaling_size and --iters"


def test_alexnet_rings_group_size_and_algorithm_name_one_schedule():
    # --hierarchical G is the two-level algorithm; --algorithm may name it again only.
    for algorithm in (None, "hierarchical"):
        spec = RunSpec(model="alexnet_ring", flags={"hierarchical": 2}, algorithm=algorithm)
        assert spec.workload(4).info["algorithm"] == "hierarchical"
    assert RunSpec(model="alexnet_ring", algorithm="ring").workload(4).info["algorithm"] == "ring"
    with pytest.raises(SpecError) as e:
        RunSpec(model="alexnet_ring", flags={"hierarchical": 2}, algorithm="multiring")
    assert e.value.field == "algorithm"
    assert e.value.render(STUDY_NAMES) == (
        "--algorithm multiring and --flag hierarchical 2 do not go together: --flag "
        "hierarchical runs the two-level algorithm, which --algorithm multiring would "
        "replace; leave out one of them"
    )
    with pytest.raises(SpecError) as e:
        RunSpec(model="alexnet_ring", algorithm="hierarchical")
    assert str(e.value).startswith("--algorithm hierarchical needs the group size: add ")
    # Negative values are refused where they are given; 0 stays valid for both.
    for flag in ("hierarchical", "compute_us"):
        with pytest.raises(SpecError, match=rf"^--{flag.replace('_', '-')}: must be >= 0"):
            RunSpec(model="alexnet_ring", flags={flag: -1})
    ok = RunSpec(model="alexnet_ring", flags={"hierarchical": 0, "compute_us": 0})
    assert ok.workload(4).info["compute_us_per_step"] == 0


def test_a_group_size_that_does_not_divide_the_world_names_the_option():
    # "the hierarchical group size 3 must divide the world size 4", naming no option.
    with pytest.raises(SpecError) as e:
        RunSpec(model="alexnet_ring", flags={"hierarchical": 3}).workload(4)
    assert e.value.field == "flags"
    tail = (
        " 3 must divide the world size 4 (groups of 3 ranks for the two-level algorithm); "
        "sizes that do: 1, 2, 4"
    )
    assert e.value.render() == "--hierarchical" + tail
    assert e.value.render(CONFIG_NAMES) == "workload.flags.hierarchical" + tail
    assert e.value.render(STUDY_NAMES) == "--flag hierarchical" + tail
