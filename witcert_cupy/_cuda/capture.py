"""Work forked off a stream capture in progress (telemetry's own stream), rejoined before the
capture ends: a capture cannot end with work forked off its origin stream.  The epoch counts ended
captures, so that an event recorded under one capture is never waited on in another."""

from __future__ import annotations

_CAPTURE_FORKS: set = set()
_EPOCH = [0]


def fork_into_capture(joinable):
    """Note ``joinable`` (anything with ``join(stream)``) as forked during the capture in progress."""
    _CAPTURE_FORKS.add(joinable)


def capture_epoch() -> int:
    return _EPOCH[0]


def join_forks(stream=None):
    """Rejoin, into ``stream`` (default: the current one), the streams forked during the capture in
    progress.  Call it last before ``end_capture`` (:class:`~witcert_cupy.CapturedStep` does)."""
    for t in list(_CAPTURE_FORKS):
        t.join(stream)
    _CAPTURE_FORKS.clear()
    _EPOCH[0] += 1
