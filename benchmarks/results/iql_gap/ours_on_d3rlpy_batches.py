"""Experiment: our IQL update fed d3rlpy's own minibatches (its sampler, scalers), from d3rlpy's initial weights."""
import sys, json, time
from pathlib import Path
REPO = Path(__file__).resolve().parents[3]  # benchmarks/results/iql_gap/ -> the checkout
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]
import numpy as np, torch
torch.set_num_threads(1); torch.set_float32_matmul_precision("highest")
import d3rlpy
from d3rlpy.torch_utility import TorchMiniBatch
from gymnasium import spaces
from iql_lockstep import copy_into_ours
from offline_d4rl_style import evaluate_policy
from policies.offline.iql import IQL, IQLConfig
from robolearn.data import Dataset
seed = int(sys.argv[1])
ds = Dataset.load("hopper-medium"); data = ds.transitions("cpu")
mdp = d3rlpy.dataset.MDPDataset(observations=data["obs"]["policy"].numpy(), actions=data["action"].numpy(),
    rewards=data["reward"].numpy().astype(np.float32), terminals=data["terminated"].numpy().astype(np.float32),
    timeouts=data["truncated"].numpy().astype(np.float32))
d3rlpy.seed(seed)
sc = d3rlpy.preprocessing.StandardObservationScaler(); rs = d3rlpy.preprocessing.ReturnBasedRewardScaler(multiplier=1000.0)
agent = d3rlpy.algos.IQLConfig(batch_size=256, actor_learning_rate=3e-4, critic_learning_rate=3e-4, expectile=0.7, weight_temp=3.0,
    max_weight=100.0, observation_scaler=sc, reward_scaler=rs).create(device="cpu:0")
from d3rlpy.algos.utility import build_scalers_with_transition_picker
build_scalers_with_transition_picker(agent, mdp)
agent.build_with_dataset(mdp)
ours = IQL({"policy": spaces.Box(-np.inf, np.inf, (11,))}, spaces.Box(-1.0, 1.0, (3,)),
           IQLConfig(total_updates=20000, normalize_obs=False, normalize_reward=False), torch.device("cpu"))
copy_into_ours(agent.impl, ours)
with torch.no_grad(): ours.log_std.zero_()
t = time.perf_counter()
for i in range(20000):
    b = TorchMiniBatch.from_batch(mdp.sample_transition_batch(256), gamma=0.99, compute_returns_to_go=False, device="cpu:0",
                                  observation_scaler=sc, reward_scaler=rs)
    ours.update({"obs": {"policy": b.observations}, "next_obs": {"policy": b.next_observations}, "action": b.actions,
                 "reward": b.rewards[:, 0], "terminated": b.terminals[:, 0] > 0})
controller = ours.controller().eval()
with torch.no_grad():
    score = evaluate_policy(lambda o: controller(sc.transform(torch.as_tensor(o))).numpy(), "hopper", "hopper-medium", seed)
r = {"variant": "ours on d3rlpy batches from d3init", "seed": seed, "score": score, "s": time.perf_counter() - t}
print(json.dumps(r)); open(Path(__file__).with_name("runs.jsonl"), "a").write(json.dumps(r) + "\n")
