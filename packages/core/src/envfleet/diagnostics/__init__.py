"""Checking a machine and a backend: what ``envfleet doctor`` and ``envfleet backends --check`` run.

==================  ==========================================================================
module              job
==================  ==========================================================================
``check``           build the smallest config of a backend and step it once
``measure``         time a backend's reset and step on this machine
``gl_probe``        which OpenGL stacks (EGL, OSMesa) a fresh process can open
``egl_cuda``        matching EGL devices to CUDA GPUs
``vulkan_probe``    which Vulkan device a fresh process (SAPIEN) would render on
==================  ==========================================================================
"""
