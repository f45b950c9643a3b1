"""ultr_jax.data: loaders, caching, preprocessing, synthetic data, batching."""

from ultr_jax.data.baidu import BERT_FEATURES, LTR_FEATURES, load_baidu_ultr, read_baidu_sessions
from ultr_jax.data.click_log import CLICK_LOG_FORMATS, ClickLog, click_log_sessions, read_click_log
from ultr_jax.data.dataset import RankingDataset, check_labels, is_per_item
from ultr_jax.data.preprocessing import (
  NORMALIZATIONS,
  DatasetStats,
  NormalizerStats,
  drop_queries_without_relevant,
  fit_normalizer,
  normalize_features,
  stats,
)
from ultr_jax.data.splits import (
  Splits,
  batches,
  concatenate,
  held_out_sessions,
  pad_queries,
  take_queries,
  train_valid_test_split,
)
from ultr_jax.data.svmlight import (
  SVMLightRows,
  default_cache_dir,
  load_svmlight,
  read_svmlight,
  rows_to_dataset,
  write_svmlight,
)
from ultr_jax.data.synthetic import DEFAULT_LABEL_FRACTIONS, make_synthetic
from ultr_jax.data.ultra import load_ultra, read_ultra_features
from ultr_jax.data.yandex import YANDEX_LAYOUTS, read_yandex_sessions

__all__ = [
  "load_ultra",
  "read_ultra_features",
  "RankingDataset",
  "check_labels",
  "is_per_item",
  "NORMALIZATIONS",
  "DatasetStats",
  "NormalizerStats",
  "drop_queries_without_relevant",
  "fit_normalizer",
  "normalize_features",
  "stats",
  "Splits",
  "batches",
  "concatenate",
  "pad_queries",
  "take_queries",
  "train_valid_test_split",
  "held_out_sessions",
  "SVMLightRows",
  "default_cache_dir",
  "load_svmlight",
  "read_svmlight",
  "rows_to_dataset",
  "write_svmlight",
  "DEFAULT_LABEL_FRACTIONS",
  "make_synthetic",
  "ClickLog",
  "read_click_log",
  "click_log_sessions",
  "CLICK_LOG_FORMATS",
  "BERT_FEATURES",
  "LTR_FEATURES",
  "load_baidu_ultr",
  "read_baidu_sessions",
  "YANDEX_LAYOUTS",
  "read_yandex_sessions",
]

# Streaming input: Parquet session and feature shards and their streams (pyarrow and grain are imported when used).
from ultr_jax.data.convert import (  # noqa: E402
  SESSION_COLUMNS,
  ClickLogRows,
  convert_click_log,
  read_session_shards,
  session_shard_paths,
  write_session_shards,
)
from ultr_jax.data.sources import StreamedClickLog, click_log_files, open_click_log  # noqa: E402
from ultr_jax.data.stream import BATCH_KEYS, SessionStream, session_batches  # noqa: E402
from ultr_jax.data.feature_stream import FeatureStream, convert_svmlight, write_feature_shards  # noqa: E402
from ultr_jax.data.baidu_shards import convert_baidu_ultr  # noqa: E402

__all__ += [
  "SESSION_COLUMNS",
  "ClickLogRows",
  "convert_click_log",
  "read_session_shards",
  "session_shard_paths",
  "write_session_shards",
  "BATCH_KEYS",
  "SessionStream",
  "session_batches",
  "FeatureStream",
  "convert_svmlight",
  "write_feature_shards",
  "convert_baidu_ultr",
  "StreamedClickLog",
  "click_log_files",
  "open_click_log",
]
