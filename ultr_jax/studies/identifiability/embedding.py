r"""Embedding models of the identifiability study, fitted full-batch.

Chen et al., "Identifiability Matters" (ICML 2024), Section 5.1 / C.3: the
relevance :math:`r'(x)` is a free parameter per item and the observation
:math:`o'(t)` a free parameter per bias factor, fitted to aggregated
click-through rates :math:`c_i` of records :math:`(x_i, t_i)` with
:math:`c_i \approx r'(x_i)\,o'(t_i)`. Three algorithms, as in the authors'
code:

* :func:`fit_dla`: alternating least squares ("DLA"),
* :func:`fit_regression_em`: Regression-EM (Wang et al., 2018),
* :func:`fit_two_tower`: sigmoid towers, Adam on the mean BCE.

Records are flat arrays ``[n]`` (item id, factor id, CTR, bool ``where``).
Every update is a per-item or per-factor sum over records; with concrete ids
they are row sums of a dense layout built once on the host
(:func:`record_layout`), with traced ids ``segment_sum``\ s. An item with a
single record (three quarters of the paper's K = 2 records) has an update
that depends on its factor's :math:`o'` alone, so DLA ("mean_ratio") and
Regression-EM ("repo") sum those records' :math:`o'` terms per factor in
closed form (sorted CTRs, prefix sums of moments, a series whose error is
below float64 rounding, else the records are summed). Epochs run in
``lax.scan`` (:func:`_iterate` stops exactly once the state is periodic), the
functions are pure (``jax.vmap`` over keys gives independent runs) and
:func:`fit_runs` fits ``R`` runs in one call. Use float64 (``with
jax.enable_x64(True)``): click MSE goes below :math:`10^{-8}` and the updates
divide by small numbers.
"""

import functools
from typing import NamedTuple, Optional, cast

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ultr_jax.types import Array, PRNGKey

__all__ = [
  "CPU_COMPILER_OPTIONS",
  "backend_jit",
  "compiler_options",
  "fit_dla",
  "fit_regression_em",
  "fit_two_tower",
  "fit_no_debias",
  "FIT_FUNCTIONS",
  "RecordLayout",
  "record_layout",
  "pad_layouts",
  "fit_runs",
]

_EPS = 1e-8
# Largest ratio q of the series in the Regression-EM single-record sums.
_SERIES_TOL = 3e-5
# Epochs per block of the exact early stop (see :func:`_iterate`).
_CHUNK = 64


def _seg_sum(v, ids, n):
  return jax.ops.segment_sum(v, ids, num_segments=n)


def _prep(items, factors, ctr, where):
  where = jnp.asarray(where, bool)
  items = jnp.where(where, items, 0).astype(jnp.int32)
  factors = jnp.where(where, factors, 0).astype(jnp.int32)
  ctr = jnp.where(where, ctr, 0.0)
  w = where.astype(ctr.dtype)
  return items, factors, ctr, w


class RecordLayout(NamedTuple):
  r"""Records laid out for dense per-item and per-factor sums (host-built).

  Every epoch needs per-item sums (the :math:`r'` update) and per-factor sums
  (the :math:`o'` update) over the records. ``segment_sum`` scatters are slow
  on XLA CPU, so the records are laid out as dense padded matrices whose row
  sums are those segment sums:

  * ``single``: records of items with exactly one record, a grid
    ``[rows, width]`` sorted by factor. Their item sum is the record itself,
    so both updates are elementwise on the grid plus row sums: no gather.
  * ``multi``: the other records, a grid sorted by factor (``multi_pos``:
    the cell's item in the multi-item state), and the same records by item,
    in tiers ``[D_j, m_j]`` (one row per item, items sorted by record count)
    whose rows, in order, are the multi-item state.

  ``*_factor`` maps grid rows to factors (None: row ``t`` is factor ``t``).
  A cell holds a record index; ``n`` (one past the last record) is empty.
  ``tier_cell`` maps tier slots to the flattened multi grid (whose extra
  last cell is empty). ``gather`` picks each item's value from
  ``concat(single grid, multi state, per-item fill)``. With traced ids (under
  an outer ``jit``) :func:`record_layout` puts every record in ``multi``,
  one per row, with ``item_seg``: the plain ``segment_sum`` algorithm.
  """

  single_rec: Optional[Array]  # int32[rows_s, width_s] or None
  single_factor: Optional[Array]  # int32[rows_s] or None
  single_item: Optional[Array]  # item id of each single cell
  multi_rec: Array  # int32[rows_m, width_m]
  multi_factor: Optional[Array]
  multi_pos: Array  # multi-state index of each cell
  tier_rec: tuple  # int32[D_j, m_j]
  tier_fac: tuple  # factor of each tier slot
  tier_cell: tuple  # flattened multi-grid cell of each slot
  item_seg: Optional[Array]  # int32[n]: traced layout's item per row
  multi_items: Array  # item id of each multi-state entry
  gather: Array  # int32[num_items]


def _grid(recs, fac, num_factors, n):
  """Records ``recs`` (factor ``fac``) as a ``[rows, width]`` grid by factor."""
  fcount = np.bincount(fac, minlength=num_factors)
  if recs.size == 0:
    return np.full((num_factors, 1), n, np.int64), None
  cands = np.unique(np.concatenate([fcount[fcount > 0], 2 ** np.arange(int(np.log2(fcount.max())) + 2)]))
  cost = [np.ceil(fcount / w).sum() * (w + 16) for w in cands]
  width = int(cands[int(np.argmin(cost))])
  rows_per = np.ceil(fcount / width).astype(np.int64)
  identity = fcount.max() * num_factors <= 1.25 * rows_per.sum() * width
  if identity:  # one row per factor: no segment sum over rows
    width = int(fcount.max())
    rows_per = np.ones(num_factors, np.int64)
  row_factor = np.repeat(np.arange(num_factors), rows_per)
  by_fac = recs[np.argsort(fac, kind="stable")]
  fstart = np.concatenate([[0], np.cumsum(fcount)])
  row_first = np.concatenate([[0], np.cumsum(rows_per)])[:-1]
  off = (np.arange(row_factor.size) - row_first[row_factor])[:, None] * width + np.arange(width)[None, :]
  ok = off < fcount[row_factor][:, None]
  cells = np.where(ok, by_fac[np.minimum(fstart[row_factor][:, None] + off, recs.size - 1)], n)
  return cells, None if identity else row_factor


