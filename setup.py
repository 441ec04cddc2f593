"""Builds copyless's C extensions (fused layout/dtype conversion, image preprocessing, the
runner's replay path, SIGBUS-safe reads of a mapped model file).

Everything else is in pyproject.toml. The extensions are plain C11 (``-std=c11``: thread-local
storage) compiled with -O3: no toolchain beyond the C compiler that pip already needs for
sdists.
"""

from pathlib import Path

from setuptools import Extension, setup

HERE = Path(__file__).parent
FLAGS = ["-O3", "-std=c11", "-fno-strict-aliasing", "-Wall", "-Wno-unused-function"]

KERNELS = [
    ("copyless.layout._kernels", "src/copyless/layout/_kernels.c"),
    ("copyless.vision._kernels", "src/copyless/vision/_kernels.c"),
    ("copyless.vision._text", "src/copyless/vision/_text.c"),
    ("copyless.runner._fast", "src/copyless/runner/_fast.c"),
    ("copyless.model._mapped", "src/copyless/model/_mapped.c"),
]

setup(
    ext_modules=[
        Extension(name, [src], extra_compile_args=FLAGS)
        for name, src in KERNELS
        if (HERE / src).exists()
    ]
)
