"""LIBERO's ``env.step`` with one MuJoCo forward pass per sub-step, and exact snapshots.

One LIBERO ``env.step`` runs 25 MuJoCo sub-steps (control at 20 Hz, physics at
500 Hz). For each, robosuite's loop calls ``sim.forward()``, then the OSC controller,
whose update calls ``sim.forward()`` again, then ``sim.step()`` (``mj_step``), which
computes the forward dynamics a third time before integrating. MuJoCo documents the
split for exactly this case: ``mj_step1`` computes the position and velocity stages,
the controller sets ``ctrl`` from them, ``mj_step2`` computes actuation, acceleration
and constraints and integrates. :class:`FastStep` runs that loop:

- sub-step 0 (robosuite's "policy step") starts with ``mj_forward``, as robosuite's
  loop does: the step reads the eef force-torque sensors, which MuJoCo computes in the
  acceleration stage, before the new controls exist;
- every other sub-step starts with ``mj_step1``;
- then, on the policy step, the env's own ``_pre_action`` (robosuite's controller and
  gripper code, unchanged) with ``sim.forward`` made a no-op: position and velocity are
  already computed, and the controller reads nothing else; on the other sub-steps the
  same arithmetic through :class:`.lean.OscSubstep` (robosuite's ``_pre_action`` where
  :func:`.lean.lean_refusal` names a reason);
- then ``mj_step2`` and the observables' update: robosuite's for the observables the
  step returns, the others' clocks carried (:class:`.lean.ObservableClocks`), or the
  env's own ``_update_observables`` where the clocks cannot be carried.

Why it is identical: ``mj_forward`` is ``mj_step1``'s stages followed by
``mj_step2``'s without the integration, and ``mj_step`` is ``mj_forward`` followed by
the integration. The position and velocity stages read ``qpos``/``qvel`` (and time),
never ``ctrl``; robosuite's extra forward passes recompute the same values from the
same inputs, and the acceleration stage of the passes before the controls change is
overwritten by ``mj_step2`` before anything reads it (MuJoCo's warm start is saved by
the integration only). The split does not implement RK4 (MuJoCo's documentation of
``mj_step1``/``mj_step2``), so the fast loop runs for the Euler, implicit and
implicitfast integrators only (LIBERO's scenes use Euler); for anything else, or a
task class whose ``step`` is not LIBERO's, the env runs LIBERO's own ``env.step`` and
says so (:func:`fast_step_refusal`).

After the sub-steps the rest of LIBERO's ``step`` runs as LIBERO's code does, except
two evaluations that nobody reads: the reward (LIBERO's sparse reward is its success
predicate, evaluated before ``_post_process`` and never used by envfleet) and the
``done`` of ``BDDLBaseDomain.step`` (the same predicate again). The env evaluates the
predicate once, through LIBERO's ``check_success`` after the step, where LIBERO's
``done`` is evaluated; predicates only read the simulation.

Snapshots (:func:`snapshot`, :func:`restore`) hold everything the next step depends
on, so that a step can be replayed (a success inside a chunk, rendered) or moved to
another process (offload).
"""

from __future__ import annotations

from typing import Any

import numpy as np

# Imports inside functions: robosuite, LIBERO and MuJoCo load in the shard only, where the step loop runs.

__all__ = ["FAST_INTEGRATORS", "FastStep", "fast_step_refusal", "snapshot", "restore"]

#: MuJoCo integrators for which ``mj_step1`` + ``mj_step2`` equal ``mj_step``.
FAST_INTEGRATORS = ("mjINT_EULER", "mjINT_IMPLICIT", "mjINT_IMPLICITFAST")


def _noop() -> None:
    pass


def _integrator_name(model: Any) -> str:
    import mujoco

    return str(mujoco.mjtIntegrator(int(model.opt.integrator)).name)