def _host_layout(items, factors, where, num_items, num_factors, max_tiers=8):
  items = np.asarray(items).reshape(-1).astype(np.int64)
  factors = np.asarray(factors).reshape(-1).astype(np.int64)
  where = np.asarray(where, bool).reshape(-1)
  n = items.shape[0]
  valid = np.flatnonzero(where)
  count = np.bincount(items[valid], minlength=num_items)
  single = valid[count[items[valid]] == 1]
  multi = valid[count[items[valid]] > 1]
  s_cells, s_factor = _grid(single, factors[single], num_factors, n)
  m_cells, m_factor = _grid(multi, factors[multi], num_factors, n)
  # multi items in tiers by record count (powers of two if many counts)
  width = count.copy()
  if np.unique(count[count > 1]).size > max_tiers:
    width = (2 ** np.ceil(np.log2(np.maximum(count, 1)))).astype(np.int64)
  m_items = np.flatnonzero(count > 1)
  m_items = m_items[np.argsort(width[m_items], kind="stable")]
  pos = np.zeros(num_items, np.int64)
  pos[m_items] = np.arange(m_items.size)
  by_item = multi[np.argsort(items[multi], kind="stable")]
  start = np.zeros(num_items + 1, np.int64)
  start[m_items + 1] = count[m_items]
  start = np.cumsum(start)
  cell = np.full(n + 1, m_cells.size, np.int64)  # record -> multi-grid cell
  cell[m_cells[m_cells < n]] = np.flatnonzero(m_cells.ravel() < n)
  tiers = []
  for m in np.unique(width[m_items]):
    docs = m_items[width[m_items] == m]
    slot = start[docs][:, None] + np.arange(m)[None, :]
    ok = np.arange(m)[None, :] < count[docs][:, None]
    tiers.append(np.where(ok, by_item[np.minimum(slot, by_item.size - 1)], n))
  fac_of = np.append(factors, 0)
  item_of = np.append(items, 0)
  s_size = s_cells.size if single.size else 0
  gather = s_size + m_items.size + np.arange(num_items)  # fill
  gather[m_items] = s_size + np.arange(m_items.size)
  if single.size:
    flat = s_cells.ravel()
    gather[items[flat[flat < n]]] = np.flatnonzero(flat < n)
  i32 = lambda a: jnp.asarray(np.asarray(a, np.int32))  # noqa: E731
  opt = lambda a: None if a is None else i32(a)  # noqa: E731
  return RecordLayout(
    single_rec=i32(s_cells) if single.size else None,
    single_factor=opt(s_factor) if single.size else None,
    single_item=i32(item_of[s_cells]) if single.size else None,
    multi_rec=i32(m_cells),
    multi_factor=opt(m_factor),
    multi_pos=i32(pos[item_of[m_cells]]),
    tier_rec=tuple(i32(t) for t in tiers),
    tier_fac=tuple(i32(fac_of[t]) for t in tiers),
    tier_cell=tuple(i32(cell[t]) for t in tiers),
    item_seg=None,
    multi_items=i32(m_items),
    gather=i32(gather),
  )


def _traced_layout(items, factors, where, num_items):
  n = items.shape[0]
  where = jnp.asarray(where, bool)
  items = jnp.where(where, items, 0).astype(jnp.int32)
  factors = jnp.where(where, factors, 0).astype(jnp.int32)
  rec = jnp.arange(n, dtype=jnp.int32)[:, None]
  ident = jnp.arange(num_items, dtype=jnp.int32)
  return RecordLayout(
    single_rec=None,
    single_factor=None,
    single_item=None,
    multi_rec=rec,
    multi_factor=factors,
    multi_pos=items[:, None],
    tier_rec=(rec,),
    tier_fac=(factors[:, None],),
    tier_cell=(rec,),
    item_seg=items,
    multi_items=ident,
    gather=ident,
  )


def record_layout(items, factors, where, *, num_items: int, num_factors: int) -> RecordLayout:
  r"""The :class:`RecordLayout` of records :math:`(x_i, t_i)`, ``where``.

  Concrete ids give the dense layout (built with NumPy); traced ids (under
  an outer ``jit``/``vmap`` that traces them) give the one-record-per-row
  layout, i.e. plain ``segment_sum`` updates. Both give the same fits (up
  to float summation order).

  >>> lay = record_layout(np.array([0, 1, 1, 2]), np.array([0, 0, 1, 1]),
  ...                     np.ones(4, bool), num_items=4, num_factors=2)
  >>> print(lay.single_rec.tolist(), lay.tier_rec[0].tolist(),
  ...       lay.gather.tolist())
  [[0], [3]] [[1, 2]] [0, 2, 1, 6]
  """
  if not all(_is_concrete(a) for a in (items, factors, where)):
    return _traced_layout(jnp.ravel(items), jnp.ravel(factors), jnp.ravel(where), num_items)
  return _host_layout(items, factors, where, num_items, num_factors)


def _is_concrete(x) -> bool:
  """Whether ``x`` has a value now (a NumPy or JAX array), not a tracer under an outer ``jit``/``vmap``."""
  try:
    np.asarray(x)
  except jax.errors.TracerArrayConversionError:
    return False
  return True


