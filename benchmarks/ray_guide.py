"""The plain Ray Data batch-inference pipeline, as Ray's batch-inference guide writes it.

What a Ray user writes without copyless (the guide's image-classification example, with
onnxruntime in the actors): a dataset of file paths, a ``map_batches`` function that opens
each image with PIL and resizes (short side 256), centre-crops (224) and normalises it into
a float32 NCHW batch, an actor pool of ``InferenceSession``s, predictions written to
Parquet. The benchmark (``benchmarks/ray_batch.py``) runs it as a whole process beside
``copyless-batch`` on the same images, model and number of actors.

Ray is started as copyless-batch starts its local one (same logical CPUs, object store and
quiet settings), so the two differ only in the pipeline.

``--tuned``: what a careful user adds for many actors on few cores: each actor's session
takes its share of the cores (``intra_op_num_threads`` = cores // actors, one inter-op
thread, no spinning: the decode tasks need the cores a spinning pool holds), and PIL's
``draft`` decodes a JPEG at the smallest DCT scale still at least the resize's size (what
copyless's libjpeg-turbo decode does; a phone photo decodes 4-8x faster; the pixels differ
slightly from the full decode's).

Run: ``python benchmarks/ray_guide.py DIR -o OUT_DIR --model lite0.onnx [--actors N]
[--batch-size B] [--tuned]``; prints ``N images in S s, R images/s`` (time after Ray is up).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import ray
from PIL import Image

# EfficientNet-Lite0's normalisation (pixel units), as copyless folds it into its graph.
MEAN, STD = np.float32(127.0), np.float32(128.0)


def preprocess(batch: dict[str, np.ndarray], draft: bool = False) -> dict[str, np.ndarray]:
    """PIL decode (``draft``: at the JPEG's smallest DCT scale still covering the resize),
    Resize(256), CenterCrop(224), normalise, HWC -> CHW float32."""
    images = []
    for path in batch["path"]:
        with Image.open(path) as image:
            if draft:
                scale = 256 / min(image.size)
                image.draft("RGB", (round(image.width * scale), round(image.height * scale)))
            rgb = image.convert("RGB")
        width, height = rgb.size
        scale = 256 / min(width, height)
        rgb = rgb.resize((round(width * scale), round(height * scale)), Image.BILINEAR)
        left, top = (rgb.width - 224) // 2, (rgb.height - 224) // 2
        rgb = rgb.crop((left, top, left + 224, top + 224))
        pixels = (np.asarray(rgb, np.float32) - MEAN) / STD
        images.append(pixels.transpose(2, 0, 1))
    return {"path": batch["path"], "image": np.stack(images)}


class Classifier:
    """One onnxruntime session per actor; top-5 of the softmax."""

    def __init__(self, model_path: str, threads: int = 0) -> None:
        settings = ort.SessionOptions()
        if threads:  # --tuned: this actor's share of the cores, no spinning
            settings.intra_op_num_threads = threads
            settings.inter_op_num_threads = 1
            settings.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(
            model_path, settings, providers=["CPUExecutionProvider"]
        )
        self.input = self.session.get_inputs()[0].name

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        logits = self.session.run(None, {self.input: batch["image"]})[0]
        probs = np.exp(logits - logits.max(axis=1, keepdims=True))
        probs /= probs.sum(axis=1, keepdims=True)
        top = np.argsort(-probs, axis=1)[:, :5]
        scores = np.take_along_axis(probs, top, axis=1)
        return {
            "path": batch["path"],
            "class_id": top[:, 0],
            "score": scores[:, 0],
            "top_class_ids": top,
            "top_scores": scores,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("folder")
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--model", required=True, help="float32 ONNX, input [N,3,224,224]")
    parser.add_argument("--actors", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--tuned", action="store_true", help="sessions sharing the cores "
                        "(no spinning) and PIL's JPEG draft mode (see the docstring)")
    args = parser.parse_args()
    paths = sorted(str(p) for p in Path(args.folder).iterdir() if p.suffix == ".jpg")
    cores = len(os.sched_getaffinity(0))
    ray.init(
        num_cpus=max(cores, args.actors + 1),
        object_store_memory=1 << 30,
        include_dashboard=False,
        log_to_driver=False,
    )
    start = time.perf_counter()
    ds = ray.data.from_items([{"path": p} for p in paths])
    threads = max(1, cores // args.actors) if args.tuned else 0
    ds = ds.map_batches(preprocess, batch_size=args.batch_size,
                        fn_kwargs={"draft": args.tuned})  # fmt: skip
    ds = ds.map_batches(
        Classifier,
        fn_constructor_kwargs={"model_path": args.model, "threads": threads},
        compute=ray.data.ActorPoolStrategy(size=args.actors),
        batch_size=args.batch_size,
    )
    ds.write_parquet(args.output)
    seconds = time.perf_counter() - start
    ray.shutdown()
    print(f"{len(paths)} images in {seconds:.2f} s, {len(paths) / seconds:.1f} images/s")


if __name__ == "__main__":
    main()
