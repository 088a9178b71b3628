"""The fast step loop (``train.libero.physics: fast``, the default) is LIBERO's own, bit for bit.

The reference is LIBERO's own ``OffScreenRenderEnv`` run alone, one per process, with
the evaluation protocol (seed, reset, ``set_init_state``, settle steps, then three
chunks of random actions that move the arm, rendering every step). The backend runs
two envs of one task in one ``LiberoEnv`` (dense: they share the task's compiled scene),
each with its own actions, with ``render: last`` and the fast loop. After the reset
and after each chunk the images and the 8-dim state must be equal, and after the third
chunk MuJoCo's whole integration state (``mjSTATE_INTEGRATION``: time, qpos, qvel, act,
warm start, controls, applied forces, mocap).

One task per suite, with a drawer, microwave or stove where the suite has one:
libero_spatial 4 (its drawer starts open), libero_goal 7 (turn on the stove), libero_10 9
(the microwave starts open). libero_object's scenes have no fixture but the floor and a
basket; its task 0 stands for it. LIBERO-PRO's libero_goal_swap task 0 (open the middle
drawer, the objects' places swapped) runs four envs in one process (the dense layout),
each with its own actions, against LIBERO-PRO's own env alone.

The fast loop's sub-steps after the first are :mod:`envfleet_libero.lean`'s (robosuite's
OSC arithmetic without robosuite's bookkeeping); the test checks they ran, and that the
objects rest on contacts (the constraint solver works in every sub-step). Two fallbacks are
checked to be chosen and named in the fingerprint: a model integrated with RK4 (LIBERO's own
loop, then stepped) and robosuite's interpolated OSC (``interpolation: linear``: the fast loop
with robosuite's controller; not stepped, robosuite 1.4's interpolator fails under NumPy 2).

Every simulator runs in a spawned child process: a plain LIBERO env never makes its GL
context current, so it cannot share a process with another one at the same time. The
references run one after the other in one child kept for the module (each env built and
closed, as LIBERO's evaluation does), the backend in a fresh child per case beside it.
"""

from __future__ import annotations

import contextlib
import multiprocessing
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np
import pytest

from envfleet.errors import ConfigError

from .reference import Reference, directed_actions, integration_state, libero_cfg, random_actions, run_alone, suite_bench

SEED = 42
SETTLE = 4
CHUNK = 4
CHUNKS = 3
SIZE = 128
# (suite, task, [trial of each env of the one process])
CASES = [
    ("libero_spatial", 4, [0, 3]),
    ("libero_object", 0, [0, 5]),
    ("libero_goal", 7, [0, 2]),
    ("libero_10", 9, [2, 5]),
    ("libero_goal_swap", 0, [0, 1, 3, 5]),
]


def run_libero_alone(suite: str, task: int, trial: int, actions: np.ndarray) -> Reference:
    """In a child: LIBERO's own env alone (LIBERO-PRO's for its suites; tests/libero/reference.py's protocol)."""
    return run_alone(suite, task, trial, actions, seed=SEED, settle=SETTLE, size=SIZE, pro=suite.endswith("_swap"))


def _cfg(suite: str, num_envs: int, physics: Any = "fast") -> Any:
    return libero_cfg(suite, num_envs, seed=SEED, settle=SETTLE, size=SIZE, chunk=CHUNK, physics=physics)


def run_backend(suite: str, state_ids: list[int], actions: np.ndarray) -> dict[str, Any]:
    """In a child: one ``LiberoEnv`` holding every env (``actions``: [n, CHUNKS, CHUNK, 7]); frames, states, loop used."""
    from envfleet.env import EnvContext
    from envfleet_libero.env import LiberoEnv, LiberoSim

    n = len(state_ids)
    env = LiberoEnv(_cfg(suite, n).train, EnvContext(num_envs=n, action_dim=7, num_action_chunks=CHUNK))
    try:
        first = env.reset_envs_to_state_ids(np.array(state_ids))
        frames = [[{k: v[i].copy() for k, v in first.obs.items()}] for i in range(n)]
        for c in range(actions.shape[1]):
            step = env.chunk_step(actions[:, c])
            assert not (step.terminations.any() or step.truncations.any())
            for i in range(n):
                frames[i].append({k: v[i].copy() for k, v in step.obs.items()})
        sims = [sim for sim in env.sims if sim is not None]
        out = {
            "frames": frames,
            "mj_state": [integration_state(sim.renv.sim) for sim in sims],
            "fast": [sim._fast is not None for sim in sims],
            "lean": [sim.lean_refusal is None and sim._fast is not None and sim._fast._osc is not None for sim in sims],
            "contacts": [int(sim.renv.sim.data.ncon) for sim in sims],
            "one_scene": all(sim.scene is sims[0].scene for sim in sims),
            "renderer": env.renderer_info(),
        }
        # Observables whose clocks cannot be carried (here a noisy corrupter, which draws from the global
        # RNG) make the step run robosuite's update of every observable.
        from robosuite.utils.observables import NO_CORRUPTION, create_gaussian_noise_corrupter

        clocks, joint_pos = sims[1]._fast._clocks, sims[1].renv._observables["robot0_joint_pos"]
        out["clocks"] = [clocks.begin()]
        joint_pos.set_corrupter(create_gaussian_noise_corrupter(0.0, 0.01))
        out["clocks"].append(clocks.begin())
        joint_pos.set_corrupter(NO_CORRUPTION)
        # The fallback: a model whose integrator the split does not implement gets LIBERO's loop, said so.
        import mujoco

        sims[0].renv.sim.model.opt.integrator = mujoco.mjtIntegrator.mjINT_RK4
        sims[0].close()
        env.sims[0] = None
        env.reset_envs_to_state_ids(np.array(state_ids))  # env 0 is built again, on the scene env 1 keeps
        out["rk4"] = {"fast": env.sims[0]._fast is not None, "refusal": env.sims[0].fast_refusal, "renderer": env.renderer_info()}
        env.chunk_step(actions[:, 0])
        # The lean sub-step's fallback: robosuite's OSC with a linear interpolator (a config LIBERO can be given).
        env.sims[1].renv.sim.model.opt.integrator = mujoco.mjtIntegrator.mjINT_EULER  # the shared model, LIBERO's integrator
        env.sims[0].close()
        with interpolated_osc():  # built only: a reset's settle steps would step it
            sim0 = env.sims[0] = LiberoSim(env.suite.tasks[env.sims[1].task.index], env.cameras, SIZE, SIZE, "fast")
        out["interpolated"] = {"fast": sim0._fast is not None, "refusal": sim0.lean_refusal, "renderer": env.renderer_info()}
        # Not stepped: robosuite 1.4's interpolator fails under NumPy 2 in its own code (np.array(..., copy=False)).
        return out
    finally:
        env.close()


