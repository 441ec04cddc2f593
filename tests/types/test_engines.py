"""openvino_unloadable: under AddressSanitizer nothing asks OpenVINO anything (its TBB aborts
an ASan process), so the compiler's BF16 probe and the runner's engine choice answer without it."""

from __future__ import annotations

import pytest

from copyless.types import (
    UnsupportedError,
    bf16_available,
    bf16_refusal,
    cpu_capabilities,
    openvino_unloadable,
)


def test_loadable_without_a_sanitizer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LD_PRELOAD", "")
    assert openvino_unloadable() is None


def test_asan_preloaded_keeps_openvino_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LD_PRELOAD", "/usr/lib/gcc/x86_64-linux-gnu/12/libasan.so libstdc++.so")
    reason = openvino_unloadable()
    assert reason is not None and "AddressSanitizer" in reason
    # the BF16 probe says no instead of creating an OpenVINO Core (which would abort here)
    assert bf16_available() is False
    with pytest.raises(UnsupportedError, match="AddressSanitizer"):
        cpu_capabilities()


def test_bf16_refused_in_one_line_naming_the_cpu_and_what_it_lacks() -> None:
    assert bf16_refusal(("FP32", "BF16", "INT8")) is None
    refusal = bf16_refusal(("FP32", "INT8", "BIN"))
    assert refusal is not None and "\n" not in refusal
    assert "OPTIMIZATION_CAPABILITIES: FP32, INT8, BIN" in refusal and "AVX512_BF16" in refusal


def test_capabilities_asked_of_a_given_core() -> None:
    class Core:
        def get_property(self, device: str, name: str) -> list[str]:
            assert (device, name) == ("CPU", "OPTIMIZATION_CAPABILITIES")
            return ["FP32", "BF16"]

    assert cpu_capabilities(Core()) == ("FP32", "BF16")
