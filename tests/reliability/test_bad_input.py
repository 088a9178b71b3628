"""Bad input across the stack: each gets an error naming what was wrong and what was expected,
and afterwards the same worker (and manager) still steps correctly."""

from __future__ import annotations

import numpy as np
import pytest
import ray
import torch

from envfleet import ProcessEnvManager
from envfleet.config import load_config
from envfleet.dataproto import DataProto
from envfleet.errors import ConfigError, EnvFleetError, InvalidInputError, UnknownBackendError
from envfleet_ray import init_ray
from envfleet_ray.cli import main as cli_main
from envfleet_ray.commands.policies import load_policy
from envfleet_ray.runtime.group import EnvWorkerGroup

from .bad_inputs import RESET, WORKER_CASES, BadInput

N, S, CHUNK = 2, 2, 4
OVERRIDES = ["train.simulator_type=toy", f"train.num_envs={N}", f"rollout.pipeline_stage_num={S}", f"actor.model.num_action_chunks={CHUNK}"]


@pytest.fixture(scope="module")
def group():
    init_ray(num_cpus=4)
    g = EnvWorkerGroup(load_config(overrides=OVERRIDES), num_workers=1)
    g.init_worker()
    g.init_simulator()
    g.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": np.arange(N * S)})).get()
    yield g
    g.shutdown()
    ray.shutdown()


@pytest.fixture(scope="module")
def manager():
    m = ProcessEnvManager(load_config(overrides=OVERRIDES))
    m.start_simulator()
    m.reset_envs_to_state_ids(np.arange(N))
    yield m
    m.close()


def acts(n: int = N, chunk: int = CHUNK, dim: int = 7, dtype: object = np.float32) -> np.ndarray:
    return np.zeros((n, chunk, dim), dtype=dtype)  # type: ignore[call-overload]


def step(stage: object = 0, actions: object = None, **meta: object) -> DataProto:
    return DataProto.from_dict(non_tensors={"actions": acts() if actions is None else actions}, meta_info={"stage_id": stage, **meta})


# (id, layer, call, exception type, message fragment)
GROUP_CASES = [
    (
        "group-wrong-rows",
        lambda g: g.env_interact_step(step(actions=acts(n=3))),
        InvalidInputError,
        "expected num_workers * num_envs = 1 * 2 = 2",
    ),
    (
        "group-no-stage",
        lambda g: g.env_interact_step(DataProto.from_dict(non_tensors={"actions": acts()})),
        InvalidInputError,
        "stage_id'] is missing",
    ),
    (
        "group-reset-rows",
        lambda g: g.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": np.arange(3)})),
        InvalidInputError,
        "= 1 * 2 * 2 = 4",
    ),
]


@pytest.mark.parametrize(("case", "call", "exc", "fragment"), GROUP_CASES, ids=[c[0] for c in GROUP_CASES])
def test_group(group, case, call, exc, fragment) -> None:
    with pytest.raises(exc) as err:
        call(group)
    assert fragment in str(err.value)
    still_steps(group)


def still_steps(group) -> None:
    """The same worker still steps both stages correctly."""
    for stage in range(S):
        out = group.env_interact_step(step(stage=stage)).get()
        assert out.batch["rews"].shape == (N, CHUNK) and not out.batch["sim_restarted"].any()


@pytest.mark.parametrize("case", WORKER_CASES, ids=[c.id for c in WORKER_CASES])
def test_worker(group, case: BadInput) -> None:
    data = DataProto.from_dict(non_tensors=case.columns(N * S if case.method == RESET else N, CHUNK), meta_info=case.meta)
    with pytest.raises(case.error) as err:
        getattr(group, case.method)(data).get()
    assert case.fragment in str(err.value)
    still_steps(group)


MANAGER_CASES = [
    ("manager-empty-batch", lambda m: m.chunk_step(acts(n=0)), "got [0, 4, 7]"),
    ("manager-1d-actions", lambda m: m.chunk_step(np.zeros(7, np.float32)), "got [7]"),
    ("manager-object-actions", lambda m: m.chunk_step(np.array([None, None])), "got [2]"),
    ("manager-ids-wrong-length", lambda m: m.reset_envs_to_state_ids(np.arange(3)), "state_ids must have shape (2,)"),
    ("manager-ids-float", lambda m: m.reset_envs_to_state_ids(np.array([0.5, 1.0])), "must be integers"),
    ("manager-ids-2d", lambda m: m.reset_envs_to_state_ids(np.zeros((2, 1), np.int64)), "must have shape (2,)"),
    ("manager-torch-nan", lambda m: m.chunk_step(torch.full((N, CHUNK, 7), float("nan"))), "must be finite"),
]


