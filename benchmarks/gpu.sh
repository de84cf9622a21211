#!/usr/bin/env bash
# Every GPU figure of BENCHMARKS.md (the MuJoCo Warp backend, the Go1 gait, PPO against rsl-rl-lib and
# mjlab, data-parallel scaling) measured in one command:
#
#   bash benchmarks/gpu.sh                 # all stages
#   bash benchmarks/gpu.sh tests throughput  # some stages: tests throughput profile ppo mjlab go1 scaling
#   bash benchmarks/gpu.sh --help          # this text
#
# Needs an NVIDIA GPU and `pip install -e ".[test]" rsl-rl-lib` (setup.sh installs mujoco-warp and
# warp-lang). Results land in benchmarks/results/*.md; BENCHMARKS.md quotes them (copied by hand,
# with what the numbers mean).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
# Rendering is not measured here; without an OpenGL library MuJoCo's import must not try one.
if [ -z "${MUJOCO_GL:-}" ]; then
  if ldconfig -p | grep -q libEGL.so; then export MUJOCO_GL=egl; else export MUJOCO_GL=disable; fi
fi
all_stages=(tests throughput profile ppo mjlab go1 scaling)
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=("${all_stages[@]}")
for stage in "${stages[@]}"; do  # before any GPU check: --help and a typo cost nothing
  case $stage in
    -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    tests|throughput|profile|ppo|mjlab|go1|scaling) ;;
    *) echo "unknown stage '$stage'; stages: ${all_stages[*]} (or --help)"; exit 2 ;;
  esac
done
GO1_MINUTES=${GO1_MINUTES:-3}
PPO_ITERATIONS=${PPO_ITERATIONS:-20}
PPO_ENVS=${PPO_ENVS:-4096}  # 16384: end to end where simulation alone passes 1M/s (mjlab then needs ~4x its 4096-world time)
PPO_SET=${PPO_SET:-}  # config overrides for the ppo and mjlab stages, e.g. "env.randomization.dynamics_pool=0"
# PPO_SET="runner.matmul_precision=high" PPO_SUFFIX=tf32: TF32 matmuls for all three learners (a process-wide
# switch; mjlab's train script turns it on, the plain stages run every learner in IEEE float32)
suffix=$([ "$PPO_ENVS" = 4096 ] || echo "_$PPO_ENVS")  # other world counts do not overwrite the 4096-world tables
ppo_set=()
if [ -n "$PPO_SET" ]; then  # its own tables (PPO_SUFFIX), so the plain ones BENCHMARKS.md quotes stay
  [ -n "${PPO_SUFFIX:-}" ] || { echo "PPO_SET needs PPO_SUFFIX, the name suffix of its result tables"; exit 2; }
  suffix="${suffix}_$PPO_SUFFIX"
  set -f; read -ra ppo_set <<<"$PPO_SET"; set +f  # words, not globs: [0.9,1.1] stays as written
fi
command -v nvidia-smi >/dev/null || { echo "no nvidia-smi here: these stages need an NVIDIA GPU and its driver"; exit 2; }
nvidia-smi -L
# Fail here, in seconds, if torch or Warp cannot use the GPU (a CPU torch build; a driver older than
# Warp's CUDA), not with CPU figures labelled GPU or a crash in every stage.
python -c "import torch, warp, mujoco_warp; print('torch', torch.__version__, 'warp', warp.__version__, 'mujoco_warp', mujoco_warp.__version__); assert torch.cuda.is_available(), 'torch sees no CUDA device (a CPU build of torch?)'; warp.init(); assert warp.is_cuda_available(), 'warp sees no CUDA device (driver older than its CUDA?)'"
for stage in "${stages[@]}"; do
  echo "=== $stage ($(date -u +%T))"
  case $stage in
    tests)  # the Warp backend on the GPU against the CPU backend (the CPU-device cases run in CI)
      python -m pytest -q -p no:cacheprovider tests/sims/test_warp_backend.py tests/robolearn/test_host_reads.py tests/policies/test_ppo.py -k cuda
      # and five PPO iterations on rough ground (terrain lookup, pushes, per-episode masses on CUDA)
      python -m robolearn train configs/ppo_go1_rough.yaml env.backend=warp env.device=cuda env.num_envs=4096 \
        runner.total_steps=491520 runner.video_seconds=0 logging.wandb=disabled logging.progress=false \
        run_dir="${TMPDIR:-/tmp}/robolearn-smoke" name=go1_rough ;;
    throughput)  # env steps/s at 1024-16384 worlds, GPU memory per 1k worlds
      (cd benchmarks && python warp_throughput.py --device cuda --tasks ant go1_flat go1_rough --worlds 1024 4096 16384 --seconds 4) ;;
    profile)  # milliseconds of a Go1 env step under each randomization, with resets (by mask and listed), and of a policy call
      (cd benchmarks && python warp_profile.py --worlds 4096 --device cuda)
      (cd benchmarks && python host_syncs.py --worlds 4096 --device cuda) ;;  # where an iteration waits on the GPU
    ppo)  # end-to-end PPO (collection + update) against rsl-rl-lib on the same Warp VecEnv
      (cd benchmarks && python ppo_vs_rsl_rl.py --task go1_flat --num-envs "$PPO_ENVS" --device cuda --backend warp \
        --iterations "$PPO_ITERATIONS" --out "ppo_vs_rsl_rl$suffix.md" --set "${ppo_set[@]}") ;;
    mjlab)  # the same, with mjlab's own training of its Go1 task (gpu_offline.sh pack-mjlab): a stage of its
            # own, since mjlab's kernels are not prebuilt and compile here, so a time limit costs no ppo row
      if python -c "import mjlab.envs, mjlab.rl, mjlab.tasks.registry as r; r.load_env_cfg('Mjlab-Velocity-Flat-Unitree-Go1')"; then
        (cd benchmarks && python ppo_vs_rsl_rl.py --task go1_flat --num-envs "$PPO_ENVS" --device cuda --backend warp \
          --iterations "$PPO_ITERATIONS" --mjlab Mjlab-Velocity-Flat-Unitree-Go1 --out "ppo_vs_mjlab$suffix.md" \
          --set "${ppo_set[@]}")
      else
        echo "mjlab: mjlab does not import here (above), so its own training is not timed"
      fi ;;
    go1)  # a walking gait within GO1_MINUTES of wall-clock; GO1_OVERRIDES="agent.max_std=1.0 ..." to try settings
      python -m robolearn train configs/ppo_go1_flat.yaml env.backend=warp env.device=cuda env.num_envs=4096 \
        runner.max_minutes="$GO1_MINUTES" runner.video_seconds=0 logging.wandb=disabled logging.progress=false \
        runner.log_every=10 run_dir=benchmarks/runs name=go1_gpu ${GO1_OVERRIDES:-}
      python benchmarks/go1_gpu_report.py benchmarks/runs/go1_gpu ;;
    scaling)  # data-parallel efficiency; NCCL needs one GPU per rank
      ngpu=$(nvidia-smi -L | wc -l)
      if [ "$ngpu" -ge 2 ] && [ -f benchmarks/distributed_scaling.py ]; then
        (cd benchmarks && python distributed_scaling.py --device cuda --sim-backend warp --config ppo_go1_flat \
          --num-envs 4096 --budget 5000000)
      else
        echo "scaling: $ngpu GPU(s); NCCL data parallelism needs 2 or more, skipped"
      fi ;;
  esac
done
