"""Offline goal-conditioned agents over undirected data, goals relabeled in hindsight:
GCBC, flat GCIQL, hierarchical HIQL and OTA (HIQL with an option-aware high-level value);
``relabel.py`` draws their goals. And online: HRAC, adjacency-constrained subgoals (``hrac.py``)."""

from policies.goal.gcbc import GCBC, GCBCConfig
from policies.goal.gciql import GCIQL, GCIQLConfig
from policies.goal.hiql import HIQL, HIQLConfig
from policies.goal.hrac import HRAC, HRACConfig
from policies.goal.ota import OTA, OTAConfig

__all__ = ["GCBC", "GCBCConfig", "GCIQL", "GCIQLConfig", "HIQL", "HIQLConfig", "HRAC", "HRACConfig", "OTA", "OTAConfig"]
