"""Shared fixtures: real ledgers and real images in tmp_path."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from thumbctl import Ledger
from thumbctl.config import CONFIG_ENV, KEYS, PROFILE_ENV

from support import check_invariants, make_image

REPO = Path(__file__).resolve().parent.parent
SAMPLE_IMAGES = REPO / "sample_images"


@pytest.fixture(autouse=True)
def isolated_settings(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither the per-user config file nor THUMBCTL_* settings of the machine reach a test."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("config-home")))
    for name in (CONFIG_ENV, PROFILE_ENV, *(key.env for key in KEYS)):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def ledger(tmp_path: Path):
    """A fresh ledger; invariant 1 is checked again when the test ends."""
    with Ledger(tmp_path / "ledger.db") as led:
        yield led
        check_invariants(led)


@pytest.fixture
def photos(tmp_path: Path) -> Path:
    """A folder of real photos: a few from sample_images plus generated PNG/JPEG/WebP."""
    root = tmp_path / "photos"
    (root / "rooms").mkdir(parents=True)
    shutil.copy(SAMPLE_IMAGES / "orientation" / "Landscape_6.jpg", root / "rooms" / "living.jpg")
    shutil.copy(SAMPLE_IMAGES / "public-domain" / "sk-coffee.png", root / "coffee.png")
    make_image(root / "rooms" / "kitchen.webp", (320, 200), "WEBP", seed=1)
    make_image(root / "garden.jpeg", (200, 320), "JPEG", seed=2)
    return root


@pytest.fixture
def out_dir(tmp_path: Path) -> Path:
    return tmp_path / "out"
