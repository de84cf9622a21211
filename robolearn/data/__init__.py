"""Offline datasets: episodes recorded in sim or on robots, D4RL/LeRobot imports, replay in sim.

Start with :class:`Dataset` (``load``, iteration, ``transitions``,
``normalized_score``). Datasets are Minari-format directories under
:func:`datasets_root`; :class:`DatasetWriter` (and :meth:`Dataset.create`)
write them atomically. :func:`record` fills a writer from any VecEnv (give the writer
``metadata=env_metadata(env, task)``, so the dataset says its task),
:func:`replay` plays an episode's actions back on one. :func:`import_dataset` makes a dataset of a
D4RL file, a LeRobot directory or a deploy recording, as ``robolearn dataset import`` does; :func:`recover`
makes a dataset of what a recording killed outright left.
"""

from robolearn.data.d4rl import read_d4rl, write_d4rl
from robolearn.data.dataset import Dataset, merge, split
from robolearn.data.episode import DatasetError, Episode
from robolearn.data.importing import Imported, import_dataset
from robolearn.data.lerobot import read_lerobot, write_lerobot
from robolearn.data.minari_store import DatasetWriter, dataset_id, datasets_root, list_datasets
from robolearn.data.record import RandomController, env_metadata, record
from robolearn.data.recordings import read_recordings
from robolearn.data.recover import Recovered, recover, uncommitted_recordings
from robolearn.data.replay import ReplayResult, replay

__all__ = ["Dataset", "DatasetError", "DatasetWriter", "Episode", "Imported", "RandomController", "Recovered", "ReplayResult",
           "dataset_id", "datasets_root", "env_metadata", "import_dataset", "list_datasets", "merge", "read_d4rl", "read_lerobot", "read_recordings", "record",
           "recover", "replay", "split", "uncommitted_recordings", "write_d4rl", "write_lerobot"]
