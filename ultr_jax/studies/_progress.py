"""Progress lines of a study's long loops: what finished, how much of the whole is done, the time so far and an
estimate of the time left (the elapsed time per unit of work done, times the units left)."""

import dataclasses
import time
from typing import Optional

from absl import logging

__all__ = ["Progress"]


@dataclasses.dataclass
class Progress:
  """Counts a study's finished cells and logs one line per cell: ``[tag] 3/12 what: 41s, ~123s left``.

  Attributes:
    tag: the study's name in the line (``"cld"``).
    total: the work of the whole run, in the units of :meth:`done`'s ``weight`` (cells, or sessions where a cell's
      cost grows with its log).
    start: ``time.perf_counter()`` at the start (default: now).
    finished: the work done so far.

  >>> p = Progress("demo", total=4, start=0.0)
  >>> p.line("pbm", now=10.0)
  '[demo] 1/4 pbm: 10s, ~30s left'
  >>> p.line("ubm", weight=3, now=20.0)
  '[demo] 4/4 ubm: 20s, done'
  """

  tag: str
  total: float
  start: float = dataclasses.field(default_factory=time.perf_counter)
  finished: float = 0.0

  def line(self, what: str, *, weight: float = 1.0, now: Optional[float] = None) -> str:
    """Counts one finished cell of ``weight`` units and returns its line (without logging it).

    Args:
      what: the cell and its result (``"dbn: ndcg@10 0.712"``).
      weight: the cell's work, in the units of :attr:`total`.
      now: the time (default ``time.perf_counter()``).

    Returns:
      ``"[tag] <finished>/<total> <what>: <elapsed>s, ~<left>s left"`` (``done`` at the end).
    """
    self.finished += float(weight)
    elapsed = (time.perf_counter() if now is None else now) - self.start
    left = max(self.total - self.finished, 0.0)
    eta = f"~{elapsed / self.finished * left:.0f}s left" if left > 0 and self.finished > 0 else "done"
    return f"[{self.tag}] {self.finished:g}/{self.total:g} {what}: {elapsed:.0f}s, {eta}"

  def done(self, what: str, *, weight: float = 1.0) -> None:
    """Counts one finished cell (see :meth:`line`) and logs its line (absl, INFO)."""
    logging.info(self.line(what, weight=weight))
