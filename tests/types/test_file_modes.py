"""Files copyless writes through a temporary file get the mode the umask gives (mkstemp's
0600 would keep a compiled model or a Parquet output from another user or a Ray worker)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o002, 0o077])
def test_written_files_follow_the_umask(tmp_path: Path, mask: int) -> None:
    code = f"""
        import os, stat, sys
        sys.path.insert(0, {str(Path(__file__).parents[1])!r})
        os.umask({mask:#o})
        from model_helpers import conv_net
        import copyless as cl
        from copyless.types import umask
        from copyless.types import write_atomically
        from copyless.ray import ResultWriter
        assert umask() == {mask:#o}
        out = {str(tmp_path)!r}
        rai = cl.compile_model(conv_net(), os.path.join(out, "m.rai"))
        folder = cl.compile_model(conv_net(), os.path.join(out, "m-dir"))
        write_atomically(__import__("pathlib").Path(out, "cached.bin"), b"x")
        with ResultWriter(os.path.join(out, "r.parquet")) as writer:
            pass
        paths = [rai, folder / "vaiml_par_0" / "manifest.json",
                 folder / "vaiml_par_0" / "par_0.onnx", os.path.join(out, "cached.bin"),
                 os.path.join(out, "r.parquet")]
        print(" ".join(oct(stat.S_IMODE(os.stat(p).st_mode)) for p in paths))
    """
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    modes = done.stdout.split()
    assert modes == [oct(0o666 & ~mask)] * 5
