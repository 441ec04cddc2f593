"""Builds copyless's C kernels (fused layout/dtype conversion, image preprocessing).

Everything else is in pyproject.toml. The kernels are plain C99 compiled with -O3: no
toolchain beyond the C compiler that pip already needs for sdists.
"""

from pathlib import Path

from setuptools import Extension, setup

HERE = Path(__file__).parent
FLAGS = ["-O3", "-std=c11", "-fno-strict-aliasing", "-Wall", "-Wno-unused-function"]

KERNELS = [
    ("copyless.layout._kernels", "src/copyless/layout/_kernels.c"),
    ("copyless.vision._kernels", "src/copyless/vision/_kernels.c"),
    ("copyless.runner._fast", "src/copyless/runner/_fast.c"),
]

setup(
    ext_modules=[
        Extension(name, [src], extra_compile_args=FLAGS)
        for name, src in KERNELS
        if (HERE / src).exists()
    ]
)
