"""Experiment: our IQL from d3rlpy's initial weights for a seed; minibatch indices from d3rlpy's sampler, numpy or
torch; batches built by d3rlpy's pipeline (picker + scalers) or ours (replay rows, normalizer inside the agent).

    ours_from_d3rlpy_init.py SEED {d3rlpy,numpy,torch} {d3,ours} [INDEX_SEED]
"""
import sys, json, time
from pathlib import Path
REPO = Path(__file__).resolve().parents[3]  # benchmarks/results/iql_gap/ -> the checkout
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]
import numpy as np, torch
torch.set_num_threads(1); torch.set_float32_matmul_precision("highest")
import d3rlpy
from d3rlpy.torch_utility import TorchMiniBatch
from d3rlpy.dataset import TransitionMiniBatch
from d3rlpy.algos.utility import build_scalers_with_transition_picker
from gymnasium import spaces
from iql_lockstep import copy_into_ours
from offline_d4rl_style import evaluate_policy
from policies.offline.iql import IQL, IQLConfig
from robolearn.data import Dataset
from robolearn.storage import ReplayBuffer
seed, sampler, prep = int(sys.argv[1]), sys.argv[2], sys.argv[3]
if sampler == "d3rlpy" and prep != "d3":
    sys.exit("d3rlpy's sampler builds its own batches: give d3 as BATCHES")
ds = Dataset.load("hopper-medium"); data = ds.transitions("cpu")
mdp = d3rlpy.dataset.MDPDataset(observations=data["obs"]["policy"].numpy(), actions=data["action"].numpy(),
    rewards=data["reward"].numpy().astype(np.float32), terminals=data["terminated"].numpy().astype(np.float32),
    timeouts=data["truncated"].numpy().astype(np.float32))
d3rlpy.seed(seed)
sc = d3rlpy.preprocessing.StandardObservationScaler(); rs = d3rlpy.preprocessing.ReturnBasedRewardScaler(multiplier=1000.0)
agent = d3rlpy.algos.IQLConfig(batch_size=256, actor_learning_rate=3e-4, critic_learning_rate=3e-4, expectile=0.7, weight_temp=3.0,
    max_weight=100.0, observation_scaler=sc, reward_scaler=rs).create(device="cpu:0")
build_scalers_with_transition_picker(agent, mdp)
agent.build_with_dataset(mdp)
ours = IQL({"policy": spaces.Box(-np.inf, np.inf, (11,))}, spaces.Box(-1.0, 1.0, (3,)),
           IQLConfig(total_updates=20000, normalize_obs=prep == "ours", normalize_reward=prep == "ours"), torch.device("cpu"))
data = ours.prepare(data)
copy_into_ours(agent.impl, ours)
with torch.no_grad(): ours.log_std.zero_()
torch.manual_seed(seed)
if len(sys.argv) > 4:  # an index stream unrelated to the initial weights' seed
    np.random.seed(int(sys.argv[4])); torch.manual_seed(int(sys.argv[4]))
N = int(data["reward"].shape[0])
replay = ReplayBuffer(N, torch.device("cpu")); replay.add(data)
picker = mdp.transition_picker


def from_d3rlpy(transitions: TransitionMiniBatch) -> dict:
    """d3rlpy's batch pipeline (its scalers) -> the batch our IQL takes (its own normalization off)."""
    b = TorchMiniBatch.from_batch(transitions, gamma=0.99, compute_returns_to_go=False, device="cpu:0",
                                  observation_scaler=sc, reward_scaler=rs)
    return {"obs": {"policy": b.observations}, "next_obs": {"policy": b.next_observations}, "action": b.actions,
            "reward": b.rewards[:, 0], "terminated": b.terminals[:, 0] > 0}


t = time.perf_counter()
for i in range(20000):
    if sampler == "d3rlpy":  # d3rlpy's own sampler (one numpy draw per transition)
        batch = from_d3rlpy(mdp.sample_transition_batch(256))
    else:
        idx = torch.randint(0, N, (256,)) if sampler == "torch" else torch.as_tensor(np.random.randint(N, size=256))
        if prep == "d3":
            batch = from_d3rlpy(TransitionMiniBatch.from_transitions([picker(*mdp.buffer[int(j)]) for j in idx]))
        else:
            batch = {"obs": {"policy": replay.data["obs"]["policy"][idx]}, "next_obs": {"policy": replay.data["next_obs"]["policy"][idx]},
                     "action": replay.data["action"][idx], "reward": replay.data["reward"][idx], "terminated": replay.data["terminated"][idx]}
    ours.update(batch)
controller = ours.controller().eval()
norm = (lambda x: x) if prep == "ours" else sc.transform
with torch.no_grad():
    score = evaluate_policy(lambda o: controller(norm(torch.as_tensor(o))).numpy(), "hopper", "hopper-medium", seed)
r = {"variant": f"ours from d3init, {sampler} indices (seed {sys.argv[4:]}), {prep} batches", "seed": seed, "score": score, "s": time.perf_counter() - t}
print(json.dumps(r)); open(Path(__file__).with_name("runs.jsonl"), "a").write(json.dumps(r) + "\n")
