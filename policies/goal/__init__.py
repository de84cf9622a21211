"""Offline goal-conditioned agents over undirected data, goals relabeled in hindsight:
GCBC, flat GCIQL and hierarchical HIQL (``relabel.py`` draws their goals)."""

from policies.goal.gcbc import GCBC, GCBCConfig
from policies.goal.gciql import GCIQL, GCIQLConfig
from policies.goal.hiql import HIQL, HIQLConfig

__all__ = ["GCBC", "GCBCConfig", "GCIQL", "GCIQLConfig", "HIQL", "HIQLConfig"]
