"""envfleet-reacher: a two-link MuJoCo arm reaching a target.

Kept as its author wrote it against envfleet's plugin guide of 2026-11-30 (plugin API 1:
no ``BackendSpec.implements``, no ``api_version``), so that envfleet's tests show such a
plugin still running, with a deprecation warning naming it.
"""
