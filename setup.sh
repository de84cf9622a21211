#!/usr/bin/env bash
# Installs robolearn and whatever a fresh Debian/Ubuntu machine lacks.
#   bash setup.sh          the package (CPU MuJoCo, PPO/SAC, export, W&B offline)
#   bash setup.sh --test   ... plus the test tools
# torch: an already installed torch (CPU or CUDA build) is kept. Otherwise
# torch==2.13.0 is installed: a CPU build where pip finds one locally (as on our
# CI machines), PyPI's default build (CUDA on Linux x86-64) elsewhere. CPU-only
# users elsewhere install the CPU wheel from PyPI's CPU index first; see README.
set -euo pipefail
cd "$(dirname "$0")"

extras=""
[ "${1:-}" = "--test" ] && extras="[test]"

# Offscreen rendering of videos on a machine without a display: OSMesa.
if ! ldconfig -p 2>/dev/null | grep -q libOSMesa; then
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  if command -v apt-get >/dev/null; then
    $sudo_cmd apt-get update -qq && $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libosmesa6 >/dev/null
  else
    echo "setup.sh: install OSMesa (libosmesa6) for offscreen videos; training works without it" >&2
  fi
fi

python3 -c "import torch" 2>/dev/null || python3 -m pip install -q "torch==2.13.0"
python3 -m pip install -q -e ".${extras}"

# mjlab tasks (`task=mjlab:<id>`, sims/adapters/mjlab.py) are tested for real: mjlab 1.6 pins
# mujoco 3.11 but runs on our mujoco 4 / mujoco-warp 4, so it goes in without its pins.
if [ -n "$extras" ]; then
  python3 -m pip install -q --no-deps "mjlab==1.6.0" "mjviser==0.0.14"
  python3 -m pip install -q tyro prettytable trimesh mediapy viser scipy
  echo "setup.sh: pip's 'dependency resolver' errors about mjlab's pins (mujoco 3.11, rsl-rl-lib 5.4.2), if any above, are expected: it runs on ours" >&2
fi
