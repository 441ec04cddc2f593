"""OcrPipeline end to end on real PP-OCR models against RapidOCR's own pipeline on the same
models (rapidocr 3.x for v6, rapidocr_onnxruntime for v4), on drawn pages and skimage's page."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import skimage.data

from copyless.ocr import DrawnPage, OcrPipeline
from copyless.ocr._geometry import page_plan
from ocr_helpers import cer, peer_read, same_lines


def _gray_page() -> np.ndarray:
    return np.ascontiguousarray(np.repeat(skimage.data.page()[..., None], 3, axis=2))


def test_matches_the_peer_and_its_error_rate(ocr: OcrPipeline, pages: list[DrawnPage]) -> None:
    """Drawn pages: the peer's text on nearly every line, a CER no worse than the peer's;
    skimage's page: most lines the same (the peers misread some lines that copyless reads)."""
    same = union = 0
    ours_cer = peer_cer = 0.0
    for page in pages:
        result = ocr.read(page.image)
        theirs = peer_read(ocr.models.generation, page.image)
        s, u = same_lines([(line.box, line.text) for line in result.lines], theirs)
        same, union = same + s, union + u
        ours_cer += cer(list(page.lines), [line.text for line in result.lines])
        peer_cer += cer(list(page.lines), [p.text for p in theirs])
        assert len(result.lines) == len(page.lines)
    assert ours_cer <= peer_cer + 1e-9, (ours_cer, peer_cer)
    assert same / union >= (0.97 if ocr.models.generation == "v6" else 0.8), (same, union)
    gray = _gray_page()
    result = ocr.read(gray)
    # spaces aside: PP-OCRv4 drops some between words, on either side, depending on how wide
    # the line's batch is padded (copyless pads less than RapidOCR, and reads some it drops)
    theirs = [
        replace(p, text=p.text.replace(" ", "")) for p in peer_read(ocr.models.generation, gray)
    ]
    s, u = same_lines([(line.box, line.text.replace(" ", "")) for line in result.lines], theirs)
    assert s >= 4 and u <= 7
    # PP-OCRv4 drops spaces between words now and then (RapidOCR 1.4.4 too)
    assert "Region-basedsegmentation" in result.text.replace(" ", "")


def test_lines_come_in_reading_order_with_boxes_on_the_text(
    ocr: OcrPipeline, pages: list[DrawnPage]
) -> None:
    page = pages[0]
    result = ocr.read(page.image)
    tops = [line.box[1] for line in result.lines]
    assert tops == sorted(tops)
    for line, drawn in zip(result.lines, page.boxes, strict=True):
        x0, y0, x1, _y1 = line.box
        # the unclipped box holds the drawn glyphs' box, with a margin of at most ~half a line
        assert x0 <= drawn[0] + 4 and y0 <= drawn[1] + 4 and x1 >= drawn[2] - 4
        assert abs(x0 - drawn[0]) < 20 and abs(x1 - drawn[2]) < 20
        assert 0.5 <= line.score <= 1.0


def test_read_all_overlaps_pages_with_the_same_answers(
    ocr: OcrPipeline, pages: list[DrawnPage]
) -> None:
    one_by_one = [ocr.read(page.image).lines for page in pages]
    overlapped = [result.lines for result in ocr.read_all(page.image for page in pages)]
    assert overlapped == one_by_one
    assert all(len(lines) >= 10 for lines in overlapped)


def test_pages_without_text_and_tiny_pages_give_no_lines(ocr: OcrPipeline) -> None:
    blank = np.full((600, 400, 3), 236, dtype=np.uint8)
    assert ocr.read(blank).lines == ()
    assert ocr.read(np.zeros((1, 1, 3), dtype=np.uint8)).lines == ()
    assert ocr.read(np.full((7, 300, 3), 255, dtype=np.uint8)).lines == ()


def test_huge_page_is_read_through_the_size_policy(
    ocr: OcrPipeline, pages: list[DrawnPage]
) -> None:
    """A 3x upscaled page (2100 x 2970) is detected at <= 2000 px a side and read."""
    page = pages[1]
    big = np.repeat(np.repeat(page.image, 3, axis=0), 3, axis=1)
    result = ocr.read(big)
    plan = page_plan(*big.shape[:2])
    assert max(plan.size) <= 2016 and plan.size in ocr._det
    assert len(result.lines) == len(page.lines)
    assert cer(list(page.lines), [line.text for line in result.lines]) <= 0.03
    assert result.lines[0].box[2] > 3 * page.boxes[0][2] - 60


def test_alpha_input_is_read_like_rgb(ocr: OcrPipeline, pages: list[DrawnPage]) -> None:
    page = pages[2]
    rgbx = np.concatenate([page.image, np.full((*page.image.shape[:2], 1), 255, np.uint8)], 2)
    assert ocr.read(rgbx).lines == ocr.read(page.image).lines


