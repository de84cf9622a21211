"""Is it Skill-Critic's refined low level that does the task? Trained Skill-Critic runs evaluated twice.

Skill-Critic differs from SPiRL in two ways: it refines the low level online, and it
explores with the low level's samples rather than the decoder's mean. To tell which one
its advantage comes from, each trained run (``benchmarks/skill_critic_maze.py
--keep-runs DIR``) is evaluated with its own high-level policy and

- its refined low level ``pi_L`` (what it deploys), and
- the pretrained decoder in its place (the skills as SPiRL plays them),

on the same ``--episodes`` episodes (same seeds, deterministic controllers). If the
swap loses the task, the refinement is what solved it.

    python benchmarks/skill_critic_low_level.py /tmp/kept/skill_critic_seed3 ... [--episodes 50]
                                                [--out skill_critic_low_level.md]

No peer library. Writes ``benchmarks/results/<--out>`` (BENCHMARKS.md, "A rearranged kitchen:
where refining the skills pays").
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]  # this checkout's packages, not an installed copy
from common import benchmark_parser, machine, write_result  # noqa: E402


def run_dir_of(path: Path) -> Path:
    """The run directory at or under ``path`` (the benchmark keeps ``<algo>_seed<n>/<run name>/<stamp>``)."""
    found = sorted(p.parent for p in Path(path).rglob("config.yaml") if (p.parent / "checkpoints").is_dir())
    if not found:
        raise FileNotFoundError(f"{path}: no run directory with checkpoints under it")
    return found[-1]


def evaluate_both(path: Path, episodes: int) -> dict:
    """Success and return of the run's controller with its refined low level and with the decoder instead."""
    from policies.skills.skill_model import LowPolicy
    from robolearn.evaluate import evaluate
    from robolearn.registry import make_env
    from robolearn.config import load_run_config
    from robolearn.runs import load_agent

    run_dir = run_dir_of(path)
    cfg = load_run_config(run_dir)
    if cfg.algo != "skill_critic":
        raise ValueError(f"{run_dir}: a {cfg.algo} run; this compares Skill-Critic's low levels")
    cfg.env.num_threads = 1
    env = make_env(cfg.env, num_envs=episodes, seed=cfg.seed + 20_000)
    agent = load_agent(run_dir, env, cfg)
    decoder_played = copy.deepcopy(agent)
    decoder_played.low_policy.load_state_dict(
        LowPolicy.from_decoder(agent.skills.decoder, agent.horizon, agent.cfg.decoder_std).state_dict())
    out = {"run": str(run_dir), "seed": cfg.seed, "task": f"`{cfg.env.task}` with {cfg.env.kwargs}"}
    for name, which in (("refined", agent), ("decoder", decoder_played)):
        result = evaluate(which.controller(), env, episodes, seed=cfg.seed + 20_000)
        out[name] = {"success": result.get("success_rate", 0.0), "return": result["return_mean"]}
    env.close()
    return out


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("runs", nargs="+", type=Path, help="Skill-Critic run directories (or folders holding one)")
    parser.add_argument("--episodes", type=int, default=50, help="episodes per low level, the same seeds for both")
    parser.add_argument("--out", default="skill_critic_low_level.md", help="file under benchmarks/results/")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = [evaluate_both(path, args.episodes) for path in args.runs]
    lines = ["# Skill-Critic's refined low level against its decoder, same high level", "",
             f"`python benchmarks/skill_critic_low_level.py {' '.join(sys.argv[1:])}`", "",
             f"Machine: {machine()}. Each trained Skill-Critic run's high-level policy (mean skill every H steps) "
             f"plays {args.episodes} deterministic episodes with its refined low level, then the same episodes "
             "(same seeds) with the pretrained decoder in its place, as SPiRL would play the skills.", "",
             f"Task: {rows[0]['task']}.", "",
             "| seed | success, refined low level | success, decoder | return, refined | return, decoder |",
             "|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['seed']} | {row['refined']['success']:.2f} | {row['decoder']['success']:.2f} | "
                     f"{row['refined']['return']:.2f} | {row['decoder']['return']:.2f} |")
    refined = np.array([row["refined"]["success"] for row in rows])
    decoder = np.array([row["decoder"]["success"] for row in rows])
    lines += ["", f"Mean over {len(rows)} runs: success {refined.mean():.2f} ± {refined.std():.2f} with the refined "
              f"low level, {decoder.mean():.2f} ± {decoder.std():.2f} with the decoder."]
    write_result(args.out, "\n".join(lines))


if __name__ == "__main__":
    main()
