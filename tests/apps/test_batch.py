"""copyless-batch end to end: joining a head started by the test (--address), a private
local Ray that stays quiet and leaves nothing behind, fast failures and usage errors."""

from __future__ import annotations

import collections
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from model_helpers import conv_net
from ray_helpers import RAY_ENV, batch_command, free_port

pytest.importorskip("ray")

from copyless.apps import batch
from copyless.model import compile_model
from copyless.model.zoo import cache_root

CLOSING = re.compile(
    r"^(\d+) images(?: \((\d+) unreadable\))? in \d+\.\d\d s, \d+\.\d images/s "
    r"\((\d+) actor\(s\) on (local Ray|cluster \S+), up in \d+\.\d s\) -> (\S+)$"
)


def _check_rows(out: Path, expected: dict[str, frozenset[int]]) -> None:
    rows = pq.read_table(out).to_pylist()
    assert collections.Counter(r["path"] for r in rows) == collections.Counter(list(expected))
    for row in rows:
        assert row["error"] is None and row["class_id"] in expected[row["path"]], row


def test_address_joins_a_head_started_with_ray_start(ray_head, photo_folder, tmp_path) -> None:
    folder, expected = photo_folder
    out = tmp_path / "out.parquet"
    env = {**os.environ, **RAY_ENV}
    command = [*batch_command(), str(folder), "-o", str(out), "--address", ray_head.address]
    result = subprocess.run(
        [*command, "--actors", "1", "--batch-size", "4", "-k", "2"],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    match = CLOSING.match(result.stdout.strip())
    assert match, result.stdout
    assert match.group(1) == str(len(expected)) and match.group(4).startswith("cluster ")
    _check_rows(out, expected)
    assert {len(r) for r in pq.read_table(out).column("top_class_ids").to_pylist()} == {2}


def test_local_ray_is_quiet_and_leaves_nothing_behind(photo_folder, tmp_path) -> None:
    folder, expected = photo_folder
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    temp = Path(tempfile.mkdtemp(prefix="clt-", dir="/tmp"))  # short: Ray's socket paths
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(HOME=str(home), TMPDIR=str(temp), COPYLESS_CACHE_DIR=str(cache_root()))
    bad = work / "broken.jpg"
    bad.write_bytes(b"\xff\xd8\xff" + bytes(64))
    try:
        result = subprocess.run(
            [*batch_command(), str(folder / "*.jpg"), str(bad), "-o", "out.parquet", "-k", "3"],
            capture_output=True, text=True, env=env, cwd=work, timeout=300, check=False,
        )  # fmt: skip
        leftovers = sorted(p.name for p in temp.iterdir())
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1, result.stdout
    match = CLOSING.match(lines[0])
    jpegs = {p: c for p, c in expected.items() if p.endswith(".jpg")}
    assert match and match.group(4) == "local Ray", lines
    assert (match.group(1), match.group(2)) == (str(len(jpegs) + 1), "1")
    # Quiet: only the progress bar on stderr, none of Ray's log lines.
    assert not re.search(r"INFO|WARNING|ERROR|core_worker|\.cc:\d+", result.stderr), result.stderr
    # Nothing written outside the cache and temporary directories: no ~/.ray/auth_token
    # (onnxruntime keeps a device id under ~/.cache), Ray's session directory removed
    # (onnxruntime 1.32 leaves a session-id file ".ses" in the temporary directory).
    # OpenVINO (loaded by the default --runner vaiml to measure it) writes its telemetry
    # client id, ~/intel/openvino_ga_cid, when it is imported: OpenVINO's, not copyless's.
    written = sorted(p.name for p in home.iterdir())
    assert written in ([], [".cache"], ["intel"], [".cache", "intel"]), written
    if "intel" in written:
        assert {p.name for p in (home / "intel").rglob("*") if p.is_file()} <= {
            "openvino_ga_cid", "stats"
        }
    assert [name for name in leftovers if name != ".ses"] == []
    assert sorted(p.name for p in work.iterdir()) == ["broken.jpg", "out.parquet"]
    rows = pq.read_table(work / "out.parquet").to_pylist()
    broken = [r for r in rows if r["path"] == str(bad)]
    assert len(broken) == 1 and "not a decodable image" in broken[0]["error"]
    _check_rows_subset(rows, jpegs)


def _check_rows_subset(rows: list[dict[str, object]], expected: dict[str, frozenset[int]]) -> None:
    good = [r for r in rows if r["error"] is None]
    assert sorted(str(r["path"]) for r in good) == sorted(expected)
    for row in good:
        assert row["class_id"] in expected[str(row["path"])], row


def test_unreachable_address_fails_fast(photo_folder, tmp_path, capfd) -> None:
    folder, _ = photo_folder
    out = tmp_path / "out.parquet"
    address = f"127.0.0.1:{free_port()}"
    start = time.monotonic()
    assert batch.main([str(folder), "-o", str(out), "--address", address]) == 1
    assert time.monotonic() - start < 15
    err = capfd.readouterr().err
    assert f"error: no Ray cluster at {address}" in err and "ray start --head" in err
    assert not out.exists()


def test_device_cuda_needs_a_gpu_in_the_cluster(ray_head, photo_folder, tmp_path) -> None:
    folder, _ = photo_folder
    command = [*batch_command(), str(folder), "-o", str(tmp_path / "o.parquet"), "--device", "cuda"]
    result = subprocess.run(
        [*command, "--address", ray_head.address],
        capture_output=True, text=True, env={**os.environ, **RAY_ENV}, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 1
    assert "--device cuda: the Ray cluster at" in result.stderr and "has no GPU" in result.stderr


def test_usage_errors(photo_folder, tmp_path, capsys) -> None:
    folder, _ = photo_folder
    out = str(tmp_path / "out.parquet")
    assert batch.main([str(tmp_path / "nothing*.jpg"), "-o", out]) == 2
    assert "no file matches" in capsys.readouterr().err
    assert batch.main([str(tmp_path / "missing.jpg"), "-o", out]) == 2
    assert "no image or folder at" in capsys.readouterr().err  # the apps' one listing rule
    plain = compile_model(conv_net("N", size=32), tmp_path / "plain.rai")  # no RGBx input
    assert batch.main([str(folder), "-o", out, "-m", str(plain)]) == 2
    assert "--input-format rgbx" in capsys.readouterr().err
    assert batch.main([str(folder), "-o", out, "-m", str(tmp_path / "none.rai")]) == 2
    assert "no model at" in capsys.readouterr().err
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert batch.main([str(folder), "-o", str(blocker / "out.parquet")]) == 2  # before any Ray
    assert f"{blocker} is not a directory" in capsys.readouterr().err
    for flags in (["--actors", "0"], ["-k", "0"], ["--device", "cuda", "--runner", "openvino"]):
        with pytest.raises(SystemExit) as exit_info:
            batch.main([str(folder), "-o", out, *flags])
        assert exit_info.value.code == 2
    assert not Path(out).exists()


def test_inputs_files_directories_and_globs(tmp_path) -> None:
    (tmp_path / "a" / "deep").mkdir(parents=True)
    for name in ("a/1.jpg", "a/2.PNG", "a/notes.txt", "a/deep/3.jpeg", "b.jpg", "c.bmp"):
        (tmp_path / name).write_bytes(b"")
    found = batch.expand_inputs(
        [str(tmp_path / "a"), str(tmp_path / "*.jpg"), str(tmp_path / "a" / "1.jpg"),
         str(tmp_path / "c.bmp")]
    )  # fmt: skip
    names = [str(Path(p).relative_to(tmp_path)) for p in found]
    assert names == ["a/1.jpg", "a/2.PNG", "a/deep/3.jpeg", "b.jpg", "c.bmp"]
    assert all(os.path.isabs(p) for p in found)
    (tmp_path / "empty").mkdir()
    with pytest.raises(batch.InputError, match="no images"):
        batch.expand_inputs([str(tmp_path / "empty")])


def test_two_actors_on_a_two_cpu_head_are_fitted_and_finish(ray_head, photo_folder, tmp_path):
    """Issue 27: `--actors 2` against `ray start --head --num-cpus=2` waited forever (the
    actors held both CPUs, the decode tasks none); now the plan shrinks the actors."""
    folder, expected = photo_folder
    out = tmp_path / "out.parquet"
    command = [*batch_command(), str(folder), "-o", str(out), "--address", ray_head.address]
    result = subprocess.run(
        [*command, "--actors", "2", "--batch-size", "4", "--stall-timeout", "60"],
        capture_output=True, text=True, env={**os.environ, **RAY_ENV}, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (
        "note: 2 actor(s) of 1 CPU and a decode task of 0.9 CPU do not fit the cluster's free "
        "CPUs (2: 2 on 1 node(s)): running 2 actor(s) of 0.5 CPU each\n"
    ) in result.stderr
    match = CLOSING.match(result.stdout.strip())
    assert match and match.group(3) == "2", result.stdout
    _check_rows(out, expected)


def test_a_manifest_into_a_directory_of_parts_twice_gives_each_row_once(
    ray_head, photo_folder, tmp_path
) -> None:
    import pyarrow as pa
    import pyarrow.csv as pcsv

    _, expected = photo_folder
    manifest = tmp_path / "images.csv"
    pcsv.write_csv(pa.table({"n": range(len(expected)), "file": sorted(expected)}), manifest)
    out = tmp_path / "parts"
    command = [
        *batch_command(), "--manifest", str(manifest), "--path-column", "file",
        "-o", f"{out}/", "--address", ray_head.address, "--batch-size", "4",
    ]  # fmt: skip
    env = {**os.environ, **RAY_ENV}
    names = []
    for _ in range(2):  # the same job again: the parts are replaced, no row is added
        result = subprocess.run(
            command, capture_output=True, text=True, env=env, timeout=300, check=False
        )
        assert result.returncode == 0, result.stderr
        match = CLOSING.match(result.stdout.strip())
        assert match and match.group(1) == str(len(expected)) and match.group(5) == f"{out}/"
        names.append(sorted(p.name for p in out.iterdir()))
    assert names[0] == names[1] and all(n.startswith("part-") for n in names[0])
    _check_rows(out, expected)


def test_bad_manifests_and_input_combinations_are_usage_errors(tmp_path, capsys) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    manifest = tmp_path / "m.parquet"
    pq.write_table(pa.table({"uri": ["a.jpg"]}), manifest)
    out = str(tmp_path / "out.parquet")
    assert batch.main(["--manifest", str(manifest), "-o", out]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"error: {manifest}: no column 'path' (columns: uri); name the column of paths with "
        "--path-column\n"
    )
    for argv in (["-o", out], [str(tmp_path), "--manifest", str(manifest), "-o", out]):
        with pytest.raises(SystemExit) as exit_info:
            batch.main(argv)
        assert exit_info.value.code == 2
        assert "give INPUTs or --manifest (one of them)" in capsys.readouterr().err
    assert not Path(out).exists()


def test_a_full_disk_keeps_the_finished_parts(ray_head, photo_folder, tmp_path) -> None:
    """-o DIR/ on a 40 KiB tmpfs (mounted in a user and mount namespace of the command's
    own): the run fails in one line, and the parts written before the disk filled stay."""
    folder, expected = photo_folder
    mount, kept = tmp_path / "small", tmp_path / "kept"
    mount.mkdir()
    kept.mkdir()
    command = " ".join(
        [*batch_command(), str(folder), "-o", f"{mount}/parts/", "--address", ray_head.address,
         "--batch-size", "2", "-k", "100"]
    )  # fmt: skip
    script = (
        f"mount -t tmpfs -o size=40k tmpfs {mount} && {{ {command}; rc=$?; "
        f"cp -r {mount}/parts/. {kept}/; exit $rc; }}"
    )
    result = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script],
        capture_output=True, text=True, env={**os.environ, **RAY_ENV}, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.stderr
    found = re.fullmatch(
        rf"error: cannot write {mount}/parts/: No space left on device; (\d+) rows kept in "
        rf"(\d+) part\(s\) under {mount}/parts",
        lines[0],
    )
    assert found, lines
    rows = pq.read_table(kept).to_pylist()
    assert 0 < len(rows) == int(found.group(1)) < len(expected)
    assert len(list(kept.glob("part-*.parquet"))) == int(found.group(2))
    assert not list(kept.glob(".*"))  # no half-written part
    for row in rows:
        assert row["error"] is None and row["class_id"] in expected[row["path"]], row


def test_labels_file_names_the_classes(photo_folder, tmp_path, capsys) -> None:
    """``--labels FILE`` (class_names, the apps' one rule): the rows carry the user's names;
    a file whose count does not fit the model is a usage error before Ray starts."""
    folder, _ = photo_folder
    names = tmp_path / "names.txt"
    names.write_text("".join(f"mine {k}\n" for k in range(1000)))
    out = tmp_path / "out.parquet"
    assert batch.main([str(folder), "-o", str(out), "--labels", str(names), "-k", "2"]) == 0
    rows = pq.read_table(out).to_pylist()
    assert rows and all(r["label"] == f"mine {r['class_id']}" for r in rows)
    assert all(t == [f"mine {c}" for c in r["top_class_ids"]] for r in rows
               for t in [r["top_labels"]])  # fmt: skip
    short = tmp_path / "short.txt"
    short.write_text("cat\ndog\n")
    assert batch.main([str(folder), "-o", str(tmp_path / "x.parquet"), "--labels", str(short)]) == 2
    assert "has 2 names" in capsys.readouterr().err


def test_fewer_batches_than_actors_start_fewer_actors_quietly(ray_head, photo_folder,
                                                              tmp_path) -> None:  # fmt: skip
    """One photo, --actors 2: one batch to give, one actor started, and none of Ray Data's
    'minimum number of concurrent actors' warning (issue 53)."""
    _, expected = photo_folder
    one = next(p for p in expected if p.endswith("chelsea.jpg"))
    out = tmp_path / "one.parquet"
    result = subprocess.run(
        [*batch_command(), one, "-o", str(out), "--address", ray_head.address, "--actors", "2"],
        capture_output=True, text=True, env={**os.environ, **RAY_ENV}, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "concurrent actors" not in result.stderr and "Warning" not in result.stderr, \
        result.stderr  # fmt: skip
    match = CLOSING.match(result.stdout.strip())
    assert match and match.group(3) == "1", result.stdout
    _check_rows(out, {one: expected[one]})
