"""Figures of the studies: learning curves and atomic PNG writing (matplotlib, imported on first use)."""

import os
import tempfile
from typing import Any, Mapping, Sequence

import numpy as np

from ultr_jax.train.results import default_file_mode

__all__ = ["plot_learning_curves", "save_figure"]


def plot_learning_curves(
  histories: Mapping[str, Sequence[Mapping[str, Any]]],
  path: str,
  *,
  metrics: Sequence[str] = ("train/loss", "valid/ndcg@10"),
  relative: Sequence[str] = (),
) -> str:
  """Learning curves of several runs as one PNG: a panel per metric against the training step.

  Each run is drawn as its mean over seeds with the seeds' min-max band. ``histories`` maps a run's name
  to its :attr:`FitResult.history <ultr_jax.train.FitResult>` (records with ``"step"`` and per-seed
  lists under the metric names). A metric no run recorded gets no panel. A metric in ``relative`` is
  drawn as each seed's change since its first evaluation, relative to that first value,
  :math:`(v_t - v_{t_0}) / |v_{t_0}|`: methods whose losses differ in scale (a listwise softmax near 2,
  a two-tower's summed BCE near 30) share one axis, and a flat line at 0 is a converged loss. Written
  atomically (:func:`save_figure`); returns ``path``.

  >>> import tempfile
  >>> runs = {"naive": [{"step": 10, "train/loss": [2.0, 2.2], "valid/ndcg@10": [0.6, 0.7]},
  ...                   {"step": 20, "train/loss": [1.5, 1.7], "valid/ndcg@10": [0.7, 0.8]}]}
  >>> path = plot_learning_curves(runs, os.path.join(tempfile.mkdtemp(), "curves.png"))
  >>> os.path.getsize(path) > 0
  True
  """
  import matplotlib  # noqa: PLC0415

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # noqa: PLC0415

  shown = [m for m in metrics if any(m in r for h in histories.values() for r in h)]
  fig, axes = plt.subplots(1, max(len(shown), 1), figsize=(5 * max(len(shown), 1) + 2, 3.5), squeeze=False)
  # One colour per run: tab10 for up to 10 runs, tab20 beyond (a report's row has about 20 methods).
  cmap = plt.get_cmap("tab10" if len(histories) <= 10 else "tab20")
  colours = {name: cmap(i % cmap.N) for i, name in enumerate(histories)}
  for ax, metric in zip(axes[0], shown):
    for name, history in histories.items():
      records = [r for r in history if metric in r]
      if not records:
        continue
      steps = np.array([r["step"] for r in records])
      values = np.array([np.ravel(np.asarray(r[metric], np.float64)) for r in records])  # [evals, seeds]
      if metric in relative:
        with np.errstate(divide="ignore", invalid="ignore"):
          values = (values - values[0]) / np.abs(values[0])
      ax.plot(steps, values.mean(-1), marker="o", ms=3, color=colours[name], label=name)
      if values.shape[-1] > 1:
        ax.fill_between(steps, values.min(-1), values.max(-1), color=colours[name], alpha=0.15, lw=0)
    ax.set_xlabel("training step")
    ax.set_title(
      f"{metric}: relative change since the first evaluation" if metric in relative else metric,
      fontsize=10 if metric in relative else None,
    )
  fig.suptitle("mean over seeds; band: the seeds' range", fontsize=9)
  right = 1 - 2 / fig.get_figwidth()  # the legend takes the right 2 inches
  fig.tight_layout(rect=(0, 0, right, 1))
  if shown:
    handles, labels = axes[0][0].get_legend_handles_labels()
    for ax in axes[0][1:]:  # runs that only another panel shows
      for h, l in zip(*ax.get_legend_handles_labels()):
        if l not in labels:
          handles.append(h)
          labels.append(l)
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(right, 0.5), fontsize=7, frameon=False)
  return save_figure(fig, path)


def save_figure(fig: Any, path: str, **savefig_kwargs: Any) -> str:
  """Saves a matplotlib figure as PNG to ``path`` atomically, then closes it; returns ``path``.

  The image goes to a temp file in the same directory first (``os.replace`` then), so an
  interrupted run never leaves a truncated figure. ``savefig_kwargs`` go to ``fig.savefig``
  (default ``dpi=110``).

  >>> import matplotlib; matplotlib.use("Agg"); import matplotlib.pyplot as plt
  >>> import tempfile, os
  >>> fig, ax = plt.subplots(); _ = ax.plot([0, 1])
  >>> path = save_figure(fig, os.path.join(tempfile.mkdtemp(), "fig.png"))
  >>> os.path.getsize(path) > 0
  True
  """
  import matplotlib.pyplot as plt

  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".png")
  os.close(fd)
  try:
    fig.savefig(tmp, **{"dpi": 110, "format": "png", **savefig_kwargs})
    os.chmod(tmp, default_file_mode())  # mkstemp's 0600 -> what open() would give
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
    raise
  finally:
    plt.close(fig)
  return path