def pad_layouts(layouts, num_records: int):
  r"""Host layouts padded to common shapes, so that one compiled fit serves all.

  Each layout (from :func:`record_layout` with concrete ids, records padded
  to ``num_records``, at least every layout's own record count) gets the
  same tier widths, grid shapes and state sizes; the extra cells are empty
  (record ``num_records``) and the fits are unchanged up to float summation
  order. Layouts whose single-record grids differ in presence are returned
  unchanged.

  >>> a = record_layout(np.array([0, 1, 1]), np.array([0, 0, 1]),
  ...                   np.ones(3, bool), num_items=3, num_factors=2)
  >>> b = record_layout(np.array([0, 0, 1, 2, 2, 2]),
  ...                   np.array([0, 1, 1, 0, 1, 1]), np.ones(6, bool),
  ...                   num_items=3, num_factors=2)
  >>> pa, pb = pad_layouts([a, b], 6)
  >>> print([x.shape for x in pa.tier_rec] == [x.shape for x in pb.tier_rec])
  True
  """
  lays = [jax.tree.map(np.asarray, l) for l in layouts]
  if len({l.single_rec is None for l in lays}) > 1 or any(l.item_seg is not None for l in lays):
    return list(layouts)
  n = int(num_records)
  widths = sorted({t.shape[1] for l in lays for t in l.tier_rec})
  depth = {m: max(sum(t.shape[0] for t in l.tier_rec if t.shape[1] == m) for l in lays) for m in widths}
  has_single = lays[0].single_rec is not None

  def grid_shape(get):
    shapes = [get(l).shape for l in lays]
    return max(r for r, _ in shapes), max(w for _, w in shapes)

  s_shape = grid_shape(lambda l: l.single_rec) if has_single else None
  m_shape = grid_shape(lambda l: l.multi_rec)
  size_m = sum(depth.values())
  out = []
  for l in lays:

    def pad_grid(cells, rf, shape):
      rows, w = cells.shape
      g = np.full(shape, n, np.int64)
      g[:rows, :w] = cells
      f = np.zeros(shape[0], np.int64)
      f[:rows] = np.arange(rows) if rf is None else rf
      return g, f

    def remap_cell(idx, old_shape, new_shape):  # flat grid cell -> new flat
      r, c = np.divmod(idx, old_shape[1])
      return np.where(idx >= old_shape[0] * old_shape[1], new_shape[0] * new_shape[1], r * new_shape[1] + c)

    # multi state: old tier rows -> new offsets
    old_off, tiers = 0, {}
    new_off = dict(zip(widths, np.concatenate([[0], np.cumsum([depth[m] for m in widths])[:-1]]).astype(np.int64)))
    remap = np.zeros(sum(t.shape[0] for t in l.tier_rec), np.int64)
    for t, f, c in zip(l.tier_rec, l.tier_fac, l.tier_cell):
      d, m = t.shape
      remap[old_off : old_off + d] = new_off[m] + np.arange(d)
      tiers[m] = (t, f, c)
      old_off += d
    items = np.zeros(size_m, np.int64)
    items[remap] = l.multi_items
    m_cells, m_fac = pad_grid(l.multi_rec, l.multi_factor, m_shape)
    mpos = np.zeros(m_shape, np.int64)
    mpos[: l.multi_pos.shape[0], : l.multi_pos.shape[1]] = remap[l.multi_pos] if remap.size else 0
    t_rec, t_fac, t_cell = [], [], []
    for m in widths:
      t, f, c = tiers.get(m, (np.zeros((0, m), np.int64),) * 3)
      d = depth[m]
      pr = np.full((d, m), n, np.int64)
      pr[: t.shape[0]] = t
      pf = np.zeros((d, m), np.int64)
      pf[: t.shape[0]] = f
      pc = np.full((d, m), m_shape[0] * m_shape[1], np.int64)
      pc[: t.shape[0]] = remap_cell(c, l.multi_rec.shape, m_shape)
      t_rec.append(pr)
      t_fac.append(pf)
      t_cell.append(pc)
    s_old = l.single_rec.size if has_single else 0
    s_new = s_shape[0] * s_shape[1] if s_shape is not None else 0
    m_old = l.multi_items.shape[0]
    g = l.gather.astype(np.int64)
    gather = np.where(
      g < s_old,
      remap_cell(g, l.single_rec.shape, s_shape) if has_single else g,
      np.where(
        g < s_old + m_old,
        s_new + remap[np.clip(g - s_old, 0, max(m_old - 1, 0))] if m_old else g,
        g - s_old - m_old + s_new + size_m,
      ),
    )
    i32 = lambda a: jnp.asarray(np.asarray(a, np.int32))  # noqa: E731
    if s_shape is not None:  # has_single
      s_cells, s_fac = pad_grid(l.single_rec, l.single_factor, s_shape)
      s_item = np.zeros(s_shape, np.int64)
      s_item[: l.single_item.shape[0], : l.single_item.shape[1]] = l.single_item
    out.append(
      RecordLayout(
        single_rec=i32(s_cells) if has_single else None,
        single_factor=i32(s_fac) if has_single else None,
        single_item=i32(s_item) if has_single else None,
        multi_rec=i32(m_cells),
        multi_factor=i32(m_fac),
        multi_pos=i32(mpos),
        tier_rec=tuple(map(i32, t_rec)),
        tier_fac=tuple(map(i32, t_fac)),
        tier_cell=tuple(map(i32, t_cell)),
        item_seg=None,
        multi_items=i32(items),
        gather=i32(gather),
      )
    )
  return out


def _cols(x, idx):
  """``x[:, idx]`` for ``x [R, N]``: ``[R, *idx.shape]``."""
  return jnp.take(x, idx, axis=1)


def _rows(x, row_factor):
  """Per-factor values ``[R, F]`` at each grid row, ``[R, rows, 1]``."""
  return (x if row_factor is None else x[:, row_factor])[:, :, None]


def _fsum(grid, row_factor, num_factors):
  """``[R, rows, width]`` -> per-factor sums ``[R, num_factors]``."""
  s = grid.sum(-1)
  if row_factor is None:
    return s
  return jax.vmap(lambda v: _seg_sum(v, row_factor, num_factors))(s)


class _Data(NamedTuple):
  """CTRs and masks of a layout's cells, runs first: ``[R, ...]``."""

  cs: Optional[Array]
  ws: Optional[Array]
  cm: Array
  wm: Array
  ct: tuple
  wt: tuple
  lay: RecordLayout
  num_items: int
  num_factors: int

  def fac_sum(self, single, multi):
    """Per-factor sums of a single-grid and a multi-grid array."""
    s = _fsum(multi, self.lay.multi_factor, self.num_factors)
    if single is not None:
      s = _fsum(single, self.lay.single_factor, self.num_factors) + s
    return s

  def item_sum(self, tiers):
    """Per multi-item sums over the tier slots, ``[R, multi items]``."""
    s = jnp.concatenate([t.sum(-1) for t in tiers], axis=1)
    if self.lay.item_seg is None:
      return s
    return jax.vmap(lambda v: _seg_sum(v, self.lay.item_seg, self.num_items))(s)

  def assemble(self, single, multi, fill):
    """Per-item ``[R, num_items]`` from the single grid, multi state, fill."""
    parts = [] if single is None else [single.reshape(single.shape[0], -1)]
    return jnp.concatenate(parts + [multi, fill], axis=1)[:, self.lay.gather]


def _data(ctr, where, lay, num_items, num_factors):
  where = jnp.asarray(where, bool).reshape(-1)
  ctr = jnp.where(where, ctr, 0.0)
  c = jnp.concatenate([ctr, jnp.zeros((ctr.shape[0], 1), ctr.dtype)], axis=1)
  w = jnp.append(where.astype(ctr.dtype), 0.0)[None]  # [1, n + 1]
  s = lay.single_rec
  return _Data(
    cs=None if s is None else c[:, s],
    ws=None if s is None else w[:, s],
    cm=c[:, lay.multi_rec],
    wm=w[:, lay.multi_rec],
    ct=tuple(c[:, t] for t in lay.tier_rec),
    wt=tuple(w[:, t] for t in lay.tier_rec),
    lay=lay,
    num_items=num_items,
    num_factors=num_factors,
  )


def _iterate(step, state, epochs: int, *, exact_stop: bool = True):
  r"""``epochs`` applications of ``step`` (``lax.scan``), stopped early, exactly.

  ``step`` is a deterministic map of the state. Epochs run in blocks (of
  at most :data:`_CHUNK`); once a block leaves the state bitwise unchanged (for all
  runs), the trajectory is periodic with a period dividing the block (a
  fixed point, or a rounding cycle), so every later block boundary has the
  same state and the remaining full blocks are skipped; the last
  ``epochs % block`` epochs then run as usual. The result equals that of
  all ``epochs`` epochs.
  """

  def run(s, k):
    return jax.lax.scan(lambda c, _: (step(c), None), s, None, length=k)[0]

  # the largest block size <= _CHUNK dividing `epochs` if there is one >= 16
  # (a single scan body compiles faster), else _CHUNK and a remainder scan
  chunk = next((c for c in range(_CHUNK, 15, -1) if epochs % c == 0), _CHUNK)
  blocks, rem = divmod(epochs, chunk)
  if blocks and exact_stop:

    def cond(c):
      return (c[0] < blocks) & ~c[2]

    def body(c):
      i, s, _ = c
      s2 = run(s, chunk)
      same = jnp.all(jnp.stack([jnp.all(a == b) for a, b in zip(jax.tree.leaves(s2), jax.tree.leaves(s))]))
      return i + 1, s2, same

    _, state, _ = jax.lax.while_loop(cond, body, (jnp.int32(0), state, jnp.bool_(False)))
  elif blocks:
    state = run(state, blocks * chunk)
  return run(state, rem) if rem else state