@pytest.mark.parametrize("generation", ["v6"])
def test_upside_down_page_needs_the_angle_classifier(
    generation: str, pages: list[DrawnPage]
) -> None:
    page = pages[0]
    flipped = np.ascontiguousarray(page.image[::-1, ::-1])
    with OcrPipeline(generation, angle=True) as turned:
        texts = [line.text for line in turned.read(flipped).lines]
    assert texts == list(page.lines)  # the upright page's reading order (issue 40)
    with OcrPipeline(generation, angle=False) as plain:
        plain_texts = [line.text for line in plain.read(flipped).lines]
    assert sum(t in page.lines for t in plain_texts) < len(page.lines) // 2


def test_openvino_engine_gives_the_same_text(pages: list[DrawnPage]) -> None:
    import copyless as cl

    page = pages[0]
    with OcrPipeline(runner_type=cl.RunnerType.OPENVINO) as ov, OcrPipeline() as ort:
        ours = [line.text for line in ov.read(page.image).lines]
        assert ours == [line.text for line in ort.read(page.image).lines]
    assert cer(list(page.lines), ours) <= 0.02


def test_closed_pipeline_refuses_to_read(pages: list[DrawnPage]) -> None:
    from copyless.ocr import OcrError

    pipeline = OcrPipeline()
    pipeline.close()
    with pytest.raises(OcrError, match="closed"):
        pipeline.read(pages[0].image)


def test_batch_reader_gives_one_row_per_line_and_errors_as_rows(
    tmp_path, pages: list[DrawnPage]
) -> None:
    """OcrBatchReader (copyless-batch --task ocr's actor) without a cluster, and the Parquet
    table copyless-batch writes from its batches (the ray layer's, given the lines' schema)."""
    from PIL import Image

    pytest.importorskip("ray")  # the table: the ray extra's writers
    from copyless.ocr import LINE_COLUMNS, OcrBatchReader, line_schema
    from copyless.ray import result_table

    good = tmp_path / "page.png"
    Image.fromarray(pages[0].image).save(good)
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"no image")
    blank = tmp_path / "blank.png"
    Image.new("RGB", (200, 100), "white").save(blank)
    reader = OcrBatchReader()
    try:
        rows = reader({"path": np.array([str(good), str(bad), str(blank)], dtype=object)})
    finally:
        reader.close()
    assert set(rows) == set(LINE_COLUMNS)
    n = len(pages[0].lines)
    assert rows["path"].tolist() == [str(good)] * n + [str(bad)]
    assert rows["line"].tolist() == [*range(n), -1]
    assert rows["error"][-1].startswith(f"{bad}: not a decodable image")
    table = result_table(rows, schema=line_schema())
    assert table.num_rows == n + 1 and table.column("error").null_count == n
    assert table.column("text").to_pylist()[:n] == [r for r in rows["text"][:n]]


def test_map_fails_only_the_unreadable_pages(ocr: OcrPipeline, pages: list[DrawnPage],
                                             tmp_path) -> None:  # fmt: skip
    """One Result per image, in order: a file that is no image (its header fails), a
    truncated PNG (its pixels fail in the detector's prepare) and a bad array are error
    results; the pages around them read as they read alone, with their stage times."""
    from PIL import Image

    good = tmp_path / "page.png"
    Image.fromarray(pages[0].image).save(good)
    (tmp_path / "bad.png").write_bytes(b"no image")
    (tmp_path / "cut.png").write_bytes(good.read_bytes()[:300])
    images = [str(good), str(tmp_path / "bad.png"), pages[1].image, str(tmp_path / "cut.png"),
              np.zeros((5, 5, 7), np.uint8), pages[2].image]  # fmt: skip
    results = list(ocr.map(images))  # a greyscale (5, 5) array is an image: 7 channels are not
    assert [(r.index, r.ok) for r in results] == [
        (0, True), (1, False), (2, True), (3, False), (4, False), (5, True)
    ]  # fmt: skip
    assert "bad.png: not a decodable image" in str(results[1].error)
    assert "cut.png: not a decodable image" in str(results[3].error)
    assert isinstance(results[4].error, ValueError)
    for result, page in zip([results[0], results[2], results[5]], pages, strict=True):
        assert result.value.lines == ocr.read(page.image).lines
    times = results[0].value.times
    assert min(times.decode, times.detect, times.crops, times.recognise) > 0
    assert times.total >= times.detect + times.recognise
    with pytest.raises(ValueError, match=r"bad\.png: not a decodable image"):
        ocr.read(str(tmp_path / "bad.png"))


def test_stop_ends_map_after_the_pages_taken(pages: list[DrawnPage]) -> None:
    """stop() (what SIGINT calls in copyless-ocr): no page is taken after it, and every page
    taken comes out; an endless source is fine."""
    taken: list[int] = []

    def endless():
        while True:
            taken.append(len(taken))
            yield pages[len(taken) % len(pages)].image

    with OcrPipeline() as pipeline:
        results = []
        for result in pipeline.map(endless()):
            results.append(result)
            pipeline.stop()
        assert [r.index for r in results] == taken and len(taken) <= 8
        assert all(r.ok and len(r.value.lines) >= 10 for r in results)
        assert list(pipeline.map([pages[0].image])) == []  # stopped for good
