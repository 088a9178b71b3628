"""The plugin API's version and the deprecation path for plugins one version back (no simulator, no Ray)."""

from __future__ import annotations

import warnings

import pytest

from envfleet.config import load_config
from envfleet.env import ArraySpec
from envfleet.errors import ConfigError, PluginContractError, PluginDeprecationWarning
from envfleet.plugins import PLUGIN_API_VERSION, ApiVersion, BackendRegistry, BackendSpec, deprecations


def spec(**kw) -> BackendSpec:
    fields = {"name": "arm", "env_factory": "x:y", "observation_spec": lambda cfg, n: {"state": ArraySpec((2,), "float32")}}
    return BackendSpec(**{**fields, "package": "envfleet-arm", **kw})


def load(s: BackendSpec, *overrides: str):
    return load_config(overrides=[f"train.simulator_type={s.name}", *overrides], backend_lookup={s.name: s}.__getitem__)


@pytest.mark.parametrize(("value", "parsed"), [("2.0", (2, 0)), ("2", (2, 0)), (1, (1, 0)), ("2.13", (2, 13))], ids=str)
def test_versions_parse(value, parsed) -> None:
    assert ApiVersion.parse(value) == ApiVersion(*parsed)
    assert ApiVersion.parse("2.10") > ApiVersion.parse("2.9") > ApiVersion.parse("1.0")


@pytest.mark.parametrize(
    ("declared", "fragment"),
    [
        ("two", "BackendSpec.api_version: a plugin API version is 'MAJOR.MINOR'"),
        ("3.0", "is written for envfleet plugin API 3.0, newer than this envfleet's 2.0: upgrade envfleet"),
        ("0.9", "is written for envfleet plugin API 0.9, which this envfleet (2.0) no longer runs: its author ports it"),
    ],
    ids=["malformed", "newer-major", "two-majors-back"],
)
def test_an_api_this_core_cannot_run_is_a_contract_error_naming_backend_and_package(declared, fragment) -> None:
    with pytest.raises(PluginContractError) as info:
        spec(api_version=declared)
    assert fragment in str(info.value) and "backend 'arm' (package envfleet-arm)" in str(info.value)


def test_a_current_plugin_has_no_deprecation_and_its_undeclared_keys_are_errors_for_both() -> None:
    current = spec(api_version=PLUGIN_API_VERSION, implements={"auto_reset"})
    assert deprecations(current) == []
    with warnings.catch_warnings():
        warnings.simplefilter("error", PluginDeprecationWarning)  # none for a current plugin
        assert load(current, "train.auto_reset=true").train.auto_reset is True
    with pytest.raises(ConfigError) as info:
        load(current, "train.render=all")
    message = str(info.value)
    assert "config key 'train.render' is 'all', but backend 'arm' (package envfleet-arm) does not implement it" in message
    assert "In the config: remove it or set it to 'last'" in message  # what the user can do
    assert "its author adds 'render' to BackendSpec.implements" in message  # what the plugin's author can do


def test_a_plugin_of_api_1_gets_its_keys_unchecked_and_a_warning_naming_it_and_them() -> None:
    old = spec()  # written before api_version and implements existed
    with pytest.warns(PluginDeprecationWarning) as caught:
        cfg = load(old, "train.render=all", "train.auto_reset=true")
    assert cfg.train.render == "all" and cfg.train.auto_reset is True  # passed to the env as before
    message = str(caught[0].message)
    assert "backend 'arm' (package envfleet-arm) is written for envfleet plugin API 1.0" in message
    assert "this config sets auto_reset, render, passed to its env unchecked" in message
    assert 'BackendSpec(..., api_version="2.0", implements={"auto_reset", "render"})' in message
    (line,) = [d.line() for d in deprecations(old)]
    assert line.startswith("backend arm (envfleet-arm) uses plugin API 1.0: since plugin API 2.0 a backend declares")
    assert 'fix: BackendSpec(..., api_version="2.0", implements={...the keys its env honours})' in line


def test_a_plugin_declaring_api_1_with_implements_is_checked_and_told_to_declare_the_version() -> None:
    old = spec(api_version="1.0", implements={"render"})
    with pytest.raises(ConfigError, match="does not implement it"):
        load(old, "train.auto_reset=true")
    (deprecation,) = deprecations(old)
    assert "it declares '1.0'; API 1 support ends with API 3.0" in deprecation.changed
    assert deprecation.fix == 'BackendSpec(..., api_version="2.0")'


def test_an_unknown_implements_key_is_a_contract_error_naming_the_package() -> None:
    with pytest.raises(PluginContractError, match=r"\(package envfleet-arm\): BackendSpec.implements \['fly'\].*its author declares only"):
        spec(implements={"fly"})


def test_a_spec_without_package_gets_its_entry_points_distribution() -> None:
    registry = BackendRegistry(packages={"armplugin": "envfleet-arm-dist"})

    def hook(registry: BackendRegistry) -> None:
        registry.register(spec(package="", api_version="2.0"))

    registry.register_from("armplugin", hook)
    assert registry.get("arm").package == "envfleet-arm-dist"


def test_a_plugin_for_an_api_this_core_cannot_run_is_reported_by_name_and_the_others_stay() -> None:
    from envfleet import plugins

    class Future:
        @plugins.hookimpl
        def envfleet_register_backends(self, registry: BackendRegistry) -> None:
            registry.register(spec(name="future", api_version="3.0"))

    plugins.register_plugin(Future(), name="future-plugin")
    try:
        (failure,) = [f for f in plugins.plugin_failures() if f.name == "future-plugin"]
        assert failure.stage == "register" and isinstance(failure.error, PluginContractError)
        assert "newer than this envfleet's 2.0" in str(failure)
        assert "future" not in plugins.list_backends() and "toy" in plugins.list_backends()
    finally:
        plugins.unregister_plugin("future-plugin")
