#!/usr/bin/env bash
# benchmarks/gpu.sh on a GPU machine that has CUDA torch but no package index (an air-gapped
# cluster node, a lent benchmark box): pack the missing packages and prebuilt Warp kernels here,
# carry the folder over, run there.
#
#   bash benchmarks/gpu_offline.sh pack                 # here: .gpu/part1, .gpu/part2, ... (PART_MB each)
#   bash benchmarks/gpu_offline.sh pack-mjlab           # here, optional: .gpu/mjlab/part1, ... (mjlab's stack)
#   bash benchmarks/gpu_offline.sh run DIR... [STAGE:SECONDS ...]   # there, DIRs holding the parts
#
# pack: wheels for CPython $PYTHON (default 3.12) on manylinux x86-64 of what a stock CUDA torch
# image lacks, at the versions installed here (the Warp kernel cache only matches the same
# warp-lang and mujoco-warp), unpacked into one xz tarball split into PART_MB (default 60) MB
# parts, one folder each, so that a transfer with a size limit can carry them one at a time; and
# the tasks' CUDA kernels for sm_$ARCH (default 90) from benchmarks/warp_prebuild.py in the last part.
# pack-mjlab: the same for what mjlab's own training imports beyond that (found by importing it
# here), so that the mjlab stage times mjlab's training of its Go1 task; its parts unpack over
# the first bundle.
# run: joins and unpacks the parts, then each stage of gpu.sh under its own time limit (default
# "throughput:120 ppo:100 go1:270 tests:150 mjlab:150"), and copies the result tables to $OUT (or DIR/results).
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}; shift || true

