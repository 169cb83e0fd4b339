"""The per-user folders, as platformdirs has them (with no author folder on Windows).

The config folder holds the user's config file: ``$XDG_CONFIG_HOME/thumbctl`` (``~/.config/thumbctl``)
on Linux and the BSDs, ``~/Library/Application Support/thumbctl`` on macOS, ``%APPDATA%\\thumbctl``
(roaming) on Windows. The state folder holds the default ledger: ``$XDG_STATE_HOME/thumbctl``
(``~/.local/state/thumbctl``), ``~/Library/Application Support/thumbctl``, ``%LOCALAPPDATA%\\thumbctl``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from platformdirs.api import PlatformDirsABC

APP_NAME = "thumbctl"
LEDGER_FILE_NAME = "ledger.db"


def _folders(platform: type[PlatformDirsABC] | None, *, roaming: bool) -> PlatformDirsABC:
    """platformdirs' folders of this platform (``platform``: another platform's, for tests). Imported here,
    when a folder is first asked for: ``--version``, or a command given ``--db`` and ``THUMBCTL_CONFIG``,
    never needs it (it costs about 10 ms of start-up)."""
    import platformdirs

    return (platform or platformdirs.PlatformDirs)(APP_NAME, appauthor=False, roaming=roaming)


def config_dir(platform: type[PlatformDirsABC] | None = None) -> Path:
    """The per-user config folder: where ``config.toml`` is looked for."""
    return Path(_folders(platform, roaming=True).user_config_dir)


def state_dir(platform: type[PlatformDirsABC] | None = None) -> Path:
    """The per-user state folder, where the default ledger lives."""
    return Path(_folders(platform, roaming=False).user_state_dir)


def default_ledger_path() -> Path:
    """``ledger.db`` in the per-user state folder."""
    return state_dir() / LEDGER_FILE_NAME


def old_default_ledger_path() -> Path:
    """Where the default ledger was before it moved to the state folder: the config folder."""
    return config_dir() / LEDGER_FILE_NAME
