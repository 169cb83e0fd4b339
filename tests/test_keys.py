"""Derivative keys: one size and one format keep the key they always had; a set's derivatives share it."""

from __future__ import annotations

import pytest

from thumbctl.core.keys import derivative_key
from thumbctl.core.profile import Profile, Ratio

DIGEST = "ab" * 32


@pytest.mark.parametrize(
    ("ratio", "profile", "focus", "key"),
    [  # the keys the release before derivative sets computed (existing objects keep being reused)
        (Ratio(16, 9), Profile(), None, "9cdb97d7a321ec3b3a61fe4fa0d9154b5502c80b96f432188b7b845565cae784"),
        (
            Ratio(1, 1),
            Profile(size=640, format="webp", quality=80),
            (0.25, 0.75),
            "7072ed275ad9e19f61a42f339cdbbd7430e1f284b46b1d56787116c7b5b04df2",
        ),
    ],
)
def test_a_one_size_one_format_key_is_unchanged(ratio: Ratio, profile: Profile, focus, key: str):
    assert derivative_key(DIGEST, ratio, profile, focus) == key


def test_a_derivative_of_a_set_has_the_key_of_the_same_derivative_asked_alone():
    a_set = Profile(size=(320, 640, 1280), format=("avif", "webp", "jpeg"))
    keys = {
        (size, fmt): derivative_key(DIGEST, Ratio(4, 3), a_set.variant(size, fmt), None)
        for size in a_set.sizes
        for fmt in a_set.formats
    }
    assert len(set(keys.values())) == 9
    for (size, fmt), key in keys.items():
        assert key == derivative_key(DIGEST, Ratio(4, 3), Profile(size=size, format=fmt), None)


def test_a_set_has_no_single_key():
    with pytest.raises(ValueError, match="one size and one format"):
        derivative_key(DIGEST, Ratio(1, 1), Profile(size=(320, 640)), None)


@pytest.mark.parametrize(
    ("profile", "focus", "changed"),
    [
        (Profile(size=512), None, False),  # the reference size: framed as before, key as before
        (Profile(size=640), (0.25, 0.75), False),  # a focus point frames it, no analysis
        (Profile(size=640, crop="center"), None, False),  # no analysis either
        (Profile(size=640), None, True),  # framed by the reference analysis now, not its own decode's
        (Profile(size=1280, crop="entropy"), None, True),
    ],
)
def test_only_a_derivative_framed_differently_than_before_gets_a_new_key(
    profile: Profile, focus: tuple[float, float] | None, changed: bool
) -> None:
    """Objects rendered before sets of sizes were framed on each size's own decode; where the
    framing may now differ, the key differs too, so an old object is never taken for a new one."""
    from thumbctl.core.keys import digest_json

    before = digest_json(
        {"source": DIGEST, "ratio": "1:1", "focus": list(focus) if focus else None, "encoder": profile.encoder_settings}
    )
    assert (derivative_key(DIGEST, Ratio(1, 1), profile, focus) != before) is changed