@contextlib.contextmanager
def interpolated_osc() -> Iterator[None]:
    """LIBERO's envs built meanwhile get robosuite's OSC_POSE with ``interpolation: linear``."""
    import robosuite

    original = robosuite.load_controller_config

    def load(**kwargs: Any) -> Any:
        config = original(**kwargs)
        config["interpolation"] = "linear"
        return config

    robosuite.load_controller_config = load
    try:
        yield
    finally:
        robosuite.load_controller_config = original


@pytest.fixture(scope="module")
def pools() -> Iterator[tuple[ProcessPoolExecutor, ProcessPoolExecutor]]:
    # Two processes at a time on this 2-core machine (a LIBERO env is ~1.6 GB): the references'
    # child pays LIBERO's import once for the module; the backend gets a fresh process per case.
    spawn = multiprocessing.get_context("spawn")
    with (
        ProcessPoolExecutor(max_workers=1, mp_context=spawn) as refs,
        ProcessPoolExecutor(max_workers=1, mp_context=spawn, max_tasks_per_child=1) as backend,
    ):
        yield refs, backend


@pytest.mark.parametrize("suite,task,trials", CASES, ids=[c[0] for c in CASES])
def test_fast_loop_equals_libero_alone(
    suite: str, task: int, trials: list[int], pools: tuple[ProcessPoolExecutor, ProcessPoolExecutor]
) -> None:
    pool, backend = pools
    b = suite_bench(suite)
    first_id = sum(len(b.get_task_init_states(t)) for t in range(task))
    # LIBERO-PRO's case: one direction per chunk (a pure random walk of 12 steps can leave an arm in place).
    draw = directed_actions if suite.endswith("_swap") else random_actions
    actions = np.stack([draw(7919 * j + 1000 * task + trial, CHUNKS, CHUNK) for j, trial in enumerate(trials)])
    refs = [pool.submit(run_libero_alone, suite, task, trial, actions[j]) for j, trial in enumerate(trials)]
    ours = backend.submit(run_backend, suite, [first_id + t for t in trials], actions).result()
    n = len(trials)
    assert ours["fast"] == [True] * n and ours["one_scene"], "the envs must run the fast loop on one shared scene"
    assert ours["lean"] == [True] * n, "the fast loop's sub-steps must be the lean ones"
    assert min(ours["contacts"]) > 0, "no contact: the constraint solver would not be exercised"
    assert "physics" not in ours["renderer"], "the fast loop is not part of the fingerprint"
    for j, ref in enumerate(r.result() for r in refs):
        moved = np.abs(ref.frames[-1]["state"][:3] - ref.frames[0]["state"][:3]).max()
        assert moved > 0.01, f"the arm barely moved ({moved:.4f} m): the check would be weak"
        for c, (mine, theirs) in enumerate(zip(ours["frames"][j], ref.frames, strict=True)):
            when = "after the reset" if c == 0 else f"after chunk {c}"
            for key in ("full_image", "wrist_image", "state"):
                np.testing.assert_array_equal(mine[key], theirs[key], err_msg=f"{suite} task {task} env {j}: {key} differs {when}")
        np.testing.assert_array_equal(
            ours["mj_state"][j], ref.mj_state, err_msg=f"{suite} task {task} env {j}: mjSTATE_INTEGRATION differs after {CHUNKS} chunks"
        )
    assert ours["clocks"] == [True, False], "a noisy corrupter must make the step update every observable"
    rk4 = ours["rk4"]
    assert not rk4["fast"] and "mjINT_RK4" in rk4["refusal"]
    assert rk4["renderer"]["physics"].startswith("libero step loop"), "the fallback is part of the fingerprint"
    interpolated = ours["interpolated"]
    assert interpolated["fast"] and "interpolator" in interpolated["refusal"]
    assert interpolated["renderer"]["physics"].startswith("fast step loop, robosuite's controller"), "the fallback is in the fingerprint"


def test_physics_key_is_checked() -> None:
    assert _cfg("libero_spatial", 1, "libero").train.libero.physics == "libero"
    with pytest.raises(ConfigError, match=r"train\.libero\.physics.*'fast'.*'libero'.*got 'mj_step'"):
        _cfg("libero_spatial", 1, "mj_step")
