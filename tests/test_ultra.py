"""Tests for the ULTRA-format loader (ultr_jax.data.ultra)."""

import json
import subprocess
import sys

import numpy as np
import pytest

from ultr_jax.data import load_ultra


def _write(tmp_path, feature, init_list, labels, rank_cutoff=3):
  (tmp_path / "train").mkdir(exist_ok=True)
  (tmp_path / "settings.json").write_text(json.dumps({"feature_size": 4, "rank_cutoff": rank_cutoff}))
  (tmp_path / "train" / "train.feature").write_text(feature)
  (tmp_path / "train" / "train.init_list").write_text(init_list)
  (tmp_path / "train" / "train.labels").write_text(labels)
  return tmp_path


FEAT = "d0 0:1\nd1 1:1\nd2 2:1\nd3 3:1 0:0.5\n"


def test_loads_lists_labels_and_features(tmp_path):
  _write(tmp_path, FEAT, "5 d3 d0\n6 d1 d2 d0\n", "5 2 1\n6 0 4 1\n")
  ds = load_ultra(tmp_path, with_features=True)
  np.testing.assert_array_equal(ds.doc_ids, [[3, 0, -1], [1, 2, 0]])
  np.testing.assert_array_equal(ds.labels, [[2, 1, 0], [0, 4, 1]])
  np.testing.assert_array_equal(ds.where, [[1, 1, 0], [1, 1, 1]])
  np.testing.assert_array_equal(ds.qid, [5, 6])
  np.testing.assert_allclose(ds.features[0, 0], [0.5, 0, 0, 1])
  np.testing.assert_allclose(ds.features[0, 2], 0)
  np.testing.assert_array_equal(ds.extras["positions"][1], [0, 1, 2])


@pytest.mark.parametrize(
  "init_list,labels,rank_cutoff,needle",
  [
    ("5 d0 d1\n6 d1 d2\n", "5 1 2\n6 3 0\n", 3, "train.labels:2"),
    ("5 d0 d1\n", "5 1\n", 3, "train.labels:1"),
    ("5 d0 d1 d2 d3\n", "5 1 1 1 1\n", 3, "train.init_list:1"),
    ("5 d0 dX\n", "5 1 1\n", 3, "train.init_list:1"),
    ("5 d0\n6 d1\n", "5 1\n7 1\n", 3, "train.labels:2"),
  ],
)
def test_bad_input_names_file_and_line(tmp_path, init_list, labels, rank_cutoff, needle):
  _write(tmp_path, FEAT, init_list, labels, rank_cutoff)
  with pytest.raises(ValueError, match=needle.replace(".", r"\.")):
    load_ultra(tmp_path)


def test_conflicting_label_message(tmp_path):
  _write(tmp_path, FEAT, "5 d0 d1\n6 d1 d2\n", "5 1 2\n6 3 0\n")
  with pytest.raises(ValueError) as e:
    load_ultra(tmp_path)
  msg = str(e.value)
  assert "d1" in msg and "line 1" in msg and "'labels'" in msg


def test_shared_data(shared_data):
  with pytest.warns(UserWarning, match=r"train\.init_list:154: field 'doc_id': document '1611' is shown twice"):
    ds = load_ultra(shared_data / "identifiability" / "K=2")  # the published lists repeat two documents
  assert ds.doc_ids.shape == (1150, 10) and ds.where.all()
  assert ds.doc_ids.max() < 10000
  # one consistent label per document
  lab = {}
  for d, y in zip(ds.doc_ids.ravel(), ds.labels.ravel()):
    assert lab.setdefault(d, y) == y
  ds_ni = load_ultra(shared_data / "identifiability" / "K=2_node_intervention", repeated_docs="allow")
  assert ds_ni.num_queries == 1151


def test_check_binary(shared_data, tmp_path):
  out = tmp_path / "r.json"
  subprocess.run(
    [
      sys.executable,
      "experiments/identifiability/check.py",
      f"--data={shared_data / 'identifiability' / 'K=3'}",
      f"--out={out}",
    ],
    check=True,
    capture_output=True,
    cwd=str(__import__("pathlib").Path(__file__).parent.parent),
  )
  r = json.loads(out.read_text())
  assert r["identifiable"] is False and r["num_components"] == 3
  assert r["components"] == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