class _Sorted(NamedTuple):
  """Single-grid CTRs sorted per grid row, with prefix sums of moments.

  ``c``: ``[R, rows, W]`` ascending (empty cells ``+inf``); ``prefix``:
  ``[R, rows, W + 1, M]`` with ``prefix[..., k, :]`` the sums of the ``M``
  moment functions over the ``k`` smallest CTRs of the row; ``n``: records
  per row ``[R, rows]``.
  """

  c: Array
  prefix: Array
  n: Array


def _sorted_singles(cs, ws, moments):
  """:class:`_Sorted` of a single grid for ``moments(c) -> [..., M]``."""
  c = jnp.sort(jnp.where(ws > 0, cs, jnp.inf), axis=-1)
  ok = jnp.isfinite(c)
  m = jnp.where(ok[..., None], moments(jnp.where(ok, c, 0.0)), 0.0)
  prefix = jnp.concatenate([jnp.zeros(m.shape[:-2] + (1, m.shape[-1]), m.dtype), jnp.cumsum(m, axis=-2)], axis=-2)
  return _Sorted(c=c, prefix=prefix, n=ok.sum(-1))


def _count_le(c, thr):
  """Per row, the number of entries of ascending ``c [..., W]`` (``+inf`` padded) that are ``<= thr [...]``."""
  flat_c = c.reshape(-1, c.shape[-1])
  k = jax.vmap(lambda row, t: jnp.searchsorted(row, t, side="right"))(flat_c, thr.reshape(-1))
  return k.reshape(thr.shape).astype(jnp.int32)


def _prefix_at(srt, k):
  """Moment sums over the ``k [R, rows]`` smallest CTRs, ``[R, rows, M]``."""
  return jnp.take_along_axis(srt.prefix, k[..., None, None], axis=-2)[..., 0, :]  # prefix [R, rows, W + 1, M]


def _init(keys, n, dtype, fn=jax.random.uniform):
  return jax.vmap(lambda k: fn(k, (n,), dtype))(keys)


def _start(lay, r_items):
  """Single-grid and multi-state values of per-item ``r_items [R, N]``."""
  rs = None if lay.single_item is None else r_items[:, lay.single_item]
  return rs, r_items[:, lay.multi_items]


def fit_dla(
  key: PRNGKey,
  items: Array,
  factors: Array,
  ctr: Array,
  *,
  where: Array,
  num_items: int,
  num_factors: int,
  epochs: int,
  o_update: str = "mean_ratio",
  init_obs: Optional[float] = None,
  layout: Optional[RecordLayout] = None,
) -> tuple[Array, Array]:
  r"""DLA as alternating least squares on embeddings (Gauss-Seidel).

  With MSE :math:`L = \sum_i (c_i - r'(x_i) o'(t_i))^2`, each epoch sets

  .. math::
      r'(x) &\leftarrow \mathrm{clip}_{[0,1]}\Big(
          \frac{\sum_{i: x_i = x} c_i\, o'(t_i)}
               {\sum_{i: x_i = x} o'(t_i)^2 + 10^{-8}}\Big) \\
      o'(t) &\leftarrow \mathrm{clip}_{[0,1]}\Big(
          \operatorname{mean}_{i: t_i = t}
          \frac{c_i\, r'(x_i)}{r'(x_i)^2 + 10^{-8}}\Big)
          \quad(\text{``mean_ratio''}, \text{the paper's code})

  or :math:`o'(t) \leftarrow \mathrm{clip}(\sum c_i r' / (\sum r'^2 +
  10^{-8}))` (``"least_squares"``, the semi-synthetic code). :math:`r'_0,
  o'_0 \sim U[0, 1]` (or :math:`o'_0` = ``init_obs``).

  Args:
    key: PRNG key of the initialisation.
    items: ``int[n]`` item id of every record.
    factors: ``int[n]`` bias-factor id of every record.
    ctr: ``float[n]`` CTR of every record.
    where: ``bool[n]``, False for padding records.
    num_items: static number of items.
    num_factors: static number of bias factors.
    epochs: static number of epochs :math:`T`.
    o_update: ``"mean_ratio"`` or ``"least_squares"``.
    init_obs: constant initial observation (e.g. 1.0, "DLA_I"), or None.
    layout: :func:`record_layout` of ``(items, factors, where)``, to reuse
      one across calls (built here when None).

  Returns:
    ``(r float[num_items], o float[num_factors])``. Factors without records
    keep their initial value. Epochs run in :func:`_iterate` (stops exactly
    once the iteration is periodic).

  >>> import numpy as np
  >>> x = jnp.array([0, 1, 1, 2]); t = jnp.array([0, 0, 1, 1])
  >>> c = jnp.array([.5, .2, .2, .3]) * jnp.array([1., 1., .5, .5])
  >>> r, o = fit_dla(jax.random.key(0), x, t, c, where=x >= 0,
  ...                num_items=3, num_factors=2, epochs=500)
  >>> print(np.round(r / r[0], 3), np.round(o[1] / o[0], 3))
  [1.  0.4 0.6] 0.5
  """
  return _single(
    _fit_dla,
    key,
    items,
    factors,
    ctr,
    where,
    layout,
    num_items=num_items,
    num_factors=num_factors,
    epochs=epochs,
    o_update=o_update,
    init_obs=init_obs,
  )