def fast_step_refusal(renv: Any) -> str | None:
    """Why :class:`FastStep` cannot run the robosuite env ``renv`` (``None`` when it can).

    It mirrors ``BDDLBaseDomain.step`` and robosuite's ``MujocoEnv.step``/``_post_action``;
    a task class that overrides one of them, a viewer, or an integrator outside
    :data:`FAST_INTEGRATORS` keeps LIBERO's own loop.
    """
    from libero.libero.envs.bddl_base_domain import BDDLBaseDomain
    from robosuite.environments.base import MujocoEnv

    integrator = _integrator_name(renv.sim.model._model)
    if integrator not in FAST_INTEGRATORS:
        return f"the model's integrator is {integrator}; mj_step1/mj_step2 equal mj_step only for {', '.join(FAST_INTEGRATORS)}"
    cls = type(renv)
    mirrored = (
        ("step", BDDLBaseDomain.step),
        ("_post_action", BDDLBaseDomain._post_action),
        ("reward", BDDLBaseDomain.reward),
    )
    for name, expected in mirrored:
        if getattr(cls, name) is not expected:
            return f"{cls.__name__}.{name} is not LIBERO's BDDLBaseDomain.{name}"
    if super(BDDLBaseDomain, renv).step.__func__ is not MujocoEnv.step:
        return f"{cls.__name__} steps through another loop than robosuite's MujocoEnv.step"
    if renv.viewer is not None:
        return "the env has an on-screen viewer"
    return None


class FastStep:
    """LIBERO's ``env.step`` for one robosuite env, one MuJoCo forward pass per sub-step.

    :param renv: the robosuite env inside LIBERO's ``OffScreenRenderEnv`` (``env.env``);
        :func:`fast_step_refusal` must have accepted it.
    :param keys: the observations the caller reads: a step returns those, each the
        observable's own value, as robosuite's ``_get_observations`` holds it, without
        building the rest (every observable and the per-modality concatenations, a pure
        read). ``None``, or a key that is not an enabled, active observable: all of them.
    """

    def __init__(self, renv: Any, keys: tuple[str, ...] | None = None, lean: bool = True) -> None:
        from .lean import ObservableClocks, OscSubstep, lean_refusal

        self.renv = renv
        observables = renv._observables
        ok = keys is not None and all(k in observables and observables[k].is_enabled() and observables[k].is_active() for k in keys)
        self.keys = keys if ok else None
        #: Why the sub-steps run robosuite's controller rather than :class:`.lean.OscSubstep` (None: they do not).
        self.lean_refusal = lean_refusal(renv) if lean else "lean sub-steps not asked for"
        self._osc = OscSubstep(renv) if self.lean_refusal is None else None
        self._clocks = ObservableClocks(renv, self.keys) if self._osc is not None and self.keys is not None else None

    def __call__(self, action: np.ndarray) -> dict[str, Any]:
        """One ``env.step``; returns robosuite's observations (LIBERO's ``check_success`` then reads the result)."""
        import mujoco

        renv = self.renv
        if renv.action_dim == 4 and len(action) > 4:  # as BDDLBaseDomain.step: OSC_POSITION takes xyz + gripper
            action = np.concatenate((np.asarray(action)[:3], np.asarray(action)[-1:]), axis=-1)
        # From here as robosuite's MujocoEnv.step.
        if renv.done:
            raise ValueError("executing action in terminated episode")
        renv.timestep += 1
        sim = renv.sim
        model, data = sim.model._model, sim.data._data
        osc, clocks = self._osc, self._clocks
        if clocks is not None and not clocks.begin():
            clocks = None
        timestep, obs_cache = renv.model_timestep, renv._obs_cache
        if osc is not None:
            osc.begin(action)
        policy_step = True
        for _ in range(int(renv.control_timestep / renv.model_timestep)):
            if policy_step:
                mujoco.mj_forward(model, data)
            else:
                mujoco.mj_step1(model, data)
            if osc is not None and not policy_step:
                osc()
            else:
                # An instance attribute shadows MjSim.forward for this env only, for the controller's call.
                sim.forward = _noop
                try:
                    renv._pre_action(action, policy_step)
                finally:
                    del sim.forward
            mujoco.mj_step2(model, data)
            if clocks is not None:
                clocks.update(timestep, obs_cache)
            else:
                renv._update_observables()
            policy_step = False
        if clocks is not None:
            clocks.end()
        renv.cur_time += renv.control_timestep
        # robosuite's _post_action without the reward, then LIBERO's _post_process.
        renv.done = (renv.timestep >= renv.horizon) and not renv.ignore_done
        renv._post_process()
        if self.keys is None:
            return renv._get_observations()  # type: ignore[no-any-return]
        observables = renv._observables
        return {key: observables[key].obs for key in self.keys}


