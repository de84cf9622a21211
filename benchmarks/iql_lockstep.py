"""Our IQL update against d3rlpy's, step by step, from the same weights on the same minibatches.

The offline benchmark compares the two libraries by score over seeds; when the scores
differ, this says whether the update math differs or only the random streams do. Both
agents start from the same parameters (d3rlpy's, copied into ours) and receive the
same minibatches (drawn once, already standardized, rewards already scaled, so
neither library's preprocessing enters); after every update the parameters are
compared. float32 matmuls at "highest" on both sides, so the differences are
floating-point reassociation, not bf16.

d3rlpy differs from ours in three places by design, and each can be matched for the
check (``--match``):

- ``order``: d3rlpy steps critic and value first and weights the actor's regression
  with the updated V; ours takes the V of before the step (the IQL authors' and CORL's
  order). Matched by giving d3rlpy the weights of before its critic step.
- ``logstd``: d3rlpy's log std is ``-5 + 7 sigmoid(p)``; ours is ``clamp(p, min, 2)``.
  Matched by giving d3rlpy ours.
- ``qmean``: d3rlpy sums the twin critics' squared errors, we average them (CORL). Under
  Adam that only moves the step of parameters whose gradient is near Adam's epsilon
  (1e-8), but those exist, so it shows. Matched by halving d3rlpy's.

With all three matched, the parameters agree to float32 round-off for as many updates as
the check runs, unless the two updates differ somewhere else.

Runs in d3rlpy's virtualenv (see offline_d4rl_style.py) on synthetic minibatches (no dataset
needed), and prints the differences after 1, 10, every 50 and the last update; writes no file
(BENCHMARKS.md, "Where the gap comes from"; benchmarks/results/iql_gap/):

    .venv/bin/python benchmarks/iql_lockstep.py [--updates 200] [--match order logstd qmean]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]  # this checkout's packages, not an installed copy
from common import benchmark_parser  # noqa: E402


def make_d3rlpy_iql(obs_dim: int, action_dim: int, match: set[str]):  # noqa: ANN201 (d3rlpy's types)
    """d3rlpy's IQL (its D4RL settings, scalers left out) built for the shapes, patched per ``match``."""
    import d3rlpy
    from d3rlpy.algos.qlearning.torch.iql_impl import IQLImpl
    from d3rlpy.models.torch import ActionOutput

    rng = np.random.default_rng(0)
    tiny = d3rlpy.dataset.MDPDataset(  # only to build the networks: build_with_dataset needs shapes
        observations=rng.standard_normal((10, obs_dim)).astype(np.float32),
        actions=rng.uniform(-1, 1, (10, action_dim)).astype(np.float32),
        rewards=np.zeros(10, np.float32), terminals=np.eye(10, dtype=np.float32)[-1])
    agent = d3rlpy.algos.IQLConfig(batch_size=256, actor_learning_rate=3e-4, critic_learning_rate=3e-4, expectile=0.7,
                                   weight_temp=3.0, max_weight=100.0).create(device="cpu:0")
    agent.build_with_dataset(tiny)
    impl = agent.impl
    if "logstd" in match:
        policy = impl._modules.policy

        def forward(x: torch.Tensor, *args: object) -> ActionOutput:
            mu = policy._mu(policy._encoder(x))
            return ActionOutput(mu, torch.tanh(mu), policy._logstd.clamp(policy._min_logstd, policy._max_logstd))

        policy.forward = forward
        with torch.no_grad():
            policy._logstd.zero_()
    if "qmean" in match:
        from d3rlpy.algos.qlearning.torch.iql_impl import IQLCriticLoss

        def compute_critic_loss(batch, q_tpn):  # noqa: ANN001, ANN202
            loss = IQLImpl.compute_critic_loss(impl, batch, q_tpn)
            q_loss = loss.q_loss / len(impl._modules.q_funcs)
            return IQLCriticLoss(critic_loss=q_loss + loss.v_loss, q_loss=q_loss, v_loss=loss.v_loss)

        impl.compute_critic_loss = compute_critic_loss
    if "order" in match:
        compute_weight = IQLImpl._compute_weight
        cache: dict[str, torch.Tensor] = {}

        def inner_update(batch, grad_step):  # noqa: ANN001, ANN202
            with torch.no_grad():
                cache["weight"] = compute_weight(impl, batch)
            return IQLImpl.inner_update(impl, batch, grad_step)

        impl.inner_update = inner_update
        impl._compute_weight = lambda batch: cache["weight"]
    return impl


def linears(module: torch.nn.Module) -> list[torch.nn.Linear]:
    return [layer for layer in module.modules() if isinstance(layer, torch.nn.Linear)]


def copy_linears(dst: list[torch.nn.Linear], src: list[torch.nn.Linear]) -> None:
    for d, s in zip(dst, src, strict=True):
        d.weight.copy_(s.weight)
        d.bias.copy_(s.bias)