def fit_regression_em(
  key: PRNGKey,
  items: Array,
  factors: Array,
  ctr: Array,
  *,
  where: Array,
  num_items: int,
  num_factors: int,
  epochs: int,
  variant: str = "repo",
  layout: Optional[RecordLayout] = None,
) -> tuple[Array, Array]:
  r"""Regression-EM (Wang et al., WSDM 2018) on embeddings.

  Each epoch (step size 1, Gauss-Seidel: :math:`o'` uses the new :math:`r'`):

  .. math::
      r'(x) &\leftarrow \mathrm{clip}_{[0,1]}\operatorname{mean}_{i: x_i=x}
        \Big[c_i + (1-c_i)\frac{(1-o'(t_i))\,\rho_i}{1-o'(t_i)\,\rho_i}\Big] \\
      o'(t) &\leftarrow \mathrm{clip}_{[0,1]}\operatorname{mean}_{i: t_i=t}
        \Big[c_i + (1-c_i)\frac{(1-r'(x_i))\,o'(t_i)}{1-o'(t_i)\,r'(x_i)}\Big]

  with :math:`\rho_i = r'_{k-1}(x_i)` (``variant="paper"``) or
  :math:`\rho_i = c_i / (o'(t_i) + 10^{-8})` (``"repo"``, the authors' code).
  :math:`r'_0 \sim U[0, 0.5]`, :math:`o'_0 \sim U[0, 1]`.

  Args:
    key: PRNG key of the initialisation.
    items: ``int[n]`` item id of every record.
    factors: ``int[n]`` bias-factor id of every record.
    ctr: ``float[n]`` CTR of every record.
    where: ``bool[n]``, False for padding records.
    num_items: static number of items.
    num_factors: static number of bias factors.
    epochs: static number of epochs :math:`T`.
    variant: ``"repo"`` (the authors' code) or ``"paper"``, the E-step's :math:`\rho_i`.
    layout: :func:`record_layout` of ``(items, factors, where)``, to reuse
      one across calls (built here when None).

  Returns:
    ``(r float[num_items], o float[num_factors])``.

  >>> x = jnp.array([0, 1, 1, 2]); t = jnp.array([0, 0, 1, 1])
  >>> c = jnp.array([.5, .2, .2, .3]) * jnp.array([.8, .8, .4, .4])
  >>> r, o = fit_regression_em(jax.random.key(0), x, t, c, where=x >= 0,
  ...                          num_items=3, num_factors=2, epochs=3000)
  >>> print(float(jnp.round(o[1] / o[0], 2)))
  0.5
  """
  return _single(
    _fit_regression_em,
    key,
    items,
    factors,
    ctr,
    where,
    layout,
    num_items=num_items,
    num_factors=num_factors,
    epochs=epochs,
    variant=variant,
  )


def fit_two_tower(
  key: PRNGKey,
  items: Array,
  factors: Array,
  ctr: Array,
  *,
  where: Array,
  num_items: int,
  num_factors: int,
  epochs: int,
  learning_rate: float = 1e-2,
  layout: Optional[RecordLayout] = None,
) -> tuple[Array, Array]:
  r"""Two-Tower (Guo et al., 2019): sigmoid embeddings, Adam on the mean BCE.

  .. math::
      p_i = \sigma(a_{x_i})\,\sigma(b_{t_i}), \qquad
      L = -\operatorname{mean}_i \big[c_i \log p_i + (1 - c_i)\log(1 - p_i)\big]

  full batch, Adam (``learning_rate`` 1e-2), :math:`a = 0`,
  :math:`b \sim N(0, 1)` at the start; returns :math:`r' = \sigma(a)`,
  :math:`o' = \sigma(b)`.

  Args:
    key: PRNG key of the initialisation.
    items: ``int[n]`` item id of every record.
    factors: ``int[n]`` bias-factor id of every record.
    ctr: ``float[n]`` CTR of every record.
    where: ``bool[n]``, False for padding records.
    num_items: static number of items.
    num_factors: static number of bias factors.
    epochs: static number of epochs :math:`T`.
    learning_rate: Adam's step size.
    layout: :func:`record_layout` of ``(items, factors, where)``, to reuse
      one across calls (built here when None).

  Returns:
    ``(r float[num_items], o float[num_factors])``.

  >>> x = jnp.array([0, 1, 1, 2]); t = jnp.array([0, 0, 1, 1])
  >>> c = jnp.array([.5, .2, .2, .3]) * jnp.array([.8, .8, .4, .4])
  >>> r, o = fit_two_tower(jax.random.key(0), x, t, c, where=x >= 0,
  ...                      num_items=3, num_factors=2, epochs=3000)
  >>> print(float(jnp.round(o[1] / o[0], 2)))
  0.5
  """
  return _single(
    _fit_two_tower,
    key,
    items,
    factors,
    ctr,
    where,
    layout,
    num_items=num_items,
    num_factors=num_factors,
    epochs=epochs,
    learning_rate=learning_rate,
  )


def _dla_moments(c):
  """Moments of :func:`_dla_single_sums`: ``[c > 0, c, c^-2, c^-4, c^-6]``
  (the inverse powers 0 where ``c = 0``)."""
  pos = c > 0
  c2 = jnp.where(pos, 1.0 / jnp.where(pos, c * c, 1.0), 0.0)
  return jnp.stack([pos.astype(c.dtype), c, c2, c2 * c2, c2 * c2 * c2], axis=-1)


def _dla_single_sums(srt, c_min, o):
  r"""DLA's o' terms of the one-record items, summed per grid row in O(1).

  An item with one record (CTR :math:`c`, factor :math:`t`, :math:`o =
  o'(t)`, :math:`e = 10^{-8}`) has :math:`r' = \min(c\,a, 1)`, :math:`a = o
  / (o^2 + e)`, and its o' term :math:`T = c\,r' / (r'^2 + e)` is :math:`c
  / (1 + e)` where :math:`r'` is clipped (:math:`c > 1/a`), else

  .. math::
      T = \frac{1/a}{1 + u},\quad u = \frac{e}{(a c)^2}
      = \frac1a\,(1 - u + u^2 - u^3 + O(u^4))

  (:math:`T = 0` at :math:`c = 0`). A row's sum is the clipped CTRs' sum /
  :math:`(1 + e)` plus :math:`(n - v S_2 + v^2 S_4 - v^3 S_6) / a`,
  :math:`v = e / a^2`, :math:`S_j = \sum c^{-j}` over the :math:`n`
  unclipped positive CTRs: prefix sums over the sorted CTRs
  (:func:`_dla_moments`), the unclipped ones found by :func:`_count_le`.

  Args:
    srt: :class:`_Sorted` of the single grid with :func:`_dla_moments`.
    c_min: ``[R, rows]`` smallest positive CTR per row (``inf``: none).
    o: ``[R, rows]`` the rows' :math:`o'`.

  Returns:
    ``(sums [R, rows], ok)``: ``ok`` False when some :math:`u` may exceed
    :data:`_SERIES_TOL` (an error above float64 rounding); the caller then
    sums the records.
  """
  pos = o > 0  # o' = 0: r' = 0 and every term is 0
  a = jnp.where(pos, o / (o * o + _EPS), 1.0)
  # r' is clipped for c > 1 / a; CTRs are <= 1, so a threshold above 1 is 2
  k = _count_le(srt.c, jnp.where(pos & (a > 0.5), 1.0 / a, 2.0))
  m = jnp.moveaxis(_prefix_at(srt, k), -1, 0)
  c_total = _prefix_at(srt, srt.n)[..., 1]
  v = _EPS / (a * a)
  series = (m[0] - v * (m[2] - v * (m[3] - v * m[4]))) / a
  total = jnp.where(pos, series + (c_total - m[1]) / (1.0 + _EPS), 0.0)
  u = jnp.where(jnp.isfinite(c_min), v / (c_min * c_min), 0.0)
  ok = jnp.all((~pos | (u <= _SERIES_TOL)) & jnp.isfinite(total))
  return total, ok


