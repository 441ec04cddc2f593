"""copyless-ocr end to end: drawn pages as PNG/JPEG/grayscale/CMYK files, folders, -o, --json,
the bad arguments (one error line, exit 2), unreadable pages (an error row, the others go on,
exit 1) and SIGINT / SIGTERM to a child over a folder (exit 130 / 143, the pages done
printed and written)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from copyless.apps import ocr as app
from copyless.ocr import draw_page, installed_generations
from copyless.types import RunnerType

SIZE = (700, 990)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[str, ...]]]:
    """Two drawn pages: page0.png (RGB) and page1.jpg (grayscale JPEG, CMYK-free)."""
    root = tmp_path_factory.mktemp("pages")
    truths = []
    for seed in range(2):
        page = draw_page(seed, size=SIZE)
        truths.append(page.lines)
        image = Image.fromarray(page.image)
        if seed == 0:
            image.save(root / "page0.png")
        else:
            image.convert("L").save(root / "page1.jpg", quality=95)
    return root, truths


def _parse(out: str) -> dict[str, list[str]]:
    """image -> its lines' text (an unreadable image: ``["error: ..."]``)."""
    images: dict[str, list[str]] = {}
    current = ""
    for row in out.splitlines():
        if row.startswith("image: "):
            current = row[len("image: ") :]
            images[current] = []
        elif row.startswith("line: "):
            x0, y0, x1, y1, score, text = row[len("line: ") :].split(" ", 5)
            assert int(x0) < int(x1) and int(y0) < int(y1) and 0.5 <= float(score) <= 1.0
            images[current].append(text)
        elif row.startswith("error: "):
            images[current].append(row)
    return images


