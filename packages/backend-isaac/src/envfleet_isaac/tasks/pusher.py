"""``Envfleet-Pusher-v0``: push a red cube onto a green goal, built from primitive shapes only.

Per env: a grey static slab, a red 8 cm cube (0.2 kg), a blue cylinder "pusher"
(radius 4 cm) driven by planar velocity actions, and a green goal disc (a kinematic
body without collisions, so that it is part of ``scene.get_state()``). Two RGB
cameras: ``table_cam`` looks at the slab from the side, ``pusher_cam`` rides on the
pusher looking forward. Newton (MuJoCo-Warp) physics and the Newton Warp renderer, so
the task runs kit-less with Isaac Lab 3.x, on a CPU too.

- Actions ``[N, 2]`` in ``[-1, 1]``: the pusher's x/y velocity as a fraction of ``max_speed``.
- Observations ``{"policy": [N, 8]}``: pusher xy, cube xy, goal xy, goal - cube (env frame).
- Success (the ``terminated`` flag): the cube's centre is on the goal disc.
- Reset: cube, goal and pusher positions uniform in the workspace, with minimum distances.

Needs Isaac Lab 3.x (Newton physics config and renderer).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import isaaclab.sim as sim_utils
import torch
from isaaclab.assets import AssetBaseCfg, RigidObject, RigidObjectCfg
from isaaclab.envs import DirectRLEnv, DirectRLEnvCfg
from isaaclab.scene import InteractiveSceneCfg
from isaaclab.sensors import Camera, CameraCfg
from isaaclab.sim import SimulationCfg
from isaaclab.utils import configclass
from isaaclab_newton.physics import MJWarpSolverCfg, NewtonCfg
from isaaclab_newton.renderers import NewtonWarpRendererCfg

__all__ = ["PusherEnv", "PusherEnvCfg", "PusherSceneCfg"]

# Geometry, in metres.
GROUND_HALF = 0.6  # the slab is 1.2 m x 1.2 m per env
WORKSPACE = 0.35  # cube, goal and pusher start in [-WORKSPACE, WORKSPACE]^2
PUSHER_LIMIT = WORKSPACE + 0.1  # the pusher's centre never leaves [-limit, limit]^2, so the cube stays on the slab
CUBE_SIZE = 0.08
PUSHER_RADIUS = 0.04
PUSHER_HEIGHT = 0.10
GOAL_RADIUS = 0.08
CAM_RES = 64

_PINHOLE = sim_utils.PinholeCameraCfg(focal_length=18.0, focus_distance=400.0, horizontal_aperture=20.955, clipping_range=(0.01, 20.0))
# A longer lens for the table camera (about 47 degrees of view): the workspace fills the image.
_TABLE_LENS = sim_utils.PinholeCameraCfg(focal_length=24.0, focus_distance=400.0, horizontal_aperture=20.955, clipping_range=(0.01, 20.0))


def _pitch_down(deg: float) -> tuple[float, float, float, float]:
    """A rotation about +Y as an (x, y, z, w) quaternion; in the "world" camera convention it tilts the view down."""
    half = math.radians(deg) / 2
    return (0.0, math.sin(half), 0.0, math.cos(half))


@configclass
class PusherSceneCfg(InteractiveSceneCfg):
    """The slab, cube, pusher, goal, two cameras and a light."""

    # A collider without a rigid body: a static shape in Newton (the stock ground plane is a download).
    ground = AssetBaseCfg(
        prim_path="{ENV_REGEX_NS}/Ground",
        spawn=sim_utils.CuboidCfg(
            size=(2 * GROUND_HALF, 2 * GROUND_HALF, 0.1),
            collision_props=sim_utils.UsdPhysicsCollisionCfg(),
            visual_material=sim_utils.PreviewSurfaceCfg(diffuse_color=(0.55, 0.55, 0.55)),
        ),
        init_state=AssetBaseCfg.InitialStateCfg(pos=(0.0, 0.0, -0.05)),
    )
    cube = RigidObjectCfg(
        prim_path="{ENV_REGEX_NS}/Cube",
        spawn=sim_utils.CuboidCfg(
            size=(CUBE_SIZE, CUBE_SIZE, CUBE_SIZE),
            rigid_props=sim_utils.UsdPhysicsRigidBodyCfg(),
            mass_props=sim_utils.MassCfg(mass=0.2),
            collision_props=sim_utils.UsdPhysicsCollisionCfg(),
            visual_material=sim_utils.PreviewSurfaceCfg(diffuse_color=(0.85, 0.1, 0.1)),
        ),
        init_state=RigidObjectCfg.InitialStateCfg(pos=(0.15, 0.0, CUBE_SIZE / 2)),
    )
    # A dynamic body whose planar velocity and upright pose are rewritten every physics step
    # (velocity alone lets contact torques tip the cylinder over).
    pusher = RigidObjectCfg(
        prim_path="{ENV_REGEX_NS}/Pusher",
        spawn=sim_utils.CylinderCfg(
            radius=PUSHER_RADIUS,
            height=PUSHER_HEIGHT,
            rigid_props=sim_utils.UsdPhysicsRigidBodyCfg(),
            mass_props=sim_utils.MassCfg(mass=2.0),
            collision_props=sim_utils.UsdPhysicsCollisionCfg(),
            visual_material=sim_utils.PreviewSurfaceCfg(diffuse_color=(0.1, 0.2, 0.9)),
        ),
        init_state=RigidObjectCfg.InitialStateCfg(pos=(-0.15, 0.0, PUSHER_HEIGHT / 2)),
    )
    # Kinematic and without collisions: posed per env, and saved/restored with the scene state.
    goal = RigidObjectCfg(
        prim_path="{ENV_REGEX_NS}/Goal",
        spawn=sim_utils.CylinderCfg(
            radius=GOAL_RADIUS,
            height=0.004,
            rigid_props=sim_utils.UsdPhysicsRigidBodyCfg(kinematic_enabled=True),
            mass_props=sim_utils.MassCfg(mass=1.0),
            collision_props=sim_utils.UsdPhysicsCollisionCfg(collision_enabled=False),
            visual_material=sim_utils.PreviewSurfaceCfg(diffuse_color=(0.1, 0.8, 0.1)),
        ),
        init_state=RigidObjectCfg.InitialStateCfg(pos=(0.0, 0.2, 0.002)),
    )
    # Fixed camera behind the slab looking down at the workspace ("world" convention: +X forward, +Z up).
    table_cam = CameraCfg(
        prim_path="{ENV_REGEX_NS}/TableCam",
        offset=CameraCfg.OffsetCfg(pos=(-0.7, 0.0, 0.8), rot=_pitch_down(53.0), convention="world"),
        data_types=["rgb"],
        width=CAM_RES,
        height=CAM_RES,
        spawn=_TABLE_LENS,
        renderer_cfg=NewtonWarpRendererCfg(),  # the default renderer is Kit's RTX, which needs Isaac Sim
    )
    # Camera riding on the pusher: a child prim of the pusher body, looking +X and slightly down.
    pusher_cam = CameraCfg(
        prim_path="{ENV_REGEX_NS}/Pusher/Cam",
        offset=CameraCfg.OffsetCfg(pos=(PUSHER_RADIUS + 0.01, 0.0, 0.03), rot=_pitch_down(30.0), convention="world"),
        data_types=["rgb"],
        width=CAM_RES,
        height=CAM_RES,
        update_latest_camera_pose=True,
        spawn=_PINHOLE,
        renderer_cfg=NewtonWarpRendererCfg(),
    )
    light = AssetBaseCfg(prim_path="/World/Light", spawn=sim_utils.DomeLightCfg(intensity=2000.0, color=(0.8, 0.8, 0.8)))


@configclass
class PusherEnvCfg(DirectRLEnvCfg):
    """Config of :class:`PusherEnv`: a 0.04 s control step of two 0.02 s physics steps, 8 s episodes."""

    decimation: int = 2
    episode_length_s: float = 8.0
    action_space: int = 2
    observation_space: int = 8
    state_space: int = 0
    # Two 20 ms steps are as stable here as four 10 ms ones, at half the cost (it is launch-bound on CPU).
    sim: SimulationCfg = SimulationCfg(
        device="cpu",
        dt=0.02,
        render_interval=2,
        physics=NewtonCfg(solver_cfg=MJWarpSolverCfg(njmax=100, nconmax=50), use_cuda_graph=False),
    )
    scene: PusherSceneCfg = PusherSceneCfg(num_envs=4, env_spacing=1.5, replicate_physics=True)
    max_speed: float = 0.5  # pusher speed in m/s at |action| = 1
    task_description: str = "push the red cube to the green goal"


class PusherEnv(DirectRLEnv):
    """The pusher task. See the module doc."""

    cfg: PusherEnvCfg

    def __init__(self, cfg: PusherEnvCfg, render_mode: str | None = None, **kwargs: Any) -> None:
        super().__init__(cfg, render_mode, **kwargs)
        self.cube: RigidObject = self.scene["cube"]
        self.pusher: RigidObject = self.scene["pusher"]
        self.goal: RigidObject = self.scene["goal"]
        # Cameras are optional: set cfg.scene.table_cam / pusher_cam to None for state-only runs.
        self.table_cam: Camera | None = self.scene.sensors.get("table_cam")
        self.pusher_cam: Camera | None = self.scene.sensors.get("pusher_cam")
        self._vel_cmd = torch.zeros(self.num_envs, 6, device=self.device)
        self._upright = torch.tensor([0.0, 0.0, 0.0, 1.0], device=self.device)

    # ------------------------------------------------------------------ helpers
    def _local_xy(self, asset: RigidObject) -> torch.Tensor:
        return asset.data.root_pos_w.torch[:, :2] - self.scene.env_origins[:, :2]

    def success(self) -> torch.Tensor:
        """Bool ``[N]``: the cube's centre lies on the goal disc."""
        return torch.linalg.norm(self._local_xy(self.cube) - self._local_xy(self.goal), dim=-1) < GOAL_RADIUS

    # ------------------------------------------------------------------ DirectRLEnv hooks
    def _pre_physics_step(self, actions: torch.Tensor) -> None:
        self._vel_cmd.zero_()
        self._vel_cmd[:, :2] = actions.clamp(-1.0, 1.0) * self.cfg.max_speed

    def _apply_action(self) -> None:
        v = self._vel_cmd.clone()
        # Keep the pusher inside its square: drop the velocity components that push it out.
        xy = self._local_xy(self.pusher)
        outward = ((xy > PUSHER_LIMIT) & (v[:, :2] > 0)) | ((xy < -PUSHER_LIMIT) & (v[:, :2] < 0))
        v[:, :2] = torch.where(outward, 0.0, v[:, :2])
        pose = self.pusher.data.root_pose_w.torch.clone()
        pose[:, 2] = PUSHER_HEIGHT / 2
        pose[:, 3:7] = self._upright
        self.pusher.write_root_pose_to_sim_index(root_pose=pose)
        self.pusher.write_root_velocity_to_sim_index(root_velocity=v)

    def _get_observations(self) -> dict[str, torch.Tensor]:
        p, c, g = self._local_xy(self.pusher), self._local_xy(self.cube), self._local_xy(self.goal)
        return {"policy": torch.cat([p, c, g, g - c], dim=-1)}

    def _get_rewards(self) -> torch.Tensor:
        # Dense shaping for Isaac Lab's own RL loops; envfleet rewards success only (reward_coef).
        c, g, p = self._local_xy(self.cube), self._local_xy(self.goal), self._local_xy(self.pusher)
        return -torch.linalg.norm(c - g, dim=-1) - 0.1 * torch.linalg.norm(p - c, dim=-1) + self.success().float()

    def _get_dones(self) -> tuple[torch.Tensor, torch.Tensor]:
        time_out = self.episode_length_buf >= self.max_episode_length - 1
        return self.success(), time_out

    def _reset_idx(self, env_ids: Sequence[int] | torch.Tensor | None) -> None:
        if env_ids is None:
            env_ids = torch.arange(self.num_envs, device=self.device, dtype=torch.int32)
        ids = torch.as_tensor(env_ids, device=self.device).to(torch.int32)
        super()._reset_idx(ids)
        n = len(ids)
        origins = self.scene.env_origins[ids.long()]

        def uniform() -> torch.Tensor:
            return (torch.rand(n, 2, device=self.device) * 2 - 1) * WORKSPACE

        cube_xy, goal_xy, push_xy = uniform(), uniform(), uniform()
        # Resample goals and pushers that start too close to the cube (a few rounds suffice).
        for _ in range(10):
            bad = torch.linalg.norm(goal_xy - cube_xy, dim=-1) < 2 * GOAL_RADIUS
            bad |= torch.linalg.norm(push_xy - cube_xy, dim=-1) < 2 * (PUSHER_RADIUS + CUBE_SIZE)
            if not bool(bad.any()):
                break
            k = int(bad.sum())
            goal_xy[bad] = (torch.rand(k, 2, device=self.device) * 2 - 1) * WORKSPACE
            push_xy[bad] = (torch.rand(k, 2, device=self.device) * 2 - 1) * WORKSPACE

        def pose(xy: torch.Tensor, z: float) -> torch.Tensor:
            p = torch.zeros(n, 7, device=self.device)
            p[:, :2] = xy + origins[:, :2]
            p[:, 2] = z
            p[:, 6] = 1.0  # identity quaternion, (x, y, z, w)
            return p

        zeros = torch.zeros(n, 6, device=self.device)
        for asset, xy, z in ((self.cube, cube_xy, CUBE_SIZE / 2), (self.pusher, push_xy, PUSHER_HEIGHT / 2), (self.goal, goal_xy, 0.002)):
            asset.write_root_pose_to_sim_index(root_pose=pose(xy, z), env_ids=ids)
            asset.write_root_velocity_to_sim_index(root_velocity=zeros, env_ids=ids)