def _plain_attrs(obj: Any) -> dict[str, Any]:
    """Copies of an object's array and number attributes (its numeric state)."""
    out: dict[str, Any] = {}
    for key, value in vars(obj).items():
        if isinstance(value, np.ndarray) and value.dtype != object:
            out[key] = value.copy()
        elif isinstance(value, (bool, int, float, np.number, np.bool_)):
            out[key] = value
    return out


def snapshot(renv: Any) -> dict[str, Any]:
    """Everything the next ``step`` of robosuite env ``renv`` depends on, as plain arrays (picklable).

    MuJoCo's full integration state (``mjSTATE_INTEGRATION``: time, qpos, qvel, act,
    warm start, controls, applied forces, mocap, ...; the flattened ``get_state()``
    has only time, qpos, qvel), the controllers' and grippers' numeric attributes
    (OSC keeps its orientation goal across steps; the gripper accumulates its command),
    the observables' sampling clocks and last values, and robosuite's step counters.
    The compiled model is not included: a rebuild with the same seed reproduces it.
    """
    import mujoco

    model, data = renv.sim.model._model, renv.sim.data._data
    what = mujoco.mjtState.mjSTATE_INTEGRATION
    state = np.empty(mujoco.mj_stateSize(model, what), dtype=np.float64)
    mujoco.mj_getState(model, data, state, what)
    return {
        "mj_state": state,
        "robots": [
            {"controller": _plain_attrs(r.controller), "gripper": _plain_attrs(r.gripper) if getattr(r, "gripper", None) else {}}
            for r in renv.robots
        ],
        "observables": {
            name: (ob._time_since_last_sample, ob._sampled, ob._current_delay, np.array(ob._current_observed_value, copy=True))
            for name, ob in renv._observables.items()
        },
        "obs_cache": {k: np.array(v, copy=True) for k, v in renv._obs_cache.items()},
        "counters": (renv.timestep, renv.cur_time, renv.done),
    }


def restore(renv: Any, snap: dict[str, Any]) -> None:
    """Return robosuite env ``renv`` to a :func:`snapshot` taken on its task (in this or another process)."""
    import mujoco

    model, data = renv.sim.model._model, renv.sim.data._data
    mujoco.mj_setState(model, data, np.asarray(snap["mj_state"], dtype=np.float64), mujoco.mjtState.mjSTATE_INTEGRATION)
    mujoco.mj_forward(model, data)
    for robot, saved in zip(renv.robots, snap["robots"]):
        for key, value in saved["controller"].items():
            setattr(robot.controller, key, value.copy() if isinstance(value, np.ndarray) else value)
        for key, value in saved["gripper"].items():
            setattr(robot.gripper, key, value.copy() if isinstance(value, np.ndarray) else value)
    for name, (since, sampled, delay, value) in snap["observables"].items():
        ob = renv._observables[name]
        ob._time_since_last_sample, ob._sampled, ob._current_delay = since, sampled, delay
        ob._current_observed_value = value.copy() if isinstance(value, np.ndarray) and value.ndim else value
    renv._obs_cache = {k: np.array(v, copy=True) for k, v in snap["obs_cache"].items()}
    renv.timestep, renv.cur_time, renv.done = snap["counters"]
