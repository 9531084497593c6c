"""workload.results.write_json: indented for people, large numeric tables a row per line."""

from __future__ import annotations

import json
import os
import stat

import numpy as np
import pytest

from workload.results import TABLE_MIN_NUMBERS, counted, write_json


def test_a_document_without_large_tables_is_written_as_json_indents_it(tmp_path):
    doc = {"a": 1, "b": [1, 2.5, None], "c": {"d": [[1, 2], [3, 4]], "e": ["x"] * 9000}}
    path = write_json(tmp_path / "doc.json", doc)
    assert path.read_text() == json.dumps(doc, indent=1)


def test_large_numeric_tables_take_a_line_per_row(tmp_path):
    n = 80  # 6,400 numbers: a table
    assert n * n >= TABLE_MIN_NUMBERS > (n - 20) ** 2
    m = np.arange(n * n, dtype=float).reshape(n, n)
    m[3, 4] = np.inf
    rows = [[i * 0.5 for i in range(n)] for _ in range(n)]
    rows[1][2] = None
    doc = {
        "matrix": m,
        "nested": {"rows": rows, "small": [[1, 2]] * 3, "line": list(range(5000))},
        "under": [[1.0] * (n - 20)] * (n - 20),  # 3,600 numbers: as json indents them
        "words": ["w"] * 5000,
    }
    text = write_json(tmp_path / "doc.json", doc).read_text()
    plain = json.loads(json.dumps(doc, default=lambda a: a.tolist()))
    assert json.loads(text) == plain
    lines = text.splitlines()
    # The matrix: its key's line, one per row, the closing bracket, indented as json does.
    at = lines.index(' "matrix": [')
    assert lines[at + 1] == "  " + json.dumps(m[0].tolist()) + ","
    assert lines[at + 4] == "  " + json.dumps(m[3].tolist()) + ","  # with Infinity
    assert lines[at + n] == "  " + json.dumps(m[-1].tolist())
    assert lines[at + n + 1] == " ],"
    at = lines.index('  "rows": [')
    assert lines[at + 2] == "   " + json.dumps(rows[1]) + ","  # with null
    assert lines[at + n + 1] == "  ],"
    assert '  "line": ' + json.dumps(list(range(5000))) in lines  # (the last key: no comma)
    # Everything else as json indents it: a line per small row's number and per word.
    expected = (
        2  # braces
        + (n + 2)  # matrix
        + 1
        + (n + 2)
        + (1 + 3 * 4 + 1)
        + 1
        + 1  # nested: rows, small, line
        + 1
        + (n - 20) * ((n - 20) + 2)
        + 1  # under
        + 5000
        + 2  # words
    )
    assert len(lines) == expected


def test_large_lists_of_flat_records_take_a_line_per_record(tmp_path):
    links = [
        {"link": f"{i}->{i + 1}", "bytes": i * 3, "busy_fraction": i / 7, "peak": None}
        for i in range(1100)  # 4,400 values: a table of records
    ]
    links[5]["busy_fraction"] = float("inf")
    few = links[:3]  # 12 values: as json indents them
    nested = [{"rank": i, "parts": [i, i]} for i in range(2000)]  # not flat: as indented
    doc = {"phase": {"links": links, "few": few, "nested": nested}}
    text = write_json(tmp_path / "doc.json", doc).read_text()
    assert json.loads(text) == json.loads(json.dumps(doc))
    lines = text.splitlines()
    at = lines.index('  "links": [')
    assert lines[at + 1] == "   " + json.dumps(links[0]) + ","
    assert (
        lines[at + 6]
        == '   {"link": "5->6", "bytes": 15, "busy_fraction": Infinity, "peak": null},'
    )
    assert lines[at + 1100] == "   " + json.dumps(links[-1])
    assert lines[at + 1101] == "  ],"
    # the rest as json.dumps(indent=1) writes it
    rest = {"few": few, "nested": nested}
    inner = json.dumps(rest, indent=1).splitlines()[1:-1]
    assert [line[1:] for line in lines[at + 1102 : -2]] == inner


