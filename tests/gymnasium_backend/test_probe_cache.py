"""The spec probe's cache: a second load of the same env starts no probe; another make key, a changed version
of a package that decides the answer, or the cache turned off probes again."""

from __future__ import annotations

import json
import os

import pytest

from envfleet.config import load_config
from envfleet_gymnasium import probe as probing

from .common import gym_train


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(probing.CACHE_ENV, str(tmp_path / "cache"))
    probing.clear_memo()
    yield tmp_path / "cache"
    probing.clear_memo()


def _probe(**section: object) -> dict:
    cfg = load_config(data={"train": gym_train("Pendulum-v1", render="rgb_array", **section)})
    return probing.probe(cfg.train)


def test_a_second_process_reads_the_answer_from_disk(cache) -> None:
    before = probing.probe_count()
    answer = _probe()
    assert probing.probe_count() == before + 1
    files = list(cache.glob("*.json"))
    assert len(files) == 1
    entry = json.loads(files[0].read_text())
    assert entry["make"]["id"] == "Pendulum-v1" and entry["answer"]["render"]["shape"] == [500, 500, 3]
    assert set(entry["answer"]["versions"]) >= {"gymnasium", "envfleet", "envfleet-gymnasium"}
    probing.clear_memo()  # as a new process: nothing in memory
    assert _probe() == answer
    assert probing.probe_count() == before + 1, "the cached answer was not used"


def test_the_make_key_and_the_versions_decide(cache) -> None:
    before = probing.probe_count()
    _probe()
    _probe(kwargs={"g": 9.0})  # another make key
    assert probing.probe_count() == before + 2 and len(list(cache.glob("*.json"))) == 2
    for path in cache.glob("*.json"):  # a package upgraded since: the recorded version is not the installed one
        entry = json.loads(path.read_text())
        entry["answer"]["versions"]["gymnasium"] = "0.0.1"
        path.write_text(json.dumps(entry))
    probing.clear_memo()
    _probe()
    assert probing.probe_count() == before + 3
    entry = json.loads(next(p for p in cache.glob("*.json") if json.loads(p.read_text())["make"]["kwargs"] == {}).read_text())
    assert entry["answer"]["versions"]["gymnasium"] != "0.0.1", "the stale answer was not replaced"


def test_the_seeds_and_keys_are_not_part_of_the_key(cache) -> None:
    before = probing.probe_count()
    _probe(seeds=3)
    probing.clear_memo()
    _probe(seeds=[5, 6], state_keys=["state"])
    assert probing.probe_count() == before + 1


def test_off_probes_every_time_and_writes_nothing(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(probing.CACHE_ENV, "off")
    monkeypatch.chdir(tmp_path)
    probing.clear_memo()
    before = probing.probe_count()
    _probe()
    probing.clear_memo()
    _probe()
    assert probing.probe_count() == before + 2
    assert probing.cache_dir() is None and not os.listdir(tmp_path)
    probing.clear_memo()


ENV_MODULE = """
import gymnasium, numpy as np
from gymnasium import spaces


class Mine(gymnasium.Env):
    observation_space = spaces.Box(-1, 1, (2,), np.float32)
    action_space = spaces.Box(-1, 1, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, False, False, {}


gymnasium.register("envfleet_test/Mine-v0", entry_point=Mine<limit>)
"""


def test_an_edit_of_the_env_s_own_module_probes_again(cache, tmp_path, monkeypatch) -> None:
    """An env in a plain module of the user's (no version): adding max_episode_steps to its registration is seen."""
    folder = tmp_path / "src"
    folder.mkdir()
    module = folder / "my_env_module.py"
    module.write_text(ENV_MODULE.replace("<limit>", ""))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")]))
    section = {"simulator_type": "gymnasium", "max_episode_steps": 10, "gymnasium": {"id": "my_env_module:envfleet_test/Mine-v0"}}
    before = probing.probe_count()
    first = probing.probe(load_config(data={"train": section}).train)
    assert first["max_episode_steps"] is None and str(module) in first["sources"]
    probing.clear_memo()
    assert probing.probe(load_config(data={"train": section}).train) == first  # unchanged: from the disk
    assert probing.probe_count() == before + 1
    module.write_text(ENV_MODULE.replace("<limit>", ", max_episode_steps=77"))
    probing.clear_memo()
    again = probing.probe(load_config(data={"train": section}).train)
    assert probing.probe_count() == before + 2, "the edited module's stale answer was used"
    assert again["max_episode_steps"] == 77
