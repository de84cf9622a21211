"""Experiment: d3rlpy's IQL made equal to ours in the two designed differences (pre-step V for the
actor's weights; log std = clamp(p, -5, 2) with p starting at 0), on the benchmark's data and evaluation."""
import json, sys, time
from pathlib import Path
REPO = Path(__file__).resolve().parents[3]  # benchmarks/results/iql_gap/ -> the checkout
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]
import torch
torch.set_num_threads(1)
from d3rlpy.algos.qlearning.torch.iql_impl import IQLImpl
from d3rlpy.models.torch import ActionOutput, NormalPolicy

def forward(self, x, *args):
    mu = self._mu(self._encoder(x))
    return ActionOutput(mu, torch.tanh(mu), self._logstd.clamp(self._min_logstd, self._max_logstd))
NormalPolicy.forward = forward
_orig_init = NormalPolicy.__init__
def init(self, *a, **k):
    _orig_init(self, *a, **k)   # logstd parameter starts at zeros: ours with log_std_init 0
NormalPolicy.__init__ = init

_compute_weight = IQLImpl._compute_weight
def inner_update(self, batch, grad_step):
    with torch.no_grad():
        self._cached_weight = _compute_weight(self, batch)
    return super(IQLImpl, self).inner_update(batch, grad_step)
IQLImpl.inner_update = inner_update
IQLImpl._compute_weight = lambda self, batch: self._cached_weight

import offline_d4rl_style as b
seed = int(sys.argv[1])
r = b.run_d3rlpy("iql", "hopper-medium", seed, 20000, "highest", "d3rlpy")
r |= {"seed": seed, "variant": "d3rlpy patched: order + clamp logstd"}
print(json.dumps(r))
with open(Path(__file__).with_name("runs.jsonl"), "a") as f:
    f.write(json.dumps(r) + "\n")
