"""verl's env worker, for verl's own trainer: envfleet's :class:`~envfleet_ray.runtime.worker.EnvWorker`
behind verl's ``Worker``.

verl's ``RobRayPPOTrainer`` builds its Env role as
``RayClassWithInitArgs(ray.remote(EnvWorker), config=config.env)``, passes it through
``create_colocated_worker_cls`` and ``RayWorkerGroup``, and its ``EnvLoop`` drives it.
This class has the constructor and dispatch modes of verl's env worker, so a verl user changes the
class in the role mapping and nothing else::

    from envfleet_ray.verl import EnvWorker            # instead of verl's own
    role_worker_mapping[Role.Env] = ray.remote(EnvWorker)

- ``init_worker``, ``init_simulator``, ``get_all_state_ids``, ``finish_rollout``:
  one-to-all (every worker runs them; verl returns a list, one item per worker);
- ``env_interact_step``, ``reset_envs_to_state_ids``: on the ``"env"`` mesh, split by
  rank (``dp_rank = rank``) and non-blocking (verl returns a future whose ``get()``
  concatenates the workers' results, worker-major).

verl's ``DataProto`` comes in and goes out; the conversion shares the arrays (no image
byte is copied by it). The two data methods are coroutines that run the step in a
thread, so Ray makes the actor asynchronous: a step of stage 1 submitted while stage 0
is stepping runs at the same time, as under envfleet's own group.

This is the only module of envfleet that imports verl (``pip install "envfleet-ray[verl]"``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from envfleet.dataproto import DataProto
from envfleet.errors import ConfigError, InvalidInputError

from .runtime.placement import bundle_shape, reserve
from .runtime.worker import EnvWorker as FleetWorker

try:
    from verl.protocol import DataProto as VerlDataProto
    from verl.single_controller.base import Worker
    from verl.single_controller.base.decorator import Dispatch, make_nd_compute_dataproto_dispatch_fn, register
    from verl.single_controller.ray.base import RayResourcePool, sort_placement_group_by_node_ip
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        f"envfleet_ray.verl needs verl's single controller and DataProto ({exc}); install them with: pip install 'envfleet-ray[verl]'"
    ) from exc

__all__ = ["EnvWorker", "EnvResourcePool", "MESH", "from_verl", "to_verl"]

MESH = "env"  # the dispatch mesh of the data methods, as in verl's env worker


def from_verl(data: Any) -> DataProto:
    """envfleet's DataProto over the same tensors and arrays as verl's ``data`` (no copy)."""
    if isinstance(data, DataProto):
        return data
    if not isinstance(data, VerlDataProto):
        raise InvalidInputError(f"expected a verl.protocol.DataProto, got {type(data).__name__}")
    return DataProto(batch=data.batch, non_tensor_batch=data.non_tensor_batch, meta_info=data.meta_info)


def to_verl(data: DataProto) -> Any:
    """verl's DataProto over the same arrays as envfleet's ``data`` (no copy)."""
    return VerlDataProto(batch=data.batch, non_tensor_batch=dict(data.non_tensor_batch), meta_info=dict(data.meta_info))


def _plain_config(config: Any) -> dict[str, Any]:
    """verl's ``config.env`` as a plain dict, its interpolations resolved against verl's whole config."""
    if isinstance(config, DictConfig):
        try:
            plain = OmegaConf.to_container(config, resolve=True)
        except Exception as exc:
            raise ConfigError(f"verl's env config does not resolve: {exc}") from None
        assert isinstance(plain, dict)
        return {str(k): v for k, v in plain.items()}
    if isinstance(config, dict):
        return config
    raise ConfigError(f"EnvWorker takes verl's config.env (a DictConfig), got {type(config).__name__}")


class EnvWorker(Worker):  # type: ignore[misc]
    """verl's env worker with envfleet inside: ``EnvWorker(config)`` with verl's ``config.env``.

    :param config: verl's ``config.env`` section (``train``, ``rollout``, ``actor``, and the
        keys of verl's env config that envfleet accepts and does not use).
    :param cuda_visible_devices: passed to verl's ``Worker`` (verl sets it when it places
        a role next to another).

    The envfleet worker itself is :attr:`worker`; its rank is verl's rank.
    """

    def __init__(self, config: Any, cuda_visible_devices: str | None = None) -> None:
        Worker.__init__(self, cuda_visible_devices=cuda_visible_devices)
        self.cfg = config
        self.worker = FleetWorker(_plain_config(config), rank=self.rank)
        self.stage_num = self.worker.stage_num
        self._register_dispatch_collect_info(MESH, dp_rank=self.rank, is_collect=True)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_worker(self) -> None:
        """Build one EnvManager per stage (no process starts yet)."""
        self.worker.init_worker()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    async def init_simulator(self, mode: str = "train") -> None:
        """Start every stage's simulator processes."""
        await asyncio.to_thread(self.worker.init_simulator, mode)

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name=MESH), blocking=False)
    async def env_interact_step(self, data: Any) -> Any:
        """Step the stage ``data.meta_info["stage_id"]`` with ``data.non_tensor_batch["actions"]``.

        Returns verl's DataProto with tensors ``full_image``, ``wrist_image``, ``state``,
        ``rews``, ``terminations``, ``truncations`` and the backend's numeric infos, and
        non-tensor ``task_descriptions``; ``meta_info == {"stage_id": stage_id}``.
        """
        result = await asyncio.to_thread(self.worker.env_interact_step, from_verl(data))
        return to_verl(result)

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name=MESH), blocking=False)
    async def reset_envs_to_state_ids(self, data: Any) -> Any:
        """Reset every stage to ``state_ids`` (and optional ``task_ids``), ``num_envs * stage_num`` rows.

        Stage ``s`` gets rows ``[s*num_envs:(s+1)*num_envs]``; the observations come back
        stage-major, as verl's EnvLoop expects.
        """
        result = await asyncio.to_thread(self.worker.reset_envs_to_state_ids, from_verl(data))
        return to_verl(result)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def get_all_state_ids(self, mode: str = "train") -> np.ndarray:
        """Every state id the backend can reset to."""
        return self.worker.get_all_state_ids(mode)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def get_state_task_ids(self, mode: str = "train") -> np.ndarray:
        """The task id of each of :meth:`get_all_state_ids`."""
        return self.worker.get_state_task_ids(mode)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    async def finish_rollout(self, mode: str = "train") -> dict[str, Any]:
        """Flush videos (``stage_{i}`` subdirectories) and return this worker's metrics since the last call."""
        return await asyncio.to_thread(self.worker.finish_rollout, mode)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def node_info(self) -> dict[str, Any]:
        """Where this worker runs: host, IP, pid and its shards' pids (envfleet's ``EnvWorker.node_info``)."""
        return self.worker.node_info()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    async def stop_simulator(self, mode: str = "train") -> None:
        """Offload: save every stage's state and free its processes; ``init_simulator`` brings them back."""
        await asyncio.to_thread(self.worker.stop_simulator, mode)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def close(self) -> None:
        """Stop every simulator process and free shared memory; returns when they are gone. Safe to call twice."""
        self.worker.close()


