"""Offline agents: trained from a fixed dataset by :mod:`robolearn.offline_runner`.

BC, TD3+BC, IQL and CQL (Cal-QL is CQL with ``calql: true``); ``Finetune`` (WSRL, Cal-QL
fine-tuning, JSRL) pretrains like CQL and goes on online (``robolearn.finetune_runner``). Each is an
:class:`~policies.offline.common.OfflineAgent`: ``prepare(data)`` fixes dataset
statistics once, ``update(batch)`` takes a sampled minibatch.
"""

from policies.offline.bc import BC, BCConfig
from policies.offline.common import OfflineAgent
from policies.offline.cql import CQL, CalQLConfig, CQLConfig
from policies.offline.iql import IQL, IQLConfig
from policies.offline.td3bc import TD3BC, TD3BCConfig
from policies.offline.wsrl import CalQLFinetuneConfig, Finetune, FinetuneConfig, JSRLConfig

__all__ = ["BC", "BCConfig", "CQL", "CQLConfig", "CalQLConfig", "CalQLFinetuneConfig", "Finetune", "FinetuneConfig",
           "JSRLConfig", "IQL", "IQLConfig", "OfflineAgent", "TD3BC", "TD3BCConfig"]
