"""The runtime: what runs while a trainer steps its envs.

:mod:`~envfleet_ray.runtime.worker` (one worker's stages), :mod:`~envfleet_ray.runtime.group` (the
workers of a job, on Ray), :mod:`~envfleet_ray.runtime.routes` (how a step reaches each worker: a Ray
call, :mod:`~envfleet_ray.runtime.lane`, :mod:`~envfleet_ray.runtime.relay`),
:mod:`~envfleet_ray.runtime.futures` (reading the answers), :mod:`~envfleet_ray.runtime.placement` and
:mod:`~envfleet_ray.runtime.recovery` (where workers run and what a death means),
:mod:`~envfleet_ray.runtime.batch` and :mod:`~envfleet_ray.runtime.metrics` (what a step and a rollout
return), :mod:`~envfleet_ray.runtime.cluster` (starting or joining Ray).
"""