def _fit_dla(keys, ctr, where, lay, *, num_items, num_factors, epochs, o_update="mean_ratio", init_obs=None):
  # keys [R], ctr [R, n] -> r [R, num_items], o [R, num_factors]
  if o_update not in ("mean_ratio", "least_squares"):
    raise ValueError(f"unknown o_update {o_update!r}")
  d = _data(ctr, where, lay, num_items, num_factors)
  dtype = ctr.dtype
  k1, k2 = jax.vmap(jax.random.split, out_axes=1)(keys)
  r_init = _init(k1, num_items, dtype)
  o = _init(k2, num_factors, dtype) if init_obs is None else jnp.full((keys.shape[0], num_factors), init_obs, dtype)
  count_t = d.fac_sum(d.ws, d.wm)
  has_t = count_t > 0
  inv_t = 1.0 / jnp.where(has_t, count_t, 1.0)

  def single_r(o):  # one record per item: the update is elementwise
    ot = _rows(o, lay.single_factor)
    return jnp.clip(d.cs * ot / (d.ws * ot * ot + _EPS), 0.0, 1.0)

  def multi_r(o):
    ot = [_cols(o, f) for f in lay.tier_fac]
    num = d.item_sum([c * t for c, t in zip(d.ct, ot)])
    den = d.item_sum([w * t * t for w, t in zip(d.wt, ot)])
    return jnp.clip(num / (den + _EPS), 0.0, 1.0)

  def term(c, w, r):  # "mean_ratio": the o' update's term of a record
    return w * c * r / (r * r + _EPS)

  def update_o(o, o_sum):
    return jnp.where(has_t, jnp.clip(o_sum, 0.0, 1.0), o)

  def epoch(carry):
    _, _, o = carry
    rs = None if d.cs is None else single_r(o)
    rm = multi_r(o)
    rx = rm[:, lay.multi_pos]
    if o_update == "mean_ratio":
      o_new = d.fac_sum(None if rs is None else term(d.cs, d.ws, rs), term(d.cm, d.wm, rx)) * inv_t
    else:
      if rs is None or d.cs is None or d.ws is None:  # no single grid (all three are None together)
        s_num, s_den = None, None
      else:
        s_num, s_den = d.cs * rs, d.ws * rs * rs
      o_new = d.fac_sum(s_num, d.cm * rx) / (d.fac_sum(s_den, d.wm * rx * rx) + _EPS)
    return rs, rm, update_o(o, o_new)

  rs, rm = _start(lay, r_init)
  if not epochs:
    return d.assemble(rs, rm, r_init), o
  fill = jnp.zeros_like(r_init)  # items without records: 0 / (0 + eps)
  if o_update != "mean_ratio" or d.cs is None:
    rs, rm, o = _iterate(epoch, (rs, rm, o), epochs)
    return d.assemble(rs, rm, fill), o

  # "mean_ratio": the one-record items' o' terms summed in closed form
  srt = _sorted_singles(d.cs, d.ws, _dla_moments)
  c_min = jnp.min(jnp.where(d.cs > 0, d.cs, jnp.inf), axis=-1)

  def single_sum(o):
    total, ok = _dla_single_sums(srt, c_min, _rows(o, lay.single_factor)[..., 0])
    exact = lambda: term(d.cs, d.ws, single_r(o)).sum(-1)  # noqa: E731
    return jax.lax.cond(ok, lambda: total, exact)

  def fast_epoch(carry):
    _, _, o = carry
    rm = multi_r(o)
    o_new = d.fac_sum(single_sum(o)[..., None], term(d.cm, d.wm, rm[:, lay.multi_pos])) * inv_t
    return rm, o, update_o(o, o_new)

  rm, o_prev, o = _iterate(fast_epoch, (rm, o, o), epochs)
  return d.assemble(single_r(o_prev), rm, fill), o


def _rem_moments(c):
  """Moments of :func:`_rem_single_sums`: ``[1, c]`` and ``c^j g^i`` for
  ``g = (1 - c)^-2``, ``i = 1, 2, 3``, ``j < i + 2``."""
  g = 1.0 / (1.0 - c) ** 2
  pw = [jnp.ones_like(c), c, c * c, c**3, c**4]
  return jnp.stack(
    [pw[0], c] + [pw[j] * g for j in range(3)] + [pw[j] * g * g for j in range(4)] + [pw[j] * g**3 for j in range(5)],
    axis=-1,
  )


def _rem_single_sums(srt, o):
  r"""Regression-EM's ("repo") o' terms of the one-record items, summed per
  grid row in O(1).

  An item with one record (CTR :math:`c`, :math:`o = o'(t)`, :math:`e =
  10^{-8}`) has :math:`r' = \mathrm{clip}(\mathrm{post}(c, o))`, a function
  of :math:`o` alone, and its o' term is :math:`c` if :math:`c > o + e`
  (:math:`r'` clipped to 1), else

  .. math::
      o + e - (o - c + e)\,\frac{q}{1 + q},\quad
      q = \frac{e\,(1 - o c)}{o\,(1 - c)^2}.

  Summed over a row's records with :math:`q / (1 + q) = q - q^2 + q^3 +
  O(q^4)` this is the clipped CTRs' sum plus a cubic in :math:`e / o` whose
  coefficients are prefix sums of :func:`_rem_moments` over the sorted CTRs
  (the unclipped ones are the smallest, found by :func:`_count_le`).

  Args:
    srt: :class:`_Sorted` of the single grid with :func:`_rem_moments`.
    o: ``[R, rows]`` the rows' :math:`o'`.

  Returns:
    ``(sums [R, rows], ok)``: ``ok`` False when some :math:`q` exceeds
    :data:`_SERIES_TOL` (tiny :math:`o'`, CTRs near 1: an error above float64
    rounding); the caller then sums the records.
  """
  w = o + _EPS
  k = _count_le(srt.c, w)  # records not clipped
  m = jnp.moveaxis(_prefix_at(srt, k), -1, 0)
  c_total = _prefix_at(srt, srt.n)[..., 1]
  s = jnp.where(k > 0, _EPS / jnp.where(o > 0, o, 1.0), 0.0)
  g = w * m[2] - (1 + o * w) * m[3] + o * m[4]
  h = w * m[5] - (2 * o * w + 1) * m[6] + (o * o * w + 2 * o) * m[7] - o * o * m[8]
  o3 = o**3
  kk = w * m[9] - (3 * o * w + 1) * m[10] + (3 * o * o * w + 3 * o) * m[11] - (o3 * w + 3 * o * o) * m[12] + o3 * m[13]
  total = m[0] * w - s * (g - s * (h - s * kk)) + (c_total - m[1])
  # q grows with c: its largest value is at the largest unclipped CTR
  c_hi = jnp.take_along_axis(srt.c, jnp.maximum(k - 1, 0)[..., None], axis=-1)[..., 0]
  q = jnp.where(k > 0, s * (1 - o * c_hi) / (1 - c_hi) ** 2, 0.0)
  ok = jnp.all(((o > 0) | (k == 0)) & (q <= _SERIES_TOL) & jnp.isfinite(total))
  return total, ok


