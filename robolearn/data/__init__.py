"""Offline datasets: episodes recorded in sim or on robots, D4RL/LeRobot imports, replay in sim.

Start with :class:`Dataset` (load, iterate, ``transitions``, ``normalized_score``);
datasets are written in the Minari format under :func:`datasets_root`.
"""

from robolearn.data.dataset import Dataset, merge, split
from robolearn.data.episode import DatasetError, Episode
from robolearn.data.minari_store import DatasetWriter, dataset_id, datasets_root, list_datasets

__all__ = ["Dataset", "DatasetError", "DatasetWriter", "Episode", "dataset_id", "datasets_root", "list_datasets",
           "merge", "split"]