class EnvResourcePool(RayResourcePool):  # type: ignore[misc]
    """verl's ``RayResourcePool`` whose bundles also ask for Ray resources, memory and node labels.

    verl's pool reserves ``{"CPU": max_colocate_count}`` (and a GPU) per worker, so its
    env workers land on any node with a free CPU, the policy's GPU nodes included. This
    pool adds ``resources`` (for example ``{"sim": 1}``, offered by ``ray start --resources
    '{"sim": 8}'`` on the simulator nodes), ``memory_per_worker`` (bytes) and ``labels``
    to every bundle, as :class:`~envfleet_ray.runtime.group.EnvWorkerGroup` does; a placement no
    alive node can hold is a :class:`~envfleet_ray.runtime.placement.PlacementError` at once and
    one not granted within ``placement_timeout_s`` after it, where verl's own pool waits
    in Ray's scheduler for ever. Use it wherever verl (or verl-vla) takes a
    ``RayResourcePool``::

        pool = EnvResourcePool([num_workers], use_gpu=False, max_colocate_count=1, resources={"sim": 1})
        env_wg = RayWorkerGroup(resource_pool=pool, ray_cls_with_init=RayClassWithInitArgs(ray.remote(EnvWorker), ...))
    """

    pgs: list[Any] | None  # verl's pool sets it to None until placed

    def __init__(
        self,
        process_on_nodes: list[int] | None = None,
        use_gpu: bool = False,
        max_colocate_count: int = 1,
        *,
        resources: dict[str, float] | None = None,
        memory_per_worker: float | None = None,
        labels: dict[str, str] | None = None,
        placement_timeout_s: float = 120.0,
        check_placement: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(process_on_nodes, use_gpu=use_gpu, max_colocate_count=max_colocate_count, **kwargs)
        try:
            self.bundle = bundle_shape(float(max_colocate_count), 0.0, memory_per_worker, resources)
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from None
        self.labels = dict(labels or {})
        self.placement_timeout_s = float(placement_timeout_s)
        self.check_placement = bool(check_placement)

    def get_placement_groups(self, strategy: str = "STRICT_PACK", name: str | None = None, device_name: str = "cuda") -> list[Any]:
        """One placement group per entry of ``process_on_nodes``, each bundle :attr:`bundle` (plus the device when ``use_gpu``)."""
        if self.pgs is not None:
            return list(self.pgs)
        bundle = dict(self.bundle)
        if self.use_gpu:  # verl's device names: "cuda" is Ray's GPU, "npu" its NPU
            bundle[{"cuda": "GPU", "npu": "NPU"}.get(device_name, device_name)] = 1.0
            if self.accelerator_type is not None:
                bundle[self.accelerator_type] = 1e-4
        pgs = [reserve([bundle] * count, strategy, self.labels, self.placement_timeout_s, self.check_placement) for count in self._store]
        placed: list[Any] = sort_placement_group_by_node_ip(pgs)
        self.pgs = placed
        return list(placed)