@pytest.mark.parametrize(("case", "call", "fragment"), MANAGER_CASES, ids=[c[0] for c in MANAGER_CASES])
def test_manager(manager, case, call, fragment) -> None:
    with pytest.raises(InvalidInputError) as err:
        call(manager)
    assert fragment in str(err.value)
    assert manager.chunk_step(acts()).rewards.shape == (N, CHUNK)


DATAPROTO_CASES = [
    (
        "dataproto-size-mismatch",
        lambda: DataProto.from_dict({"a": torch.zeros(3)}, {"b": np.zeros(2)}),
        ValueError,
        "'b' has 2 rows, 'a' has 3",
    ),
    (
        "dataproto-meta-conflict",
        lambda: DataProto.concat([step(stage=0), step(stage=1)]),
        ValueError,
        "Conflicting values for meta_info key 'stage_id'",
    ),
    ("dataproto-empty-concat", lambda: DataProto.concat([]), ValueError, "at least one"),
    ("dataproto-scalar", lambda: DataProto.from_dict({"a": torch.tensor(1.0)}), ValueError, "scalar"),
    ("dataproto-bad-chunk", lambda: step().chunk(3), ValueError, "cannot be split into 3"),
]


@pytest.mark.parametrize(("case", "call", "exc", "fragment"), DATAPROTO_CASES, ids=[c[0] for c in DATAPROTO_CASES])
def test_dataproto(case, call, exc, fragment) -> None:
    with pytest.raises(exc) as err:
        call()
    assert fragment in str(err.value)


CONFIG_CASES = [
    ("config-unknown-backend", ["train.simulator_type=libro"], UnknownBackendError, "unknown backend 'libro'"),
    ("config-misspelt", ["train.simulator_type=toy", "train.max_episode_step=3"], ConfigError, "Did you mean 'train.max_episode_steps'?"),
    ("config-mistyped", ["train.simulator_type=toy", "train.seed=abc"], ConfigError, "'train.seed' has a wrong value"),
    ("config-backend-misspelt", ["train.simulator_type=toy", "train.toy.step_cost=1"], ConfigError, "'train.toy.step_cost_s'"),
    ("config-negative", ["train.simulator_type=toy", "train.num_envs=0"], ConfigError, "'train.num_envs' must be > 0"),
    (
        "config-stages",
        ["train.simulator_type=toy", "rollout.pipeline_stage_num=0"],
        ConfigError,
        "'rollout.pipeline_stage_num' must be >= 1",
    ),
]


@pytest.mark.parametrize(("case", "overrides", "exc", "fragment"), CONFIG_CASES, ids=[c[0] for c in CONFIG_CASES])
def test_config(case, overrides, exc, fragment) -> None:
    with pytest.raises(exc) as err:
        load_config(overrides=overrides)
    assert fragment in str(err.value)
    assert isinstance(err.value, EnvFleetError)


def test_config_missing_file() -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_config("/nonexistent/envfleet.yaml")


def test_policy_that_cannot_be_imported() -> None:
    with pytest.raises(ConfigError, match="cannot import module 'not_a_module_qq'"):
        load_policy("not_a_module_qq:act", CHUNK, 7)
    with pytest.raises(ConfigError, match="has no attribute 'nope'"):
        load_policy("json:nope", CHUNK, 7)


def test_policy_spec_is_never_code() -> None:
    import sys

    before = set(sys.modules)
    with pytest.raises(ConfigError, match="is not one of"):
        load_policy("__import__('os').system('true')", CHUNK, 7)
    with pytest.raises(ConfigError, match="is not one of"):
        load_policy("os:system;x", CHUNK, 7)
    assert set(sys.modules) == before
    # module:callable imports exactly the module named
    policy = load_policy("tests.reliability.policy_example:EchoZero", CHUNK, 7)
    assert policy(step()).shape == (N, CHUNK, 7)


def test_policy_factory_is_told_the_chunk_and_action_sizes() -> None:
    policy = load_policy("tests.reliability.policy_example:make_policy", 3, 5, seed=11)
    assert policy.made_with == (3, 5, 11)  # type: ignore[attr-defined]
    assert policy(step()).shape == (N, 3, 5)


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["rollout", "--steps", "0", "train.simulator_type=toy"], "--steps must be >= 1"),
        (["rollout", "train.simulator_type=toy", "train.isaac.x=1"], "train.isaac"),
        (["nosuchcommand"], "invalid choice: 'nosuchcommand'"),
    ],
    ids=["cli-zero-steps", "cli-foreign-section", "cli-unknown-command"],
)
def test_command(argv, fragment, capsys) -> None:
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err