@torch.no_grad()
def copy_into_ours(impl, ours) -> None:  # noqa: ANN001
    """d3rlpy's parameters -> our IQL (Linear weights transposed into the ensemble's (E, in, out))."""
    m = impl._modules
    copy_linears(linears(ours.actor), linears(m.policy))
    ours.log_std.copy_(m.policy._logstd.flatten())
    copy_linears(linears(ours.value), linears(m.value_func))
    for critic, q_funcs in ((ours.critic, m.q_funcs), (ours.critic_target, m.targ_q_funcs)):
        for member, q in enumerate(q_funcs):
            for layer, src in zip(critic.layers, linears(q), strict=True):
                layer.weight[member].copy_(src.weight.T)
                layer.bias[member, 0].copy_(src.bias)


def max_difference(impl, ours, match: set[str]) -> dict[str, float]:  # noqa: ANN001
    """Largest absolute parameter difference per network, relative to its largest parameter (or 1)."""
    m = impl._modules

    def flat(layers: list[torch.nn.Linear]) -> torch.Tensor:
        return torch.cat([p.detach().flatten() for layer in layers for p in (layer.weight, layer.bias)])

    d3_critic = [torch.stack([linears(q)[i].weight.T for q in m.q_funcs]) for i in range(len(ours.critic.layers))]
    pairs = {
        "actor": (flat(linears(m.policy)), flat(linears(ours.actor))),
        "value": (flat(linears(m.value_func)), flat(linears(ours.value))),
        "critic": (torch.cat([w.flatten() for w in d3_critic]),
                   torch.cat([layer.weight.detach().flatten() for layer in ours.critic.layers])),
    }
    if "logstd" in match:  # the same parametrization, so the parameters compare
        pairs["log std"] = (m.policy._logstd.detach().flatten(), ours.log_std.detach())
    return {name: float((a - b).abs().max() / a.abs().max().clamp(min=1.0)) for name, (a, b) in pairs.items()}


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--updates", type=int, default=200, help="updates each side takes, in lockstep")
    parser.add_argument("--match", nargs="*", default=["order", "logstd", "qmean"],
                        choices=["order", "logstd", "qmean"],
                        help="d3rlpy's designed differences to match (above); none given: all three left in")
    parser.add_argument("--float64", action="store_true", help="both in float64: round-off no longer grows into view")
    parser.add_argument("--obs-dim", type=int, default=11,
                        help="observation size of the synthetic minibatches; the default is hopper's")
    parser.add_argument("--action-dim", type=int, default=3,
                        help="action size of the synthetic minibatches; the default is hopper's")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.set_float32_matmul_precision("highest")
    torch.manual_seed(0)
    if args.float64:
        torch.set_default_dtype(torch.float64)

    try:
        from d3rlpy.torch_utility import TorchMiniBatch
    except ModuleNotFoundError:  # (a bare ModuleNotFoundError said neither where nor how)
        sys.exit("d3rlpy is not installed in this Python: run this in d3rlpy's virtualenv, .venv/bin/python "
                 "benchmarks/iql_lockstep.py (the lines at the top of offline_d4rl_style.py make it)")
    from gymnasium import spaces

    from policies.offline.iql import IQL, IQLConfig

    impl = make_d3rlpy_iql(args.obs_dim, args.action_dim, set(args.match))
    ours = IQL({"policy": spaces.Box(-np.inf, np.inf, (args.obs_dim,))}, spaces.Box(-1.0, 1.0, (args.action_dim,)),
               IQLConfig(normalize_obs=False, normalize_reward=False, log_std_min=-5.0, total_updates=args.updates),
               torch.device("cpu"))
    copy_into_ours(impl, ours)
    # d3rlpy's actor lr follows the same cosine as ours (the offline benchmark's CosineAnnealingLRFactory(T_max=updates))
    actor_optim = impl._modules.actor_optim
    actor_optim._lr_scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(actor_optim.optim, T_max=args.updates)
    print(f"start: {max_difference(impl, ours, set(args.match))}")

    generator = torch.Generator().manual_seed(1)
    for step in range(1, args.updates + 1):
        obs, next_obs = torch.randn(2, 256, args.obs_dim, generator=generator)
        action = torch.rand(256, args.action_dim, generator=generator) * 2 - 1
        reward = torch.randn(256, generator=generator)
        terminated = torch.rand(256, generator=generator) < 0.02
        impl.update(TorchMiniBatch(
            observations=obs, actions=action, rewards=reward[:, None], next_observations=next_obs,
            next_actions=torch.zeros_like(action), returns_to_go=torch.zeros(256, 1), terminals=terminated.float()[:, None],
            intervals=torch.ones(256, 1), device="cpu:0"), step - 1)
        ours.update({"obs": {"policy": obs}, "next_obs": {"policy": next_obs}, "action": action, "reward": reward,
                     "terminated": terminated})
        if step in (1, 10) or step % 50 == 0 or step == args.updates:
            print(f"after {step} updates: " + ", ".join(f"{k} {v:.1e}" for k, v in max_difference(impl, ours, set(args.match)).items()))


if __name__ == "__main__":
    main()