def _fit_regression_em(keys, ctr, where, lay, *, num_items, num_factors, epochs, variant="repo"):
  if variant not in ("repo", "paper"):
    raise ValueError(f"unknown variant {variant!r}")
  d = _data(ctr, where, lay, num_items, num_factors)
  dtype = ctr.dtype
  k1, k2 = jax.vmap(jax.random.split, out_axes=1)(keys)
  r_init = _init(k1, num_items, dtype) * 0.5
  o = _init(k2, num_factors, dtype)
  count_x = d.item_sum(d.wt)
  has_x = count_x > 0
  inv_x = 1.0 / jnp.where(has_x, count_x, 1.0)
  count_t = d.fac_sum(d.ws, d.wm)
  has_t = count_t > 0
  inv_t = 1.0 / jnp.where(has_t, count_t, 1.0)

  def post(c, ot, rho):
    return c + (1 - c) * (1 - ot) * rho / (1 - ot * rho)

  def post_repo(c, ot):
    # post(c, ot, rho) at rho = c / (ot + eps), with one division:
    # rho / (1 - ot rho) = c / (ot + eps - ot c)
    return c + (1 - c) * (1 - ot) * c / (ot + _EPS - ot * c)

  def post_o(c, w, r, ot):
    return w * (c + (1 - c) * (1 - r) * ot / (1 - ot * r))

  def multi_o(rm, o):
    """The multi-record items' r' update and their o' sums."""
    terms, start = [], 0
    for c, w, f in zip(d.ct, d.wt, lay.tier_fac):
      ot = o[:, f]
      if variant == "repo":
        p = post_repo(c, ot)
      else:
        rho = rm[:, start : start + c.shape[1], None]
        if lay.item_seg is not None:
          rho = rm[:, lay.item_seg][:, :, None]
        p = post(c, ot, rho)
      start += c.shape[1]
      terms.append(w * p)
    rm = jnp.where(has_x, jnp.clip(d.item_sum(terms) * inv_x, 0.0, 1.0), rm)
    rx = rm[:, lay.multi_pos]
    return rm, post_o(d.cm, d.wm, rx, _rows(o, lay.multi_factor))

  def single_r(rs, o):
    assert d.ws is not None  # called only with a single grid (rs is not None)
    ot = _rows(o, lay.single_factor)
    p = post_repo(d.cs, ot) if variant == "repo" else post(d.cs, ot, rs)
    return jnp.where(d.ws > 0, jnp.clip(d.ws * p * 1.0, 0.0, 1.0), rs)

  def epoch(carry):
    rs, rm, o = carry
    if rs is not None:  # one record per item: the mean is the record itself
      rs = single_r(rs, o)
    rm, multi = multi_o(rm, o)
    o_new = d.fac_sum(None if rs is None else post_o(d.cs, d.ws, rs, _rows(o, lay.single_factor)), multi)
    o = jnp.where(has_t, jnp.clip(o_new * inv_t, 0.0, 1.0), o)
    return rs, rm, o

  rs, rm = _start(lay, r_init)
  if not epochs:
    return d.assemble(rs, rm, r_init), o
  if variant != "repo" or rs is None or lay.item_seg is not None:
    rs, rm, o = _iterate(epoch, (rs, rm, o), epochs)
    return d.assemble(rs, rm, r_init), o

  # "repo": the one-record items' o' terms summed in closed form
  srt = _sorted_singles(d.cs, d.ws, _rem_moments)

  def single_sum(o):
    total, ok = _rem_single_sums(srt, _rows(o, lay.single_factor)[..., 0])
    exact = lambda: post_o(
      d.cs,
      d.ws,
      single_r(d.cs, o),  # noqa: E731
      _rows(o, lay.single_factor),
    ).sum(-1)
    return jax.lax.cond(ok, lambda: total, exact)

  def fast_epoch(carry):
    rm, _, o = carry
    rm, multi = multi_o(rm, o)
    o_new = d.fac_sum(single_sum(o)[..., None], multi)
    return rm, o, jnp.where(has_t, jnp.clip(o_new * inv_t, 0.0, 1.0), o)

  rm, o_prev, o = _iterate(fast_epoch, (rm, o, o), epochs)
  return d.assemble(single_r(rs, o_prev), rm, r_init), o


def _fit_two_tower(keys, ctr, where, lay, *, num_items, num_factors, epochs, learning_rate=1e-2):
  d = _data(ctr, where, lay, num_items, num_factors)
  dtype = ctr.dtype
  runs = keys.shape[0]
  a0 = jnp.zeros((runs, num_items), dtype)
  a_s, a_m = _start(lay, a0)
  params = {"as": a_s, "am": a_m, "b": _init(keys, num_factors, dtype, jax.random.normal)}
  opt = optax.adam(learning_rate)
  scale = -1.0 / jnp.maximum(d.fac_sum(d.ws, d.wm).sum(-1), 1.0)[:, None, None]

  # d/d logp of the mean BCE, -mean[c log p + (1 - c) log(1 - p)], with
  # log(1 - p) = log1p(-exp(min(logp, -1e-12))) as in the loss:
  # c - (1 - c) p / (1 - p) where logp < -1e-12. Then the chain rule through
  # log p = log sigmoid(a) + log sigmoid(b): d/da = (1 - sigmoid(a)) d/dlogp.
  # (p = sigmoid(a) sigmoid(b): one exp per cell instead of four.)
  p_max = float(np.exp(-1e-12))

  def dlogp(sa, sb, c, w):
    p = sa * sb
    return scale * w * (c - jnp.where(p < p_max, (1 - c) * p / (1.0 - p), 0.0))

  def grads(p):
    sb = jax.nn.sigmoid(p["b"])
    gs = None
    g: dict[str, Optional[jax.Array]] = {"as": None}
    if d.cs is not None:
      sa = jax.nn.sigmoid(p["as"])
      gs = dlogp(sa, _rows(sb, lay.single_factor), d.cs, d.ws)
      g["as"] = gs * (1.0 - sa)
    sa = jax.nn.sigmoid(p["am"])
    gm = dlogp(_cols(sa, lay.multi_pos), _rows(sb, lay.multi_factor), d.cm, d.wm)
    flat = jnp.concatenate([gm.reshape(runs, -1), jnp.zeros((runs, 1), dtype)], axis=1)
    g["am"] = d.item_sum([flat[:, t] for t in lay.tier_cell]) * (1.0 - sa)
    g["b"] = d.fac_sum(gs, gm) * (1.0 - sb)
    return g

  def step(carry):
    p, s = carry
    # optax takes None as an empty subtree (no single grid); its ArrayTree alias does not list None
    upd, s = opt.update(grads(p), s, p)  # pyright: ignore[reportArgumentType]
    return optax.apply_updates(p, upd), s

  params, _ = _iterate(step, (params, opt.init(params)), epochs, exact_stop=False)
  params = cast(dict[str, Optional[jax.Array]], params)  # apply_updates keeps the dict it is given
  fit_s, fit_m, fit_b = params["as"], params["am"], params["b"]
  assert fit_m is not None and fit_b is not None  # only the single grid may be absent
  sig = jax.nn.sigmoid
  return (d.assemble(None if fit_s is None else sig(fit_s), sig(fit_m), sig(a0)), sig(fit_b))