def test_folder_prints_lines_times_and_writes_png_and_json(
    folder: tuple[Path, list[tuple[str, ...]]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, truths = folder
    out_dir, doc = tmp_path / "drawn", tmp_path / "lines.json"
    assert app.main(["-i", str(root), "-o", str(out_dir), "--json", str(doc)]) == 0
    out = capsys.readouterr().out
    read = _parse(out)
    assert list(read) == [str(root / "page0.png"), str(root / "page1.jpg")]
    for texts, truth in zip(read.values(), truths, strict=True):
        assert len(texts) == len(truth)
        assert sum(t == s for t, s in zip(texts, truth, strict=True)) >= len(truth) - 2
    for stage in ("decode", "detect", "crops", "recognise", "total"):
        assert len([r for r in out.splitlines() if r.startswith(stage)]) == 2
        assert all(r.endswith("ms / image") for r in out.splitlines() if r.startswith(stage))
    with Image.open(out_dir / "page0.png") as drawn:
        assert drawn.size == (SIZE[0], SIZE[1])
        pixels = np.asarray(drawn.convert("RGB"))
    assert np.any(np.all(pixels == (220, 30, 30), axis=2))  # the boxes' colour is drawn
    data = json.loads(doc.read_text())
    assert data["models"] in installed_generations()
    first = data["images"][0]
    assert [line["text"] for line in first["lines"]] == next(iter(read.values()))
    assert set(first["ms_per_image"]) == {"decode", "detect", "crops", "recognise", "total"}


def test_one_image_to_one_png_with_runs(
    folder: tuple[Path, list[tuple[str, ...]]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, truths = folder
    target = tmp_path / "one.png"
    assert app.main(["-i", str(root / "page0.png"), "-o", str(target), "-n", "2"]) == 0
    assert target.is_file()
    assert _parse(capsys.readouterr().out)[str(root / "page0.png")] == list(truths[0])


def test_cmyk_and_alpha_files_are_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = draw_page(4, size=SIZE)
    Image.fromarray(page.image).convert("CMYK").save(tmp_path / "cmyk.jpg", quality=95)
    Image.fromarray(page.image).convert("RGBA").save(tmp_path / "alpha.png")
    assert app.main(["-i", str(tmp_path)]) == 0
    read = _parse(capsys.readouterr().out)
    for texts in read.values():
        assert len(texts) == len(page.lines)


def test_blank_image_prints_no_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    Image.new("RGB", (300, 200), (240, 240, 230)).save(tmp_path / "blank.png")
    assert app.main(["-i", str(tmp_path / "blank.png")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("image: ") and "line: " not in out and "total" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-i", "/nonexistent/page.png"], "error: no image or folder at /nonexistent/page.png"),
        (["-i", "{tmp}", "-n", "0"], "error: -n must be >= 1"),
        (["-i", "{tmp}"], "error: no images in {tmp}"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "notes.txt").write_text("no images here")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert app.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(message.replace("{tmp}", str(tmp_path))) and "\n" not in err


def test_unreadable_pages_are_error_rows_and_the_others_are_read(
    folder: tuple[Path, list[tuple[str, ...]]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not an image at all (its header fails) and a truncated PNG (its header reads, its
    pixels do not: the detector's prepare fails) among good pages: one ``error:`` row each,
    the other pages' text, the JSON and the closing line say so, exit 1."""
    root, truths = folder
    pages = tmp_path / "pages"
    pages.mkdir()
    good = (root / "page0.png").read_bytes()
    (pages / "page0.png").write_bytes(good)
    (pages / "page05.png").write_bytes(b"not an image")
    (pages / "page07.png").write_bytes(good[:400])
    (pages / "page1.jpg").write_bytes((root / "page1.jpg").read_bytes())
    doc = tmp_path / "lines.json"
    assert app.main(["-i", str(pages), "--json", str(doc)]) == 1
    out = capsys.readouterr().out
    read = _parse(out)
    assert list(read) == [str(pages / n) for n in ("page0.png", "page05.png", "page07.png",
                                                     "page1.jpg")]  # fmt: skip
    assert read[str(pages / "page05.png")] == [
        f"error: {pages / 'page05.png'}: not a decodable image (format not recognised)"
    ]
    (truncated,) = read[str(pages / "page07.png")]
    assert truncated.startswith(f"error: {pages / 'page07.png'}: not a decodable image (")
    for name, truth in (("page0.png", truths[0]), ("page1.jpg", truths[1])):
        texts = read[str(pages / name)]
        assert sum(t == s for t, s in zip(texts, truth, strict=True)) >= len(truth) - 2
    assert out.splitlines()[-1].startswith("4 images (2 unreadable) in ")
    images = json.loads(doc.read_text())["images"]
    assert [("error" in image, len(image.get("lines", ()))) for image in images] == [
        (False, len(truths[0])), (True, 0), (True, 0), (False, len(truths[1]))
    ]  # fmt: skip
    assert images[1]["error"].endswith("(format not recognised)")
    assert images[2]["error"] == truncated[len("error: ") :]


def test_one_unreadable_image_is_its_error_row_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "junk.png").write_bytes(b"not an image")
    assert app.main(["-i", str(tmp_path / "junk.png")]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == [f"image: {tmp_path / 'junk.png'}",
                       f"error: {tmp_path / 'junk.png'}: not a decodable image (format not "
                       "recognised)"]  # fmt: skip
    assert out[2].startswith("1 images (1 unreadable) in ")


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_finishes_the_pages_taken_and_writes_them(
    sig: signal.Signals, code: int, tmp_path: Path
) -> None:
    """A child reading a folder of 40 pages, signalled once it printed its first page: the
    pages taken are finished, printed and written to --json, the closing line follows, one
    ``stopped by`` line on stderr, no traceback, exit 130 / 143."""
    pages = tmp_path / "pages"
    pages.mkdir()
    page = draw_page(7, size=(400, 300), lines=3)
    Image.fromarray(page.image).save(pages / "p00.png")
    for number in range(1, 40):
        (pages / f"p{number:02d}.png").write_bytes((pages / "p00.png").read_bytes())
    doc = tmp_path / "lines.json"
    # unbuffered: readline() takes no more than the line, communicate() reads the rest
    child = subprocess.Popen(
        [sys.executable, "-m", "copyless.apps.ocr", "-i", str(pages), "--json", str(doc)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0,
    )  # fmt: skip
    assert child.stdout is not None
    first = child.stdout.readline()  # "image: ..." once the first page is done
    assert first.startswith(b"image: "), first
    child.send_signal(sig)
    rest, raw_err = child.communicate(timeout=120)
    out, err = (first + rest).decode(), raw_err.decode()
    assert child.returncode == code, (out, err)
    assert "Traceback" not in err
    assert err.strip() == f"copyless-ocr: stopped by {sig.name}", err
    read = _parse(out)
    assert 1 <= len(read) < 40
    assert all(texts == list(page.lines) for texts in read.values()), read
    assert out.splitlines()[-1].startswith(f"{len(read)} images in ")
    images = json.loads(doc.read_text())["images"]
    assert [image["image"] for image in images] == list(read)


def test_recogniser_without_its_character_list_is_one_clear_line(tmp_path: Path) -> None:
    """A rapidocr whose recogniser lost its character list (a broken wheel): one line, exit 2."""
    import onnx

    generation = installed_generations()[0]
    from copyless.model.zoo import _ppocr

    gen = _ppocr.GENERATIONS[generation]
    from copyless.model.zoo._sources import package_file

    fake = tmp_path / "site" / gen.package
    (fake / "models").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    for role in ("det", "cls"):
        os.symlink(package_file(gen.package, gen.file(role)), fake / gen.file(role))
    rec = onnx.load(str(package_file(gen.package, gen.rec)))
    del rec.metadata_props[:]
    onnx.save(rec, str(fake / gen.rec))
    page = tmp_path / "page.png"
    Image.fromarray(draw_page(0, size=(300, 200), lines=2).image).save(page)
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site"),
           "COPYLESS_CACHE_DIR": str(tmp_path / "cache")}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "copyless.apps.ocr", "-i", str(page), "--models", generation],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().count("\n") == 0
    assert "has no character list" in done.stderr and gen.package in done.stderr


@pytest.mark.parametrize(
    ("argv", "engine", "options"),
    [
        ([], RunnerType.ONNXRUNTIME, {}),  # as RapidOCR: vaiml measured every page size
        (["--runner", "vaiml"], RunnerType.VAIML, {}),
        (["--precision", "bf16"], RunnerType.OPENVINO, {"inference_precision": "bf16"}),
        (["--precision", "bf16", "--runner", "openvino"], RunnerType.OPENVINO,
         {"inference_precision": "bf16"}),
    ],
)  # fmt: skip
def test_engine_follows_runner_and_precision(
    argv: list[str], engine: RunnerType, options: dict[str, str]
) -> None:
    args = app._parser().parse_args(["-i", "x.png", *argv])
    assert app._engine(args) == (engine, options)


def test_bf16_on_onnxruntime_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    Image.new("RGB", (300, 200), (240, 240, 230)).save(tmp_path / "blank.png")
    argv = ["-i", str(tmp_path / "blank.png"), "--precision", "bf16", "--runner", "onnxruntime"]
    assert app.main(argv) == 2
    assert capsys.readouterr().err.strip() == (
        "error: --precision bf16 runs on OpenVINO: leave out --runner onnxruntime"
    )
