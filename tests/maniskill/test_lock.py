"""tests-maniskill runs in the tests session's venv with ManiSkill's lock installed on top (see
noxfile.py): that holds only while ManiSkill's lock adds packages to the main lock and repins none."""

from __future__ import annotations

from ..conftest import lock_pins


def test_maniskill_lock_repins_nothing_of_the_main_lock() -> None:
    main, maniskill = lock_pins("py311.txt"), lock_pins("maniskill-py311.txt")
    assert maniskill, "requirements/maniskill-py311.txt lists no pins"
    shared = {name: (main[name], maniskill[name]) for name in maniskill if name in main}
    assert not shared, f"ManiSkill's lock repins packages of the main lock: {shared}"