def test_writing_through_a_link_keeps_the_link(tmp_path):
    (tmp_path / "real").mkdir()
    link = tmp_path / "out.json"
    link.symlink_to(tmp_path / "real" / "target.json")
    assert write_json(link, {"a": 1}) == link
    assert link.is_symlink() and json.loads((tmp_path / "real" / "target.json").read_text()) == {
        "a": 1
    }
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["target.json"]


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")
def test_writing_to_a_device_node_writes_into_it(tmp_path):
    # As root, renaming a temporary file over /dev/null replaced the device with a file
    # for the whole machine: a node of the same device in tmp_path stands in for it.
    from workload.results import write_text

    null = tmp_path / "null"
    os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    write_json(null, {"a": 1})
    write_text(null, "text")
    assert stat.S_ISCHR(null.stat().st_mode) and null.stat().st_rdev == os.makedev(1, 3)
    assert [p.name for p in tmp_path.iterdir()] == ["null"]  # no temporary left


def test_the_check_before_a_run_follows_links_and_takes_device_nodes(tmp_path):
    from workload.results import output_file_problem

    assert output_file_problem("/dev/null", "--json") is None
    (tmp_path / "real").mkdir()
    (tmp_path / "file").write_text("x")
    link = tmp_path / "out.json"
    link.symlink_to(tmp_path / "file" / "target.json")  # through a file: cannot be made
    problem = output_file_problem(link, "--json")
    assert problem == f"--json {link}: {tmp_path / 'file'} is a file, not a folder"
    link.unlink()
    link.symlink_to(tmp_path / "real" / "target.json")
    assert output_file_problem(link, "--json") is None


def test_counted_says_one_thing_in_the_singular():
    assert counted(1, "timed iteration") == "1 timed iteration"
    assert counted(0, "timed iteration") == "0 timed iterations"
    assert counted(3, "timed iteration") == "3 timed iterations"
    assert counted(2, "process", "processes") == "2 processes"
    assert counted(1, "process", "processes") == "1 process"


def test_a_full_disk_is_one_line_and_leaves_no_partial_file(tmp_path):
    # A writer failing as a full disk makes it (PIL's, json's): one line naming the file,
    # the earlier file kept as it was, no temp file left beside it.
    import errno

    from workload.results import ResultsWriteError, atomic_write

    target = tmp_path / "plot.png"
    target.write_text("earlier")

    def full(f):
        f.write("half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(ResultsWriteError) as e:
        atomic_write(target, full)
    assert str(e.value) == f"cannot write {target}: No space left on device"
    assert target.read_text() == "earlier"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plot.png"]


def test_a_folder_lock_the_file_system_cannot_take_is_no_busy_folder(tmp_path, monkeypatch):
    # NFS emulates flock with byte-range locks (EBADF on a folder), Lustre may have none
    # (ENOSYS), a server no lock service (ENOLCK): the run goes on unlocked; only a lock
    # another process holds (EWOULDBLOCK) is a busy folder.
    import errno
    import fcntl

    from workload import results

    def refuse(err: int):
        def flock(fd: int, op: int) -> None:
            raise (BlockingIOError if err == errno.EWOULDBLOCK else OSError)(err, "no")

        return flock

    for err, want in ((errno.EBADF, None), (errno.ENOSYS, None), (errno.ENOLCK, None)):
        monkeypatch.setattr(fcntl, "flock", refuse(err))
        assert results.lock_output_dir(tmp_path / f"d{err}") is want
    monkeypatch.setattr(fcntl, "flock", refuse(errno.EWOULDBLOCK))
    problem = results.lock_output_dir(tmp_path / "busy")
    assert problem.endswith("is in use: another run is writing its results there; wait for it "
                            "to finish or choose another --out")  # fmt: skip
