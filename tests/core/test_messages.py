"""The typed send path: one argument type per command, error kinds as an enum, one error family."""

from __future__ import annotations

import numpy as np
import pytest

from envfleet import ProcessEnvManager
from envfleet.config import load_config
from envfleet.env import Env, EnvSurface
from envfleet.errors import (
    ClosedEnvironmentError,
    EnvFleetError,
    SimulatorPythonError,
    SimulatorStoppedError,
    VenvError,
)
from envfleet.plugins import BackendSpec
from envfleet.plugins.spec import import_factory, split_factory
from envfleet.shards.messages import ARGUMENTS, Command, ErrorKind, RemoteError, ResetRequest, err_message


def test_every_command_names_its_argument_type() -> None:
    assert set(ARGUMENTS) == set(Command)
    request = ResetRequest(np.arange(2), None)
    assert ARGUMENTS[Command.RESET]._make(tuple(request)) == request  # what the server rebuilds from the wire


def test_a_remote_error_travels_with_its_kind_and_text_apart() -> None:
    error = RemoteError(ErrorKind.INVALID, "InvalidInputError", "state id 9: out of range: 0..3", "tb")
    assert err_message(error) == ("err", "invalid", "InvalidInputError", "state id 9: out of range: 0..3", "tb")
    assert error.message == "InvalidInputError: state id 9: out of range: 0..3"


def test_the_manager_and_an_env_share_one_surface() -> None:
    from envfleet_toy.env import ToyEnv

    manager = ProcessEnvManager(load_config(overrides=["train.simulator_type=toy", "train.num_envs=2"]))  # not started
    manager.close()
    assert isinstance(manager, EnvSurface)
    assert issubclass(ToyEnv, Env) and all(callable(getattr(ToyEnv, name, None)) for name in ("chunk_step", "reset_envs_to_state_ids"))
    assert not isinstance(object(), EnvSurface)


def test_lifecycle_misuse_has_named_errors() -> None:
    manager = ProcessEnvManager(load_config(overrides=["train.simulator_type=toy", "train.num_envs=2"]))
    with pytest.raises(SimulatorStoppedError, match="call start_simulator"):
        manager.chunk_step(np.zeros((2, 1, 7), np.float32))
    manager.close()
    with pytest.raises(ClosedEnvironmentError, match="the manager is closed"):
        manager.start_simulator()
    assert issubclass(ClosedEnvironmentError, RuntimeError)


@pytest.mark.parametrize("error", [VenvError, SimulatorPythonError, ClosedEnvironmentError, SimulatorStoppedError])
def test_every_error_is_an_envfleet_error(error: type[Exception]) -> None:
    assert issubclass(error, EnvFleetError)


def test_a_factory_name_is_read_in_one_place() -> None:
    assert split_factory("envfleet_toy.env:ToyEnv") == ("envfleet_toy.env", "ToyEnv")
    assert import_factory("envfleet.env:Env.close") is Env.close
    with pytest.raises(ValueError, match="expected 'package.module:attr'"):
        split_factory("envfleet_toy.env.ToyEnv")
    with pytest.raises(AttributeError, match="has no attribute 'Nope'"):
        import_factory("envfleet.env:Nope")
    with pytest.raises(TypeError, match="must be a 'module:attr' string"):
        BackendSpec(name="x", env_factory=Env, observation_spec=lambda cfg, n: {})  # type: ignore[arg-type]
