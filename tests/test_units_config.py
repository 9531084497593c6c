"""Units in one place, units in the configuration's field names, one MPICH table."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from simnet.config import (
    LINK_PARAM_KEYS,
    Config,
    ConfigError,
    apply_link_params,
    current_key,
    load_config,
    schema,
)
from simnet.simulate import build_topology
from workflows import calibrate as cal
from workload import units
from workload.collectives import (
    ALGORITHMS,
    RING_BCAST_MAX_RANKS,
    default_algorithm,
    mpich_algorithm,
)

ROOT = Path(__file__).resolve().parents[1]
SEED_NOTE = (
    "distributed.bandwidth_limit is deprecated; use distributed.bandwidth_limit_gb_per_s "
    "(same unit)"
)


# ---------------------------------------------------------------- units


def test_unit_constants_and_conversions():
    assert units.ELEM_BYTES == 4
    assert units.GB == 1_000_000_000 and units.GIB == 1_073_741_824
    assert units.MIB == 1_048_576 and units.KIB == 1024
    assert units.us_to_s(2.0) == 2e-06
    assert units.s_to_us(0.25) == 250_000.0
    assert units.gb_per_s_to_bytes_per_s(12.5) == 12_500_000_000.0
    assert units.bytes_per_s_to_gb_per_s(25e9) == 25.0
    assert units.elems_to_bytes(1000) == 4000


def test_microseconds_become_the_seconds_they_are_written_as():
    # x * 1e-6 and x / 1e6 differ in the last bit for some x: dividing by 1e6 (exact in
    # binary) gives the value as written, so outputs read 5e-06, not 4.9999999999999996e-06.
    assert 5.0 * 1e-6 == 4.9999999999999996e-06
    assert units.us_to_s(5.0) == 5e-06
    assert all(units.us_to_s(x) == float(f"{x}e-6") for x in (0.5, 1.0, 3.0, 7.0, 25.0, 1e3))


# ---------------------------------------------------------------- field names


def test_seed_config_loads_with_a_note_and_the_same_values():
    raw = json.loads((ROOT / "config.json").read_text())
    assert raw["distributed"]["bandwidth_limit"] == 10.0  # the seed keeps its old name
    cfg = load_config(ROOT / "config.json")
    assert cfg.distributed.bandwidth_limit_gb_per_s == 10.0
    assert cfg.deprecation_notes == [SEED_NOTE]
    graph, _ = build_topology(cfg)
    assert {d["bandwidth"] for _, _, d in graph.edges(data=True)} == {10e9}


def test_every_old_name_loads_as_the_new_one():
    old = load_config(
        {
            "distributed": {"num_nodes": 8, "bandwidth_limit": 20.0},
            "topology": {"type": "hierarchical", "intra_bandwidth": 100.0, "inter_bandwidth": 5.0},
            "network": {"injection_bandwidth": 8.0},
        }
    )
    new = load_config(
        {
            "distributed": {"num_nodes": 8, "bandwidth_limit_gb_per_s": 20.0},
            "topology": {
                "type": "hierarchical",
                "intra_bandwidth_gb_per_s": 100.0,
                "inter_bandwidth_gb_per_s": 5.0,
            },
            "network": {"injection_bandwidth_gb_per_s": 8.0},
        }
    )
    assert old.model_dump() == new.model_dump()
    assert new.deprecation_notes == []
    assert [n.split(" ")[0] for n in old.deprecation_notes] == [
        "distributed.bandwidth_limit",
        "topology.intra_bandwidth",
        "topology.inter_bandwidth",
        "network.injection_bandwidth",
    ]
    graph, _ = build_topology(new)
    bws = {d["bandwidth"] for _, _, d in graph.edges(data=True)}
    assert bws == {100e9, 5e9}


def test_old_and_new_name_together_are_refused():
    with pytest.raises(ConfigError) as e:
        load_config({"distributed": {"bandwidth_limit": 10.0, "bandwidth_limit_gb_per_s": 12.5}})
    assert (
        "distributed.bandwidth_limit and distributed.bandwidth_limit_gb_per_s name the same "
        "field: give only distributed.bandwidth_limit_gb_per_s"
    ) in str(e.value)


def test_schema_names_the_units():
    s = schema()["$defs"]
    assert "bandwidth_limit_gb_per_s" in s["DistributedSection"]["properties"]
    assert "bandwidth_limit" not in s["DistributedSection"]["properties"]
    assert {"intra_bandwidth_gb_per_s", "inter_bandwidth_gb_per_s"} <= set(
        s["TopologySection"]["properties"]
    )
    assert "injection_bandwidth_gb_per_s" in s["NetworkSection"]["properties"]


def test_notes_survive_copies_and_a_config_passed_in():
    cfg = load_config(ROOT / "config.json")
    assert load_config(cfg).deprecation_notes == [SEED_NOTE]
    assert Config.model_validate(cfg).deprecation_notes == [SEED_NOTE]
    copy = cfg.model_copy(update={"workload": cfg.workload.model_copy(update={"iterations": 2})})
    assert copy.deprecation_notes == [SEED_NOTE]


def test_current_key_maps_dotted_old_names():
    assert current_key("topology.inter_bandwidth") == "topology.inter_bandwidth_gb_per_s"
    assert current_key("distributed.bandwidth_limit") == "distributed.bandwidth_limit_gb_per_s"
    assert current_key("workload.scale") == "workload.scale"


def test_simnet_prints_the_note_once_and_records_it(tmp_path, capsys):
    from simnet.cli import main

    cfg = {
        "distributed": {"num_nodes": 4, "bandwidth_limit": 10.0},
        "topology": {"type": "switch", "num_nodes": 4},
        "workload": {"name": "dlrm", "scale": 0.01},
    }
    path = tmp_path / "c.json"
    path.write_text(json.dumps(cfg))
    assert main(["--config", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert err.count("deprecated") == 1 and f"note: {SEED_NOTE}" in err
    doc = json.loads((tmp_path / "out" / "sim_results.json").read_text())
    assert doc["config_notes"] == [SEED_NOTE]
    assert doc["config"]["distributed"]["bandwidth_limit_gb_per_s"] == 10.0


# ---------------------------------------------------------------- link-parameter files


def test_link_param_keys_are_config_field_names():
    cfg = Config()
    for key, section in LINK_PARAM_KEYS.items():
        assert key in type(getattr(cfg, section)).model_fields, key


def _with_link_params(tmp_path: Path, doc: dict) -> Config:
    (tmp_path / "lp.json").write_text(json.dumps(doc))
    cfg = load_config({"network": {"link_params_file": "lp.json"}})
    new, notes = apply_link_params(cfg, tmp_path)
    assert notes
    return new


def test_old_link_param_files_load(tmp_path):
    old = _with_link_params(tmp_path, {"alpha_us": 4.0, "bandwidth_gb_per_s": 5.0})
    assert old.distributed.bandwidth_limit_gb_per_s == 5.0
    assert old.network.alpha_us == 4.0
    new = _with_link_params(tmp_path, {"alpha_us": 4.0, "bandwidth_limit_gb_per_s": 5.0})
    assert new.model_dump() == old.model_dump()


def test_link_param_file_with_both_keys_is_refused(tmp_path):
    (tmp_path / "lp.json").write_text(
        json.dumps({"bandwidth_gb_per_s": 5.0, "bandwidth_limit_gb_per_s": 6.0})
    )
    cfg = load_config({"network": {"link_params_file": "lp.json"}})
    with pytest.raises(ConfigError, match="both bandwidth_limit_gb_per_s and its old name"):
        apply_link_params(cfg, tmp_path)


# ---------------------------------------------------------------- group size


def test_hierarchical_group_size_default_in_one_place():
    from topologies import DEFAULT_GROUP_SIZE

    assert DEFAULT_GROUP_SIZE == 4
    cfg = load_config({"distributed": {"num_nodes": 8}, "topology": {"type": "hierarchical"}})
    assert cfg.topology.effective_group_size == 4
    graph, assumed = build_topology(cfg)
    assert graph.graph["params"]["group_size"] == 4 and "group size 4" in assumed
    assert load_config({"topology": {"type": "ring"}}).topology.effective_group_size is None
    with pytest.raises(ConfigError, match=r"group_size=4 must divide distributed\.num_nodes=6"):
        load_config({"distributed": {"num_nodes": 6}, "topology": {"type": "hierarchical"}})


# ---------------------------------------------------------------- MPICH's choice


@pytest.mark.parametrize(
    "op,p,count,mpich,simulated",
    [
        ("reduce_scatter", 8, 16383, "recursive_halving", "recursive_halving"),
        ("reduce_scatter", 6, 10, "pairwise", "ring"),  # no folded recursive halving
        ("reduce_scatter", 8, 16384, "pairwise", "ring"),  # 524,288 B vector
        ("alltoall", 8, 64, "bruck", "bruck"),  # 256 B per destination, p >= 8
        ("alltoall", 8, 65, "scattered", "scattered"),  # 260 B: batches of 32 peers
        ("alltoall", 4, 64, "scattered", "scattered"),  # p < 8
        ("alltoall", 4, 8193, "pairwise", "pairwise"),  # 32,772 B
        (
            "bcast",
            8,
            3073,
            "scatter_recursive_doubling_allgather",
            "scatter_recursive_doubling_allgather",
        ),  # 12,292 B
        ("bcast", 8, 3072, "binomial", "binomial"),  # 12,288 B (MPICH's tuning file: <=)
        ("bcast", 12, 3073, "scatter_ring_allgather", "scatter_ring_allgather"),
        (
            "bcast",
            8,
            131072,
            "scatter_recursive_doubling_allgather",
            "scatter_recursive_doubling_allgather",
        ),  # 524,288 B
        ("bcast", 8, 131073, "scatter_ring_allgather", "scatter_ring_allgather"),
        ("bcast", 1030, 131072, "scatter_ring_allgather", "binomial"),  # p (p - 1) transfers
        ("reduce", 8, 512, "binomial", "binomial"),  # 2,048 B
        ("reduce", 8, 513, "rabenseifner", "rabenseifner"),
        ("allreduce", 8, 512, "recursive_doubling", "recursive_doubling"),  # 2,048 B
        ("allreduce", 8, 513, "rabenseifner", "rabenseifner"),
        ("allgather", 6, 3413, "bruck", "bruck"),  # 81,912 B gathered
    ],
)
def test_mpich_choice_and_its_implemented_stand_in(op, p, count, mpich, simulated):
    assert mpich_algorithm(op, p, count) == mpich
    assert cal.mpich_algorithm(op, p, count) == mpich
    assert default_algorithm(op, p, count) == simulated


def test_calibrate_and_the_simulator_choose_the_same_algorithm():
    ops = ("allreduce", "allgather", "reduce_scatter", "alltoall", "bcast", "reduce")
    counts = [0, 1, 63, 64, 65, 512, 513, 3071, 3072, 3413, 3414, 8192, 8193, 16383, 16384,
              131071, 131072, 1 << 20]  # fmt: skip
    for op in ops:
        for p in (1, 2, 3, 4, 6, 7, 8, 12, 16, 64, 1000, 1024):
            for c in counts:
                chosen = cal.mpich_algorithm(op, p, c)
                simulated = default_algorithm(op, p, c)
                assert simulated in ALGORITHMS[op]
                if chosen in ALGORITHMS[op] and not (
                    op == "bcast" and p > RING_BCAST_MAX_RANKS
                ):  # implemented: the simulator runs it
                    assert simulated == chosen, (op, p, c)
                # and calibrate's closed form knows MPICH's choice
                if p >= 2:
                    cal.cost_terms(op, chosen, p, c)


# Inputs a new user tried (issue: every input a run gets): each refused before any work,
# in a line naming the field, with exit code 2.
GE, LE = "Input should be greater than or equal to", "Input should be less than or equal to"
NAN = "a number is needed, not"
BAD_CONFIGS = [
    ({"distributed": {"bandwidth_limit_gb_per_s": 1e-300}}, f"bandwidth_limit_gb_per_s: {GE}"),
    ({"distributed": {"bandwidth_limit": 1e-300}}, f"distributed.bandwidth_limit_gb_per_s: {GE}"),
    ({"workload": {"iterations": 1e12}}, f"workload.iterations: {LE} 1000000"),
    ({"workload": {"name": "dlrm", "scale": 1e30}}, f"workload.scale: {LE} 1000"),
    ({"distributed": {"num_nodes": True}}, f"distributed.num_nodes: {NAN} true"),
    ({"topology": {"num_nodes": False}}, f"topology.num_nodes: {NAN} false"),
    ({"topology": {"link_latency_us": 1e9}}, f"topology.link_latency_us: {LE}"),
    ({"training": {"num_epochs": 10**9}}, f"training.num_epochs: {LE} 1000000"),
    ({"collectives": {"step_latency_us_by_op": {"alltoall": True}}}, f"alltoall: {NAN} true"),
    ({"topology": {"type": "torus", "dims": [True, 4]}}, f"topology.dims.0: {NAN} true"),
    ({"workload": {"compute_scale": math.inf}}, "compute_scale: Input should be a finite number"),
    # A quoted number is a number in the wrong place (pydantic alone would take it).
    ({"distributed": {"num_nodes": "16"}}, f'distributed.num_nodes: {NAN} "16"'),
    ({"topology": {"type": "torus", "dims": ["4", 4]}}, f'topology.dims.0: {NAN} "4"'),
    ({"network": {"alpha_us": "5"}}, f'network.alpha_us: {NAN} "5"'),
    ({"hosts": {"copy_bandwidth_gb_per_s": 1e12}}, f"hosts.copy_bandwidth_gb_per_s: {LE}"),
    ({"hosts": {"nic_bandwidth_gb_per_s": 1e-12}}, f"hosts.nic_bandwidth_gb_per_s: {GE}"),
    ({"hosts": {"copy_latency_us": 1e12}}, f"hosts.copy_latency_us: {LE}"),
    ({"workload": {"compute_scale": 1e9}}, f"workload.compute_scale: {LE} 1000"),
    ({"topology": {"type": "fat_tree", "oversubscription": 1e9}}, f"oversubscription: {LE}"),
    ({"training": {"compute_us_per_step": 1e15}}, f"compute_us_per_step: {LE}"),
    ({"logging": {"log_dir": ""}}, "logging.log_dir: String should have at least 1 character"),
]


@pytest.mark.parametrize(("doc", "message"), BAD_CONFIGS)
def test_nonsense_values_are_refused_with_exit_2(tmp_path, capsys, doc, message):
    from simnet.cli import main

    path = tmp_path / "c.json"
    path.write_text(json.dumps(doc))
    assert main(["--config", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert not (tmp_path / "out").exists()


def test_a_key_given_twice_is_refused_with_exit_2(tmp_path, capsys):
    from simnet.cli import main

    path = tmp_path / "dup.json"
    path.write_text('{"distributed": {"num_nodes": 8, "num_nodes": 16}}')
    assert main(["--config", str(path), "--out", str(tmp_path / "out")]) == 2
    assert '"num_nodes" is given twice in one object' in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_config_that_is_not_utf8_is_refused_with_exit_2(tmp_path, capsys):
    from simnet.cli import main

    path = tmp_path / "latin1.json"
    path.write_bytes('{"logging": {"log_dir": "r\u00e9sultats"}}'.encode("latin-1"))
    assert main(["--config", str(path)]) == 2
    assert "not UTF-8 text (byte 26 is 0xe9); save it as UTF-8" in capsys.readouterr().err


def test_an_out_that_is_a_file_is_refused_before_simulating(tmp_path, capsys):
    from simnet.cli import main

    path = tmp_path / "c.json"
    path.write_text(json.dumps({"distributed": {"num_nodes": 4}}))
    target = tmp_path / "taken"
    target.write_text("keep me")
    assert main(["--config", str(path), "--out", str(target)]) == 2
    assert f"{target} is a file, not a folder: choose another --out" in capsys.readouterr().err
    assert target.read_text() == "keep me"


def test_hierarchical_latencies_are_checked_in_the_configurations_words(tmp_path, capsys):
    from simnet.cli import main

    path = tmp_path / "c.json"
    path.write_text(json.dumps({
        "distributed": {"num_nodes": 8},
        "topology": {"type": "hierarchical", "intra_latency_us": 10},
    }))  # fmt: skip
    assert main(["--config", str(path), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: topology.intra_latency_us (10 us) must be at most topology.inter_latency_us "
        "(5 us, link_latency_us): shortest routes would take traffic inside a group through "
        "the top switch"
    )


def test_a_check_across_fields_names_them_without_pasting_the_config(tmp_path, capsys):
    from simnet.cli import main

    path = tmp_path / "c.json"
    doc = {
        "distributed": {"num_nodes": 10},
        "topology": {"type": "hierarchical", "num_nodes": 10, "group_size": 3},
    }
    path.write_text(json.dumps(doc))
    assert main(["--config", str(path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[1] == "  topology.group_size=3 must divide topology.num_nodes=10"
    assert len(lines) == 2


@pytest.mark.parametrize("value", [1, 0, "yes", "off", "1"])
def test_a_switch_takes_true_or_false_only(value):
    # pydantic would read 1, "yes" or "off" as a boolean: a typo must not pass as a choice.
    with pytest.raises(ConfigError, match=r"collectives.stream_order: true or false is needed"):
        load_config({"collectives": {"stream_order": value}})
    with pytest.raises(ConfigError, match=r"topology.ecmp: true or false is needed"):
        load_config({"topology": {"ecmp": value}})
    assert load_config({"collectives": {"stream_order": False}}).collectives.stream_order is False


def test_a_null_flag_is_named_as_null_not_as_a_wrong_number():
    with pytest.raises(ConfigError) as e:
        load_config({"workload": {"name": "llm", "flags": {"preset": None}}})
    assert "workload.flags: preset: null is no value; leave it out for its default" in str(e.value)
