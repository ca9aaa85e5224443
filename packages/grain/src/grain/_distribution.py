"""Which distribution installed the `grain` import package, and a warning when two did.

This library is published as the distribution `grainline`; Google's Grain owns
the name `grain` on the registry. Both install the same import package,
`grain/`, and pip does not refuse to install one over the other: each file both
ship is replaced by the one installed last, the other's remaining files stay,
and each distribution's record still lists the shared files, so uninstalling
either one deletes files the other needs. Only a clean reinstall of one of them
repairs that.

`import grain` runs this check when our `grain/__init__.py` is the one on disk
(ours was installed last, the usual way in: Grain first, then `grainline`).
When Google's `grain` was installed last, its `__init__.py` runs instead and
none of our code is reached at import; docs/compatibility.md ("Coming from
Grain") tells users how to see that and fix it. A check at interpreter start-up
(a `.pth` hook) could catch that order too, but would cost every Python process
in the environment a metadata scan, so there is none.

The check is one metadata lookup by name (about 0.1 ms once `__version__` has
been looked up, which already scanned the environment's metadata).
"""

from __future__ import annotations

import warnings
from importlib import metadata

DISTRIBUTION = "grainline"
"""The name this library is published under (`pip install grainline`)."""

_GOOGLE_DISTRIBUTION = "grain"


class GrainDistributionConflictWarning(UserWarning):
    """Google's `grain` distribution is installed in the same environment as `grainline`.

    Both write the `grain` import package, so `import grain` may run a mixture of
    the two. The message names both versions and the fix: uninstall both, then
    install the one you want.
    """


def _conflicting_version() -> str | None:
    """The version of a distribution named `grain` installed here, or None."""
    try:
        return metadata.distribution(_GOOGLE_DISTRIBUTION).version
    except metadata.PackageNotFoundError:
        return None


def _conflict_message(ours: str, theirs: str) -> str:
    return (
        f"two installed distributions write the `grain` import package: "
        f"{DISTRIBUTION!r} {ours} (this library) and {_GOOGLE_DISTRIBUTION!r} {theirs} "
        f"(Google's Grain). The one installed last replaced the files both ship, so "
        f"`import grain` may run parts of each, and uninstalling only one of them deletes "
        f"files the other needs. Keep one: `pip uninstall -y grain grainline && pip install "
        f"grainline` (or `... && pip install grain` for Google's Grain)."
    )


def _warn_if_conflicting(ours: str) -> None:
    """Warns once per import of `grain` when Google's `grain` is installed beside us."""
    theirs = _conflicting_version()
    if theirs is not None:
        # stacklevel 2 places it in grain/__init__.py whoever imported grain first: one
        # location, so `-W ignore::UserWarning:grain` or a `module="grain"` filter holds.
        warnings.warn(
            GrainDistributionConflictWarning(_conflict_message(ours, theirs)), stacklevel=2
        )
