"""MetaWorld's 50 tasks, in the order of ``metaworld.MT50().train_classes``, each with a language instruction.

The order gives the task ids of the ``mt50`` suite. The instructions are this
project's own: one imperative sentence per task, naming the object and the goal
as MetaWorld's task definitions describe them.
"""

from __future__ import annotations

__all__ = ["TASKS", "INSTRUCTIONS"]

#: Task name -> language instruction; the key order is MT50's.
INSTRUCTIONS: dict[str, str] = {
    "assembly-v3": "put the ring onto the peg",
    "basketball-v3": "drop the ball into the hoop",
    "bin-picking-v3": "move the puck from the left bin to the right bin",
    "box-close-v3": "pick up the lid and close the box",
    "button-press-topdown-v3": "press the button down from above",
    "button-press-topdown-wall-v3": "reach over the wall and press the button down from above",
    "button-press-v3": "push the button in from the front",
    "button-press-wall-v3": "go around the wall and push the button in",
    "coffee-button-v3": "press the button of the coffee machine",
    "coffee-pull-v3": "pull the mug out from under the coffee machine",
    "coffee-push-v3": "push the mug under the coffee machine",
    "dial-turn-v3": "turn the dial half a turn",
    "disassemble-v3": "lift the ring off the peg",
    "door-close-v3": "swing the door shut",
    "door-lock-v3": "turn the door's lock clockwise to lock it",
    "door-open-v3": "swing the door open",
    "door-unlock-v3": "turn the door's lock counter-clockwise to unlock it",
    "hand-insert-v3": "put the gripper into the hole",
    "drawer-close-v3": "push the drawer shut",
    "drawer-open-v3": "pull the drawer open",
    "faucet-open-v3": "turn the faucet handle counter-clockwise",
    "faucet-close-v3": "turn the faucet handle clockwise",
    "hammer-v3": "hit the nail into the wall with the hammer",
    "handle-press-side-v3": "press the handle down from the side",
    "handle-press-v3": "press the handle down",
    "handle-pull-side-v3": "pull the handle up from the side",
    "handle-pull-v3": "pull the handle up",
    "lever-pull-v3": "pull the lever down a quarter turn",
    "pick-place-wall-v3": "pick up the puck, carry it over the wall and put it at the goal",
    "pick-out-of-hole-v3": "lift the puck out of the hole",
    "pick-place-v3": "pick up the puck and put it at the goal",
    "plate-slide-v3": "slide the plate into the cabinet",
    "plate-slide-side-v3": "slide the plate sideways into the cabinet",
    "plate-slide-back-v3": "slide the plate out of the cabinet",
    "plate-slide-back-side-v3": "slide the plate sideways out of the cabinet",
    "peg-insert-side-v3": "push the peg sideways into the hole",
    "peg-unplug-side-v3": "pull the peg sideways out of the socket",
    "soccer-v3": "push the ball into the goal",
    "stick-push-v3": "take the stick and push the bottle with it",
    "stick-pull-v3": "take the stick and pull the bottle with it",
    "push-v3": "push the puck to the goal",
    "push-wall-v3": "push the puck around the wall to the goal",
    "push-back-v3": "push the puck back to the goal",
    "reach-v3": "move the gripper to the goal",
    "reach-wall-v3": "move the gripper over the wall to the goal",
    "shelf-place-v3": "pick up the puck and put it on the shelf",
    "sweep-into-v3": "sweep the puck into the hole",
    "sweep-v3": "sweep the puck off the table",
    "window-open-v3": "slide the window open",
    "window-close-v3": "slide the window shut",
}

#: The task names in MT50's order.
TASKS: tuple[str, ...] = tuple(INSTRUCTIONS)
