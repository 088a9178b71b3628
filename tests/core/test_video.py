"""Video writing's install hint names an extra that exists."""

from __future__ import annotations

import sys
from importlib.metadata import metadata, requires

import pytest

from envfleet.errors import ConfigError
from envfleet.video import require_video_deps


def test_the_video_extra_exists_and_holds_the_video_packages() -> None:
    assert "video" in (metadata("envfleet").get_all("Provides-Extra") or [])
    video = {r.split(">")[0].strip().lower() for r in requires("envfleet") or [] if "extra ==" in r and "video" in r.split(";")[1]}
    assert video == {"imageio", "imageio-ffmpeg", "pillow"}


def test_missing_video_packages_name_the_extra(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)  # import fails as if not installed
    with pytest.raises(ConfigError, match=r"pip install 'envfleet\[video\]'"):
        require_video_deps()
