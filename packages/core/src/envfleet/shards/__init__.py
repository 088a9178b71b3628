"""Running one stage's envs as processes: the machinery behind :class:`envfleet.ProcessEnvManager`.

A backend author never imports from here; a reader debugging a crash or a restart starts here.

==================  ==========================================================================
module              job
==================  ==========================================================================
``manager``         :class:`~envfleet.shards.manager.ProcessEnvManager`: one stage, split into shards
``calls``           starting the shards, calling them all, restarting the ones that failed
``handle``          one shard seen from the parent: send, reply_within, its process, memory, budget
``messages``        the commands (each with a typed argument) and the replies a shard returns
``wire``            framing over the socket, and packing arrays into a reply
``replies``         merging the shards' replies into one batch
``ready``           first-ready stepping: the envs that are ready step, the first ones done return
``recycling``       reusing reply buffers the caller no longer holds
``server``          the shard process itself (``python -m envfleet.shards.server``)
``shm``             the shared memory observations are written to
``janitor``         a detached process that unlinks shared memory left by a killed parent
``interpreter``     which Python a shard runs under (``train.simulator_python``), and probing it
``gpus``            the machine's CUDA GPUs and EGL devices, listed without a GL context
``rendering``       what renders a shard's images (GPU or CPU rasterizer), for the fingerprint
==================  ==========================================================================

Nothing is imported here, so that a shard process or the janitor starts without the rest.
"""
