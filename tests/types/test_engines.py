"""openvino_unloadable: under AddressSanitizer nothing asks OpenVINO anything (its TBB aborts
an ASan process), so the compiler's BF16 probe and the runner's engine choice answer without it."""

from __future__ import annotations

import pytest

from copyless.model import _bf16 as bf16
from copyless.types import UnsupportedError, openvino_unloadable


def test_loadable_without_a_sanitizer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LD_PRELOAD", "")
    assert openvino_unloadable() is None


def test_asan_preloaded_keeps_openvino_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LD_PRELOAD", "/usr/lib/gcc/x86_64-linux-gnu/12/libasan.so libstdc++.so")
    reason = openvino_unloadable()
    assert reason is not None and "AddressSanitizer" in reason
    # the BF16 probe says no instead of creating an OpenVINO Core (which would abort here)
    assert bf16.bf16_available() is False
    with pytest.raises(UnsupportedError, match="AddressSanitizer"):
        bf16.cpu_capabilities()
