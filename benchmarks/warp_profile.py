"""Where a Go1 PPO iteration's time goes on the GPU: env variants, policy inference, update (diagnostic)."""
import time, torch, sys
from robolearn.config import load_config
from robolearn.registry import make_env, make_agent

def timed(fn, n=20):
    fn(); torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(n): fn()
    torch.cuda.synchronize(); return (time.perf_counter() - t) / n * 1e3

cfg = load_config("ppo_go1_flat", ["env.backend=warp", "env.device=cuda", "env.num_envs=4096"])
full = dict(cfg.env.randomization)
variants = {"none": {}, "mass": {"mass_scale": full["mass_scale"]}, "friction": {"friction_scale": full["friction_scale"]},
            "push": {k: full[k] for k in ("push_every_s", "push_velocity")}, "full": full}
for name, rnd in variants.items():
    cfg.env.randomization = rnd
    env = make_env(cfg.env, seed=0)
    a = torch.zeros(4096, 12, device="cuda")
    print(f"env step [{name}]: {timed(lambda: env.step(a)):.2f} ms", flush=True)
    if name == "full":
        agent = make_agent(cfg, env)
        obs = env.reset()
        print(f"agent.act: {timed(lambda: agent.act(obs, explore=True)):.2f} ms", flush=True)
    env.close()
