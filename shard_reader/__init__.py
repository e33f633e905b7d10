"""tf.data input pipeline over segprep shards. Never imports apache_beam."""

from shard_reader.dataset import make_dataset, steps_per_epoch
from shard_reader.metadata import SplitInfo, load_split

__all__ = ["SplitInfo", "load_split", "make_dataset", "steps_per_epoch"]
