"""When the primary wrote a WAL position, from its own samples of pg_current_wal_lsn().

pg_stat_replication's write/flush/replay_lag are measured when a standby's reply
arrives: a standby that stops answering (paused, hung, its host or link gone) leaves them
at their last value however long it stays silent. How far behind a standby is in time
can instead be read on the primary alone: the age of the oldest WAL it has not
confirmed, that is when the primary wrote the position just past the one it confirmed.
The probe samples the primary's WAL position every interval; between two samples the
position is taken to have advanced evenly. The primary's clock only, so no skew with a
standby's clock enters.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque

# An hour of samples at 1 s: a standby further behind than that reads as "at least" the
# oldest sample's age, which says enough.
KEPT_SAMPLES = 3600


class WalClock:
    """(time, WAL position) of one server's samples, oldest first."""

    def __init__(self, kept: int = KEPT_SAMPLES) -> None:
        self._times: deque[float] = deque(maxlen=kept)
        self._lsns: deque[float] = deque(maxlen=kept)

    def add(self, time_s: float, lsn: float) -> None:
        if self._lsns and lsn < self._lsns[-1]:  # a restarted or other server: start anew
            self._times.clear()
            self._lsns.clear()
        self._times.append(time_s)
        self._lsns.append(lsn)

    def written_at(self, lsn: float) -> float | None:
        """When the primary wrote the first byte after `lsn`: None when it had not yet,
        the oldest sample's time when that is older than every sample kept."""
        if not self._lsns or lsn >= self._lsns[-1]:
            return None
        lsns = list(self._lsns)
        after = bisect_right(lsns, lsn)  # the first sample beyond lsn
        if after == 0:
            return self._times[0]
        t0, t1 = self._times[after - 1], self._times[after]
        l0, l1 = lsns[after - 1], lsns[after]
        return t0 + (t1 - t0) * (lsn - l0) / (l1 - l0)

    def behind_s(self, now_s: float, confirmed_lsn: float) -> float:
        """Seconds since the primary wrote WAL past what a standby confirmed; 0 when it
        confirmed everything written."""
        written = self.written_at(confirmed_lsn)
        return 0.0 if written is None else max(0.0, now_s - written)
