"""Clocks for the step timer: marks taken in the order work is queued, read
only once the device has reached them.

- ``HostClock`` (the CPU): a forward pass there runs before the call
  returns, so the host's clock is the device's and every mark is ready.
- ``CudaEventClock``: a mark is a CUDA event recorded on the current stream.
  Recording one queues it; asking whether the device has reached it
  (``Event.query``) and the time between two reached marks
  (``Event.elapsed_time``) never wait for the device, so the timer reads a
  step's marks a step or two later, when the step's own reads of the device
  (vLLM's book-keeping, the plugin's one read) have passed them.

Neither calls ``torch.cuda.synchronize``: a timer that waited for the
device would stall the host on every timed step (``docs/cuda.md``, "No
device-wide synchronization").
"""

from __future__ import annotations

import time
from typing import Any, Protocol

import torch


class DeviceClock(Protocol):
    def mark(self) -> Any:
        """A mark at the point the work queued so far ends."""

    def ready(self, mark: Any) -> bool:
        """Whether the device has reached ``mark`` (never waits)."""

    def seconds(self, start: Any, end: Any) -> float:
        """Seconds between two marks the device has reached."""


class HostClock:
    """The host's monotonic clock: on the CPU, the device's."""

    def mark(self) -> float:
        return time.perf_counter()

    def ready(self, mark: float) -> bool:
        return True

    def seconds(self, start: float, end: float) -> float:
        return end - start


class CudaEventClock:
    """CUDA events on the current stream of ``device``."""

    def __init__(self, device: torch.device):
        self.device = device

    def mark(self) -> torch.cuda.Event:
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(self.device))
        return event

    def ready(self, mark: torch.cuda.Event) -> bool:
        return mark.query()

    def seconds(self, start: torch.cuda.Event, end: torch.cuda.Event) -> float:
        return start.elapsed_time(end) / 1e3


def clock_for(device: torch.device) -> DeviceClock:
    return CudaEventClock(device) if device.type == "cuda" else HostClock()
