"""The exceptions envfleet raises, every one an :class:`EnvFleetError`, all in this module (and its one warning).

Each one subclasses the builtin a caller would naturally catch (``KeyError`` for
an unknown name, ``ValueError`` for a bad input, ``RuntimeError`` for a simulator
that failed or a call out of order), so existing ``except`` clauses keep working.
The ``envfleet`` command prints an ``EnvFleetError`` as a message, anything else as
a crash. An error says who can fix it: a :class:`ConfigError` names the key and what the
config's user can set, a :class:`PluginContractError` the backend, its package and what the
plugin's author must declare, and one that either could fix says both.
"""

from __future__ import annotations

__all__ = [
    "EnvFleetError",
    "MissingExtraError",
    "ConfigError",
    "DataProtoError",
    "DataProtoKeyError",
    "UnknownBackendError",
    "PluginContractError",
    "PluginDeprecationWarning",
    "InvalidInputError",
    "EnvFleetSimulatorError",
    "RestartLimitError",
    "WorkerDiedError",
    "LifecycleError",
    "ClosedEnvironmentError",
    "SimulatorStoppedError",
    "SimulatorPythonError",
    "VenvError",
]


class EnvFleetError(Exception):
    """Base class of every error envfleet raises on purpose."""


class ConfigError(EnvFleetError, ValueError):
    """A config key is unknown, misspelt, of the wrong type or inconsistent.

    The message names the key (dotted path) and what was expected.
    """


class DataProtoError(EnvFleetError, ValueError, AssertionError):
    """A DataProto call got data it cannot use (sizes that disagree, a conflict in ``meta_info``, ...).

    It is a ``ValueError``, as envfleet's other bad-input errors, and an
    ``AssertionError``, which is what verl's ``DataProto`` raises for the same
    checks, so code written against either catches it. The message names the key
    and the sizes.
    """


class DataProtoKeyError(EnvFleetError, KeyError, AssertionError):
    """A DataProto call named a key the batch does not have (``select``, ``pop``, ``rename``).

    A ``KeyError`` and, as verl asserts the key is present, an ``AssertionError``.
    The message lists the keys there are.
    """

    def __str__(self) -> str:  # KeyError would wrap the message in quotes
        return str(self.args[0]) if self.args else ""


class UnknownBackendError(EnvFleetError, KeyError):
    """``get_backend(name)`` was asked for a backend nobody registered."""

    def __str__(self) -> str:  # KeyError would wrap the message in quotes
        return str(self.args[0]) if self.args else ""


class PluginContractError(EnvFleetError, ValueError):
    """A backend does not keep the plugin contract: something only its author can fix.

    The message names the backend, its package (distribution) and what the author must
    declare. A ``ValueError``, as a bad ``BackendSpec`` field always was.
    """


class PluginDeprecationWarning(DeprecationWarning):
    """A backend relies on an older plugin API, which core still runs the old way.

    The message names the backend, its package, what changed and the one-line fix. The
    ``envfleet`` command shows it (Python hides a ``DeprecationWarning`` raised in a library);
    pytest shows it in its warnings summary.
    """


class InvalidInputError(EnvFleetError, ValueError):
    """An argument to an env call has the wrong shape, dtype or value.

    Raised before anything reaches a simulator, so the env stays usable.
    """


class EnvFleetSimulatorError(EnvFleetError, RuntimeError):
    """A Python exception raised inside a simulator (possibly in another process).

    ``remote_traceback`` holds the traceback text from the process that raised it.
    """

    def __init__(self, message: str, remote_traceback: str = "") -> None:
        full = message if not remote_traceback else f"{message}\n\n--- simulator traceback ---\n{remote_traceback}"
        super().__init__(full)
        self.remote_traceback = remote_traceback


class RestartLimitError(EnvFleetError, RuntimeError):
    """A shard crashed or hung more often than ``train.max_restarts`` allows."""


class WorkerDiedError(EnvFleetError, RuntimeError):
    """A Ray EnvWorker actor died; the message names its rank, node and cause."""


class MissingExtraError(EnvFleetError, ImportError):
    """An optional face of envfleet was imported without the package it needs; the message has the pip command."""


class LifecycleError(EnvFleetError, RuntimeError):
    """A call came at the wrong point of an object's life; the message names the call to make first."""


class ClosedEnvironmentError(LifecycleError):
    """A call on a manager or worker after its ``close()`` (Gymnasium names the same mistake so)."""


class SimulatorStoppedError(LifecycleError):
    """A call that needs the simulator processes before ``start_simulator()`` / ``init_simulator()``, or after a stop."""


class SimulatorPythonError(EnvFleetError, RuntimeError):
    """``train.simulator_python`` cannot run the stage's backend: missing, broken, or with other versions."""


class VenvError(EnvFleetError, RuntimeError):
    """``envfleet venv`` cannot build the venv: no lock, no such Python, or pip failed."""
