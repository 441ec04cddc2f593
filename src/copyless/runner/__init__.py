"""Runner layer: RunnerFactory, Runner, options, async jobs."""

from ._device_api import DeviceBuffers, DeviceSession
from ._factory import RunnerFactory
from ._options import KNOWN_OPTIONS, RunnerOptions, parse_options
from ._plan import batch_axis, frame_shape
from ._runner import Runner

__all__ = [
    "KNOWN_OPTIONS",
    "DeviceBuffers",
    "DeviceSession",
    "Runner",
    "RunnerFactory",
    "RunnerOptions",
    "batch_axis",
    "frame_shape",
    "parse_options",
]
