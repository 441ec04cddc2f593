"""Bytecode before timing: the whole-process benchmarks (video, ray_batch) compile the
copyless sources first, as an installed package has them (pip compiles a wheel's modules):
an editable checkout under PYTHONDONTWRITEBYTECODE=1 recompiles ~140 modules in every
process, 0.15-0.4 s of start-up the peers, installed, do not pay."""

from __future__ import annotations


def compile_trees(*trees: str) -> None:
    """Compile every module below each of ``trees`` (quietly; existing .pyc kept)."""
    import compileall

    for tree in trees:
        compileall.compile_dir(tree, quiet=1)
