"""``LiberoSim``: one task's LIBERO env, with lazy camera rendering, the fast step loop and exact snapshots.

The reset protocol it implements is described in :mod:`.env`; the step loop in
:mod:`.physics`; the scene it shares with the process's other envs of its task in
:mod:`.scenes`.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np

from .actions import SETTLE_ACTION
from .physics import FastStep, fast_step_refusal, restore, snapshot
from .scenes import Scene, building_dense, scene_cache
from .suites import TaskInfo

# Imports inside functions: LIBERO (robosuite, MuJoCo) and PyOpenGL load in the shard only, where the env is
# built and rendered.

__all__ = ["LiberoSim"]


def _log(message: str) -> None:
    # The shard's stderr goes to its log file, whose tail the manager shows on failures.
    sys.stderr.write(f"envfleet-libero: {message}\n")
    sys.stderr.flush()


class LiberoSim:
    """One task's LIBERO ``OffScreenRenderEnv`` with lazy camera rendering and exact snapshots.

    :param task: the task to build.
    :param cameras: camera names; their images are observations ``{name}_image``.
    :param height, width: image size.
    :param physics: ``fast``: :class:`.physics.FastStep` where it is identical to LIBERO's
        loop (LIBERO's own ``env.step`` otherwise, logged); ``libero``: LIBERO's ``env.step``.
    """

    def __init__(self, task: TaskInfo, cameras: list[str], height: int, width: int, physics: str = "fast") -> None:
        from libero.libero.envs import OffScreenRenderEnv
        from libero.libero.envs.bddl_utils import get_problem_info

        self.task = task
        self.cameras = list(cameras)
        self.scenes = scene_cache()
        t0 = time.perf_counter()
        compiles = self.scenes.compiles
        _log(f"building task {task.index} ({task.name})")
        # LIBERO's own wrapper and arguments; only the task class is its dense variant, which
        # takes the compiled model and render context from the process's scene cache.
        plus = task.plus
        view = None if plus is None else plus.camera_view
        with building_dense(get_problem_info(task.bddl_file)["problem_name"], self.scenes, view, task.assets):
            # ignore_done: robosuite would refuse to step past its horizon (1000 steps); episode
            # length is envfleet's business (max_episode_steps). It changes nothing else.
            self.env = OffScreenRenderEnv(
                bddl_file_name=task.bddl_file,
                camera_names=self.cameras,
                camera_heights=int(height),
                camera_widths=int(width),
                ignore_done=True,
            )
        self.renv = self.env.env  # the robosuite env inside LIBERO's wrapper
        #: LIBERO-plus's robot start configuration (0: LIBERO's), :mod:`.plus.robot`.
        self.robot_start = 0 if plus is None else int(plus.robot_start)
        if self.robot_start:
            from .plus.robot import start_qpos

            # The robot is built with the configuration as its start, as LIBERO-plus's robot class has it:
            # robosuite then takes it as the controller's rest pose (OSC's nullspace target) at every reset.
            qpos = start_qpos(self.robot_start)
            self.renv.robot_configs[0]["initial_qpos"] = qpos
            self.renv.robots[0].init_qpos = qpos
        # The constructor placed the fixtures from an unseeded draw; envs already on this
        # scene must keep seeing the seeded pose.
        if self.scene.fixture_pose is not None:
            self.scene.set_fixture_pose()
        self.skip_render = False
        self._hard_reset_done = False
        self._closed = False
        how = "compiled" if self.scenes.compiles > compiles else "on the process's cached scene"
        _log(f"built task {task.index} ({task.name}), {how}, in {time.perf_counter() - t0:.1f} s")
        #: Why this env runs LIBERO's own step loop although ``physics: fast`` asked otherwise (None: it does not).
        self.fast_refusal = fast_step_refusal(self.renv) if physics == "fast" else None
        # What env.py reads of a step: the 8-dim state's three observables and the cameras' images.
        keys = ("robot0_eef_pos", "robot0_eef_quat", "robot0_gripper_qpos", *(f"{c}_image" for c in self.cameras))
        self._fast = FastStep(self.renv, keys) if physics == "fast" and self.fast_refusal is None else None
        if self.fast_refusal is not None:
            _log(f"task {task.index}: LIBERO's own step loop, not the fast one: {self.fast_refusal}")
        #: Why the fast loop runs robosuite's controller, not the lean sub-step (:mod:`.lean`; None: it does not).
        self.lean_refusal = None if self._fast is None else self._fast.lean_refusal
        if self.lean_refusal is not None:
            _log(f"task {task.index}: the fast step loop with robosuite's controller, not the lean sub-step: {self.lean_refusal}")

    @property
    def scene(self) -> Scene:
        """The shared model and render context this env runs on."""
        scene = self.renv._envfleet_scene
        assert scene is not None, "the env is closed"
        return scene  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ rendering
    def gl_strings(self) -> dict[str, str]:
        """GL vendor, renderer and version of this simulator's offscreen context (empty before its first render)."""
        ctx = getattr(self.renv.sim, "_render_context_offscreen", None)
        if ctx is None:
            return {}
        ctx.gl_ctx.make_current()
        from OpenGL import GL

        names = (("gl_vendor", GL.GL_VENDOR), ("gl_renderer", GL.GL_RENDERER), ("gl_version", GL.GL_VERSION))
        return {key: GL.glGetString(enum).decode(errors="replace") for key, enum in names}

    def _install_render_switch(self) -> None:
        """Wrap every camera observable's sensor so that ``skip_render`` can skip ``sim.render``.

        Only the sensor function is swapped: the observables' sampling clocks
        (``_time_since_last_sample``, ``_sampled``) run as always, so a camera rendered
        at a given sub-step sees exactly the MjData it would have seen with rendering on.
        ``Observable.set_enabled()`` would reset those clocks and shift the sample
        (robosuite samples at sub-step 24 of 25). A hard reset re-installs robosuite's
        own sensors, so this runs after every reset.
        """
        for ob in self.renv._observables.values():
            if ob.modality != "image" or getattr(ob._sensor, "_envfleet_inner", None) is not None:
                continue
            inner = ob._sensor

            def wrapped(obs_cache: dict[str, Any], _inner: Any = inner, _ob: Any = ob) -> Any:
                if self.skip_render:
                    return _ob._current_observed_value  # stale; never handed out
                return _inner(obs_cache)

            wrapped.__modality__ = inner.__modality__  # type: ignore[attr-defined]
            wrapped._envfleet_inner = inner  # type: ignore[attr-defined]
            # Assigned directly: set_sensor() would call (render) it once to check it.
            ob._sensor = wrapped

    # ------------------------------------------------------------------ protocol
    def reset(
        self,
        init_state: np.ndarray,
        seed: int,
        settle_steps: int,
        render_all: bool,
        render_final: bool = True,
        settle_action: np.ndarray = SETTLE_ACTION,
    ) -> dict[str, Any]:
        """Seed, reset, load ``init_state``, settle; return the observation dict after settling.

        ``render_all``: render at every step, as plain LIBERO does; otherwise only the
        returned observation is rendered, and not even that with ``render_final=False``.
        """
        self.env.seed(int(seed))
        if not self._hard_reset_done:
            self._hard_reset()
        else:
            self.skip_render = not render_all
            try:
                self._soft_reset()
            finally:
                self.skip_render = False
        self._install_render_switch()
        if self.robot_start:
            from .plus.robot import offset_init_state

            # LIBERO's initial state holds the arm's joints too: moved by the start's offset, the robot start survives it.
            init_state = offset_init_state(init_state, self.renv.robots[0]._ref_joint_pos_indexes, self.robot_start)
        self.skip_render = not render_all and (settle_steps > 0 or not render_final)
        try:
            obs = self.env.set_init_state(init_state)
        finally:
            self.skip_render = False
        for k in range(settle_steps):
            obs = self.step(settle_action, render=render_all or (render_final and k == settle_steps - 1))
        return obs

    def _hard_reset(self) -> None:
        # Only ever the first reset after the build: see the module doc on repeated hard resets.
        # Its renders (robosuite's shape checks, a forced observation) are never handed out.
        self.renv.hard_reset = True
        try:
            with self.scenes.quiet_renders():
                self.env.reset()
        except BaseException:
            # The scene's other envs must not be left with a half-placed model.
            scene = self.renv._envfleet_scene
            if scene is not None and scene.fixture_pose is not None:
                scene.set_fixture_pose()
            raise
        # What the seeded hard reset did to the model (fixtures are placed by writing
        # body_pos / body_quat): the scene keeps it for soft resets, and checks every env agrees.
        self.scene.record_fixture_pose(self.task.name)
        self._hard_reset_done = True

    def _soft_reset(self) -> None:
        """robosuite's reset with ``hard_reset=False``, completed to equal a hard reset.

        A soft reset resets MjData (``mj_resetData``), reloads the controllers and re-draws
        the placements (from the RNG seeded just before), but keeps the compiled model and the
        Python objects built with it. Two things then differ from a hard reset: the gripper's
        accumulated command (``current_action``, which a hard reset starts again at 0 with a
        new gripper object; it carries over otherwise and changes the first steps' physics),
        and the fixture poses, which a soft reset re-draws in place: they are set back to the
        seeded hard reset's poses so that they can never drift. Verified bit-identical to a
        freshly built, hard-reset env (images and full MuJoCo state) across the five suites.
        """
        renv = self.renv
        renv.hard_reset = False
        try:
            self.env.reset()
        finally:
            renv.hard_reset = True
        self.scene.set_fixture_pose()
        for robot in renv.robots:
            gripper = getattr(robot, "gripper", None)
            if gripper is not None and hasattr(gripper, "current_action"):
                gripper.current_action = np.zeros_like(gripper.current_action)

    def step(self, action: np.ndarray, render: bool) -> dict[str, Any]:
        """One ``env.step``; with ``render=False`` the image entries of the result are stale."""
        self.skip_render = not render
        try:
            if self._fast is not None:
                return self._fast(action)
            obs, _reward, _done, _info = self.env.step(action)
        finally:
            self.skip_render = False
        return obs  # type: ignore[no-any-return]

    def check_success(self) -> bool:
        """LIBERO's goal predicate for the task."""
        return bool(self.env.check_success())

    # ------------------------------------------------------------------ snapshots
    def snapshot(self) -> dict[str, Any]:
        """Everything the next ``step`` depends on, as plain arrays (picklable): :func:`.physics.snapshot`."""
        return snapshot(self.renv)

    def restore(self, snap: dict[str, Any]) -> None:
        """Return to a :meth:`snapshot` taken on this task (in this or another process)."""
        restore(self.renv, snap)

    def close(self) -> None:
        """Free the env and hand its scene back to the cache. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        try:
            self.env.close()
        except Exception as exc:  # a GL context that is already gone must not mask the caller's work
            _log(f"closing task {self.task.index}: {type(exc).__name__}: {exc}")
