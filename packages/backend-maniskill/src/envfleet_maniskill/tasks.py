"""ManiSkill's stock table-top tasks whose assets ship in the ``mani-skill`` wheel, each with an instruction.

Stock ManiSkill tasks carry no language instruction; these are this project's own,
one imperative sentence per task, naming the objects and the goal as each task's
success check defines them. A task outside this table still runs (give
``train.maniskill.instruction``), unless its assets would be downloaded: see
:func:`envfleet_maniskill.assets.missing_assets`.
"""

from __future__ import annotations

__all__ = ["INSTRUCTIONS", "TASKS"]

#: ManiSkill env id -> language instruction.
INSTRUCTIONS: dict[str, str] = {
    "PickCube-v1": "pick up the red cube and move it to the green goal",
    "PushCube-v1": "push the cube into the target region",
    "PullCube-v1": "pull the cube back into the target region",
    "StackCube-v1": "stack the red cube on top of the green cube",
    "StackPyramid-v1": "stack the three cubes into a pyramid",
    "PegInsertionSide-v1": "insert the peg sideways into the hole of the box",
    "PlugCharger-v1": "plug the charger into the receptacle",
    "LiftPegUpright-v1": "lift the peg lying on the table upright",
    "PlaceSphere-v1": "place the sphere into the bin",
    "PokeCube-v1": "use the peg to push the cube to the goal",
    "PullCubeTool-v1": "use the tool to pull the cube within reach",
    "RollBall-v1": "push the ball so that it rolls into the goal region",
    "PushT-v1": "push the T-shaped block onto the T-shaped target",
    "PickCubeSO100-v1": "pick up the cube and lift it",
}

#: The env ids of :data:`INSTRUCTIONS`.
TASKS: tuple[str, ...] = tuple(INSTRUCTIONS)