#: XLA:CPU options for the fits' top-level jits: its YNN fusions of float64 row reductions slow the Table 1
#: epochs (measured in ``benchmarks/RESULTS.md``, "Identifiability fits: the CPU compiler option"). Applied on
#: the CPU backend only (:func:`compiler_options`); other backends compile with XLA's defaults.
CPU_COMPILER_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": ""}


def compiler_options(backend: Optional[str] = None) -> Optional[dict]:
  """The fits' XLA compiler options on ``backend`` (default: JAX's default backend).

  :data:`CPU_COMPILER_OPTIONS` on ``"cpu"``, None (XLA's defaults) on any other backend.

  >>> compiler_options("cpu"), compiler_options("gpu")
  ({'xla_cpu_experimental_ynn_fusion_type': ''}, None)
  """
  backend = jax.default_backend() if backend is None else backend
  return dict(CPU_COMPILER_OPTIONS) if backend == "cpu" else None


def backend_jit(fun, **jit_kwargs):
  """``jax.jit(fun, **jit_kwargs)`` compiled with :func:`compiler_options` of the default backend.

  The backend is read at the first call, not at import; one jitted function per backend. For top-level jits
  only (XLA takes compiler options from the outermost program): the study's fits (``table1._fit``, the context
  study's rows); the single-run fits, which users may call inside their own jit, are plain ``jax.jit``.

  >>> f = backend_jit(lambda x, n: x * n, static_argnames="n")
  >>> float(f(jnp.float32(2.0), n=3))
  6.0
  """
  jitted = {}

  @functools.wraps(fun)
  def call(*args, **kwargs):
    backend = jax.default_backend()
    if backend not in jitted:
      jitted[backend] = jax.jit(fun, compiler_options=compiler_options(backend), **jit_kwargs)
    return jitted[backend](*args, **kwargs)

  return call


_STATIC = ("num_items", "num_factors", "epochs")
_JITTED = {
  _fit_dla: jax.jit(_fit_dla, static_argnames=_STATIC + ("o_update",)),
  _fit_regression_em: jax.jit(_fit_regression_em, static_argnames=_STATIC + ("variant",)),
  _fit_two_tower: jax.jit(_fit_two_tower, static_argnames=_STATIC),
}


def _single(kernel, key, items, factors, ctr, where, layout, *, num_items, num_factors, **kw):
  """One run of a fit ``kernel`` (the public ``fit_*``): the records' layout built when not given."""
  if layout is None:
    layout = record_layout(items, factors, where, num_items=num_items, num_factors=num_factors)
  kw.update(num_items=num_items, num_factors=num_factors)
  r, o = _JITTED[kernel](jnp.asarray(key)[None], jnp.asarray(ctr).reshape(1, -1), where, layout, **kw)
  return r[0], o[0]


def fit_no_debias(key, items, factors, ctr, *, where, num_items, num_factors, epochs=1, **unused):
  r"""No debiasing: one shared bias factor, so :math:`r'(x) \propto
  \operatorname{mean}_{i: x_i = x} c_i` (DLA with all :math:`t_i = 0`,
  :math:`o' = 1`).

  Args:
    key: unused (no randomness).
    items: ``int[n]`` item id of every record.
    factors: ``int[n]`` bias-factor id of every record.
    ctr: ``float[n]`` CTR of every record.
    where: ``bool[n]``, False for padding records.
    num_items: static number of items.
    num_factors: static number of bias factors.
    epochs: unused (one closed-form step).
    **unused: the other fits' options, ignored.

  Returns:
    ``(r float[num_items], o float[num_factors])`` with :math:`o' = 1`.

  >>> r, o = fit_no_debias(None, jnp.array([0, 0, 1]), jnp.array([0, 1, 0]),
  ...                      jnp.array([.2, .4, .5]), where=jnp.ones(3, bool),
  ...                      num_items=2, num_factors=2)
  >>> print([round(v, 3) for v in r.tolist()], o.tolist())
  [0.3, 0.5] [1.0, 1.0]
  """
  del key, epochs, unused
  items, factors, ctr, w = _prep(items, factors, ctr, where)
  num = _seg_sum(ctr, items, num_items)
  den = _seg_sum(w, items, num_items)
  r = jnp.clip(num / (den + _EPS), 0.0, 1.0)
  return r, jnp.ones((num_factors,), ctr.dtype)


FIT_FUNCTIONS = {
  "no_debias": fit_no_debias,
  "dla": fit_dla,
  "regression_em": fit_regression_em,
  "two_tower": fit_two_tower,
}

_KERNELS = {"dla": _fit_dla, "regression_em": _fit_regression_em, "two_tower": _fit_two_tower}


def fit_runs(
  method: str,
  keys: Array,
  ctr: Array,
  *,
  where: Array,
  layout: RecordLayout,
  num_items: int,
  num_factors: int,
  epochs: int,
  **kwargs,
) -> tuple[Array, Array]:
  r"""``R`` independent fits of ``method`` on one record layout, batched.

  The same as ``jax.vmap`` of the single-run function over ``keys`` and the
  CTR rows, in one jitted call.
  Traceable, not jitted: call it inside a top-level :func:`backend_jit` (or
  ``jax.jit``; the layout is an argument: build it with :func:`record_layout`
  outside the trace).

  Args:
    method: ``"dla"``, ``"regression_em"`` or ``"two_tower"``.
    keys: ``[R]`` PRNG keys (run ``i`` initialises as the single-run
      function with ``keys[i]``).
    ctr: ``float[R, n]`` CTRs of the records.
    where, layout, num_items, num_factors, epochs, **kwargs: as for the
      single-run function.

  Returns:
    ``(r float[R, num_items], o float[R, num_factors])``.

  >>> x = np.array([0, 1, 1, 2]); t = np.array([0, 0, 1, 1])
  >>> c = np.array([[.5, .2, .2, .3], [.4, .3, .3, .6]]) * [1., 1., .5, .5]
  >>> lay = record_layout(x, t, np.ones(4, bool), num_items=3, num_factors=2)
  >>> keys = jax.random.split(jax.random.key(0), 2)
  >>> r, o = fit_runs("dla", keys, c, where=np.ones(4, bool), layout=lay,
  ...                 num_items=3, num_factors=2, epochs=500)
  >>> print(r.shape, np.round(o[:, 1] / o[:, 0], 3))
  (2, 3) [0.5 0.5]
  """
  return _KERNELS[method](
    keys, jnp.asarray(ctr), where, layout, num_items=num_items, num_factors=num_factors, epochs=epochs, **kwargs
  )
