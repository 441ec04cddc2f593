"""Runner layer: RunnerFactory, Runner, options, async jobs."""

from .device_api import DeviceBuffers, DeviceSession
from .factory import RunnerFactory
from .options import KNOWN_OPTIONS, RunnerOptions, parse_options
from .runner import Runner

__all__ = [
    "KNOWN_OPTIONS",
    "DeviceBuffers",
    "DeviceSession",
    "Runner",
    "RunnerFactory",
    "RunnerOptions",
    "parse_options",
]