# bundle NAME OUT DIST...: the pinned manylinux wheels of DIST unpacked into one NAME.tar.xz split
# into PART_MB parts, OUT/part1, OUT/part2, ...; prints the last part's folder.
bundle() {
  local name=$1 out=$2; shift 2
  local part_mb=${PART_MB:-60} py=${PYTHON:-3.12} tmp pins=()
  tmp=$(mktemp -d)
  for dist in "$@"; do
    pins+=("$(python -c "import importlib.metadata as m; print('$dist==' + m.version('$dist'))" 2>/dev/null || echo "$dist")")
  done
  python -m pip download -q --no-deps --only-binary=:all: --python-version "$py" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$tmp/wheels" "${pins[@]}" >&2 || return 1
  mkdir -p "$tmp/site"
  for wheel in "$tmp"/wheels/*.whl; do python -m zipfile -e "$wheel" "$tmp/site"; done
  rm -rf "$tmp"/site/warp/{examples,tests} "$tmp"/site/mujoco/{doc,testdata}
  # Executables the stages never start (ffmpeg for videos, W&B's service for logging): 210 MB unpacked.
  rm -rf "$tmp"/site/imageio_ffmpeg/binaries/* "$tmp"/site/wandb/bin
  mkdir -p "$out" && rm -rf "$out"/part*  # only this bundle's parts: .gpu/mjlab sits inside .gpu
  tar -C "$tmp/site" -cf - . | xz -9 -T0 | split -b "${part_mb}000000" -d -a 2 - "$tmp/$name.tar.xz."
  local n=0
  for part in "$tmp/$name".tar.xz.*; do n=$((n + 1)); mkdir -p "$out/part$n"; mv "$part" "$out/part$n/"; done
  rm -rf "$tmp"
  echo "$out/part$n"
}

pack() {
  local out=${DIR:-.gpu} arch=${ARCH:-90} last tmp
  # Only what the GPU stages import; the image is assumed to hold torch, numpy, yaml, tqdm, rich,
  # matplotlib, imageio, h5py, pyarrow, onnx(runtime/script), absl-py, pytest, scipy and cloudpickle.
  last=$(bundle site "$out" mujoco mujoco-core glfw PyOpenGL warp-lang mujoco-warp etils importlib_resources \
    gymnasium farama-notifications tensordict pyvers rsl-rl-lib GitPython gitdb smmap) || exit 1
  tmp=$(mktemp -d)
  WARP_CACHE_PATH="$tmp/kernels" python benchmarks/warp_prebuild.py --arch "$arch" || exit 1
  (cd "$tmp/kernels" && find . -name "*.sm${arch}.cubin" | while read -r f; do echo "$f"; echo "${f%.sm${arch}.cubin}.meta"; done \
    | tar -cf - -T - | xz -9 -T0) > "$last/warp-kernels.tar.xz"
  rm -rf "$tmp"
  du -sh "$out"/part*
}

pack_mjlab() {
  local out=${DIR:-.gpu}/mjlab dists
  # The distributions whose modules mjlab's training loads, less those of the first bundle and the image.
  mapfile -t dists < <(python - <<'PY'
import importlib.metadata as md, sys
from packaging.requirements import Requirement
import numpy, scipy, torch, yaml, tqdm, rich, matplotlib, imageio, h5py, onnx, absl  # the image's
image = {name.split(".")[0] for name in sys.modules}
import mujoco, warp, mujoco_warp, gymnasium, tensordict, rsl_rl, git  # the first bundle's
before = {name.split(".")[0] for name in sys.modules}
from mjlab.envs import ManagerBasedRlEnv
from mjlab.rl import MjlabOnPolicyRunner, RslRlVecEnvWrapper
from mjlab.tasks.registry import load_env_cfg, load_rl_cfg
load_env_cfg("Mjlab-Velocity-Flat-Unitree-Go1"), load_rl_cfg("Mjlab-Velocity-Flat-Unitree-Go1")
added = {name.split(".")[0] for name in sys.modules} - before
owners = md.packages_distributions()
# Namespace packages (google: protobuf, googleapis-common-protos...) say nothing about which part is there.
installed = {owners[m][0] for m in image if len(owners.get(m, [])) == 1}  # and what those need, one level down:
installed |= {Requirement(req).name for dist in list(installed) for req in (md.requires(dist) or []) if "extra ==" not in req}
present = installed | {owners[m][0] for m in before if len(owners.get(m, [])) == 1}
print("\n".join(sorted({dist for module in added for dist in owners.get(module, [])} - present)))
PY
)
  [ ${#dists[@]} -gt 0 ] || { echo "mjlab is not importable here: pip install mjlab"; exit 1; }
  echo "mjlab bundle: ${dists[*]}"
  bundle mjlab "$out" "${dists[@]}" > /dev/null || exit 1
  du -sh "$out"/part*
}

run() {
  local dirs=() stages=() t0; t0=$(date +%s)
  for arg in "$@"; do if [[ $arg == *:* ]]; then stages+=("$arg"); else dirs+=("$arg"); fi; done
  [ ${#stages[@]} -eq 0 ] && stages=(throughput:120 ppo:100 go1:270 tests:150 mjlab:150)
  [ ${#dirs[@]} -gt 0 ] || { echo "usage: bash benchmarks/gpu_offline.sh run DIR... [STAGE:SECONDS ...]" \
    "(DIRs: the folders pack made, e.g. .gpu/part1 .gpu/part2)"; return 2; }
  command -v nvidia-smi >/dev/null || { echo "no nvidia-smi here: run needs an NVIDIA GPU and its driver"; return 2; }
  local out=${OUT:-${dirs[-1]}/results} site=/tmp/robolearn-site bin=/tmp/robolearn-bin
  log() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
  mkdir -p "$out" "$site" "$bin" /tmp/robolearn-kernels
  local parts=() name  # each bundle's parts in part-number order, whichever folder each is in
  for name in site mjlab; do
    mapfile -t parts < <(for d in "${dirs[@]}"; do for p in "$d/$name".tar.xz.*; do
      [ -e "$p" ] && echo "$(basename "$p") $p"; done; done | sort | cut -d' ' -f2)
    if [ ${#parts[@]} -eq 0 ]; then  # mjlab's bundle is optional; the first is what every stage imports
      [ "$name" = site ] && { echo "no site.tar.xz.* parts in ${dirs[*]}: give the folders pack made"; return 3; }
      continue
    fi
    # Python's lzma and tarfile rather than xz(1), which an image may lack.
    cat "${parts[@]}" | timeout 120 python3 -c "import sys, tarfile; tarfile.open(fileobj=sys.stdin.buffer, mode='r|xz').extractall('$site')" \
      || { log "unpacking ${parts[*]} failed"; return 3; }
  done
  for d in "${dirs[@]}"; do
    [ -f "$d/warp-kernels.tar.xz" ] && timeout 60 python3 -c "import tarfile; tarfile.open('$d/warp-kernels.tar.xz').extractall('/tmp/robolearn-kernels')"
  done
  # gpu.sh calls `python`; the image may only have python3. A wrapper, not a symlink: a venv's
  # interpreter finds its packages from the path it was started by. rm first: writing through an
  # old symlink would overwrite the interpreter itself.
  local python3_path; python3_path=$(command -v python3)
  rm -f "$bin/python" && printf '#!/bin/sh\nexec %s "$@"\n' "$python3_path" > "$bin/python" && chmod +x "$bin/python"
  export PATH=$bin:$PATH PYTHONPATH=$site:$PWD WARP_CACHE_PATH=/tmp/robolearn-kernels GIT_PYTHON_REFRESH=quiet PYTHONUNBUFFERED=1
  export PPO_ITERATIONS=${PPO_ITERATIONS:-12} GO1_MINUTES=${GO1_MINUTES:-3}
  # mjlab asks imageio-ffmpeg for ffmpeg when it is imported; the bundle leaves that binary out and
  # nothing here records video, so a system ffmpeg or a stand-in that is never started.
  export IMAGEIO_FFMPEG_EXE=${IMAGEIO_FFMPEG_EXE:-$(command -v ffmpeg || echo /bin/false)}
  # rsl_rl imports wandb when it is imported and uses it only for a W&B logger, which gpu.sh never
  # configures: where neither the image nor the mjlab bundle has it, an empty module stands in.
  timeout 60 python -c "import wandb" 2>/dev/null || { mkdir -p "$site/wandb" \
    && echo '"""Stand-in: rsl_rl imports wandb; nothing here logs to W&B."""' > "$site/wandb/__init__.py"; }
  log "unpacked"
  timeout 120 python -c "import torch, warp, mujoco, mujoco_warp, gymnasium, tensordict, rsl_rl; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'warp', warp.__version__, 'mujoco', mujoco.__version__)" \
    || { log "imports failed"; return 4; }
  # rsl_rl's runners import tensorboard, which the bundle assumes the image has (session 30's did).
  timeout 60 python -c "import rsl_rl.runners" \
    || log "rsl_rl.runners does not import here (above; tensorboard missing?): the ppo and mjlab stages will fail"
  touch /tmp/robolearn-start
  local failed=()
  for spec in "${stages[@]}"; do
    log "stage ${spec%%:*} (limit ${spec##*:} s)"
    timeout --kill-after=5 "${spec##*:}" bash benchmarks/gpu.sh "${spec%%:*}" 2>&1 | grep -v " (cached)$"
    local rc=${PIPESTATUS[0]}
    log "stage ${spec%%:*} rc=$rc"
    [ "$rc" -eq 0 ] || failed+=("${spec%%:*}")
  done
  for f in benchmarks/results/*.md; do  # the tables these stages wrote
    [ "$f" -nt /tmp/robolearn-start ] && cp "$f" "$out/$(basename "${f%.md}")_gpu.md"
  done
  local go1; go1=$(ls -d benchmarks/runs/go1_gpu/*/ 2>/dev/null | tail -1)
  [ -n "$go1" ] && tar -czf "$out/go1_run.tgz" --exclude=checkpoints -C "$go1" .
  log "done: $(ls "$out" | tr '\n' ' ')"
  [ ${#failed[@]} -eq 0 ] || { log "failed stages: ${failed[*]} (each one's rc above; 124: past its limit)"; return 1; }
}

case $mode in
  pack) pack ;;
  pack-mjlab) pack_mjlab ;;
  run) run "$@" ;;
  *) echo "usage: bash benchmarks/gpu_offline.sh pack | pack-mjlab | run DIR... [STAGE:SECONDS ...]"; exit 2 ;;
esac
