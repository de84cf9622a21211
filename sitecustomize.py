import sys
sys.modules["warp"] = None; sys.modules["mujoco_warp"] = None
