"""The plugin registry: entry points, failures, explicit registration."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import types

import pytest

from envfleet import plugins
from envfleet.errors import UnknownBackendError
from envfleet.plugins import BackendSpec, get_backend, hookimpl, list_backends, plugin_failures


def run_py(code: str, env: dict | None = None) -> subprocess.CompletedProcess[str]:
    import os

    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=full_env, timeout=120)


def test_import_envfleet_does_not_import_ray_or_torch_for_plugins() -> None:
    out = run_py(
        """
        import sys, envfleet
        assert 'ray' not in sys.modules
        from envfleet.plugins import list_backends
        list_backends()
        assert 'ray' not in sys.modules
        print('ok')
        """
    )
    assert out.returncode == 0, out.stderr
    assert "ok" in out.stdout


def test_toy_found_through_entry_point_without_importing_simulator() -> None:
    out = run_py(
        """
        import sys
        from envfleet.plugins import list_backends
        specs = list_backends()
        assert 'toy' in specs, specs
        assert 'envfleet_toy.env' not in sys.modules, 'listing imported the simulator'
        print(specs['toy'].version)
        """
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0.1.0"


def test_broken_plugin_reported_by_name_and_cause_while_toy_works() -> None:
    failures = plugin_failures()
    broken = [f for f in failures if f.name == "broken"]
    assert broken, failures
    assert broken[0].stage == "import"
    assert "unobtainium" in str(broken[0])
    assert "raise ImportError" in broken[0].traceback
    assert get_backend("toy").name == "toy"


@pytest.mark.parametrize(
    ("name", "stage", "fragment"),
    [
        ("typo", "validate", "unknown hook 'envfleet_register_backend'; envfleet's only hook is named 'envfleet_register_backends'"),
        ("unmarked", "validate", "its envfleet_register_backends has no @hookimpl marker"),
        ("empty", "register", "never called registry.register"),
    ],
    ids=["misspelt-hook", "no-hookimpl-marker", "registers-nothing"],
)
def test_each_plugin_is_validated_on_its_own(name, stage, fragment) -> None:
    """An installed plugin with a bad hook is reported by name; every other backend stays usable."""
    failure = next((f for f in plugin_failures() if f.name == name), None)
    assert failure is not None, plugin_failures()
    assert failure.stage == stage and fragment in str(failure)
    assert get_backend("toy").name == "toy"
    with pytest.raises(UnknownBackendError) as info:
        get_backend(name)
    assert f"A plugin named {name!r} is installed but" in str(info.value) and "pip install" not in str(info.value)


def test_unknown_backend_lists_installed_and_suggests() -> None:
    with pytest.raises(UnknownBackendError) as info:
        get_backend("tyo")
    msg = str(info.value)
    assert isinstance(info.value, KeyError)
    assert re.search(r"Installed backends: ([a-z]+, )*toy", msg), msg
    assert "Did you mean 'toy'?" in msg
    assert "pip install envfleet-tyo" in msg


def test_unknown_backend_that_failed_to_load_says_why() -> None:
    with pytest.raises(UnknownBackendError, match="failed to import.*unobtainium"):
        get_backend("broken")


def test_autoload_can_be_disabled() -> None:
    out = run_py(
        "from envfleet.plugins import list_backends, plugin_failures; print(sorted(list_backends()), len(plugin_failures()))",
        env={"ENVFLEET_DISABLE_PLUGIN_AUTOLOAD": "1"},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[] 0"


@pytest.fixture
def extra_plugin():
    """Register a plugin object explicitly and unregister it afterwards."""
    registered = []

    def register(obj: object, name: str) -> None:
        plugins.register_plugin(obj, name=name)
        registered.append(name)

    yield register
    for name in registered:
        plugins.unregister_plugin(name)


def test_explicit_registration(extra_plugin) -> None:
    mod = types.SimpleNamespace()

    @hookimpl
    def envfleet_register_backends(registry):
        registry.register(BackendSpec(name="inline", env_factory="x:y", observation_spec=lambda cfg, n: {}))

    mod.envfleet_register_backends = envfleet_register_backends
    extra_plugin(mod, "inline-plugin")
    assert "inline" in list_backends()
    assert "toy" in list_backends()


def test_plugin_whose_hook_raises_is_reported_and_others_stay(extra_plugin) -> None:
    mod = types.SimpleNamespace()

    @hookimpl
    def envfleet_register_backends(registry):
        registry.register(BackendSpec(name="half", env_factory="x:y", observation_spec=lambda cfg, n: {}))
        raise RuntimeError("boom while registering")

    mod.envfleet_register_backends = envfleet_register_backends
    extra_plugin(mod, "raising-plugin")
    assert "half" not in list_backends()
    assert "toy" in list_backends()
    assert any(f.name == "raising-plugin" and f.stage == "register" and "boom" in str(f) for f in plugin_failures())


def test_misspelt_hook_is_an_error() -> None:
    from pluggy import PluginValidationError

    mod = types.SimpleNamespace()

    @hookimpl
    def envfleet_register_backend(registry):  # missing "s"
        pass

    mod.envfleet_register_backend = envfleet_register_backend
    with pytest.raises(PluginValidationError):
        plugins.register_plugin(mod, name="typo-plugin")
    plugins.unregister_plugin("typo-plugin")


def test_duplicate_backend_name_is_reported(extra_plugin) -> None:
    mod = types.SimpleNamespace()

    @hookimpl
    def envfleet_register_backends(registry):
        registry.register(BackendSpec(name="toy", env_factory="x:y", observation_spec=lambda cfg, n: {}))

    mod.envfleet_register_backends = envfleet_register_backends
    extra_plugin(mod, "dup-plugin")
    assert any(f.name == "dup-plugin" and "registered twice" in str(f) for f in plugin_failures())
    assert list_backends()["toy"].env_factory == "envfleet_toy.env:ToyEnv"
