from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from thumbctl.core.profile import Profile, Ratio, SettingError, parse_count, parse_duration, parse_ratio, parse_ratios


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1:1", Ratio(1, 1)),
        ("16:9", Ratio(16, 9)),
        ("4x3", Ratio(4, 3)),
        ("3/2", Ratio(3, 2)),
        (" 32 : 18 ", Ratio(16, 9)),
        ("2:2", Ratio(1, 1)),
        ("1:10000", Ratio(1, 10000)),
    ],
)
def test_parse_ratio_accepts_and_reduces(text: str, expected: Ratio) -> None:
    assert parse_ratio(text) == expected


@pytest.mark.parametrize("text", ["", "1", "1:", ":1", "0:1", "1:0", "a:b", "1.5:1", "-1:2", "1:2:3", "1:10001", 3])
def test_parse_ratio_rejects(text: object) -> None:
    with pytest.raises(SettingError):
        parse_ratio(text)


@given(st.integers(1, 10_000), st.integers(1, 10_000))
def test_parse_ratio_keeps_the_value(w: int, h: int) -> None:
    ratio = parse_ratio(f"{w}:{h}")
    assert ratio.w * h == ratio.h * w
    assert parse_ratio(str(ratio)) == ratio
    assert ratio.slug == f"{ratio.w}x{ratio.h}"


def test_parse_ratios_dedupes_in_order() -> None:
    assert parse_ratios(["16:9", "1:1", "32:18"]) == (Ratio(16, 9), Ratio(1, 1))
    assert parse_ratios("1:1 4:3,16:9") == (Ratio(1, 1), Ratio(4, 3), Ratio(16, 9))
    with pytest.raises(SettingError):
        parse_ratios([])
    with pytest.raises(SettingError):
        parse_ratios({"1:1": 1})


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90), ("90s", 90), ("15m", 900), ("2h30m", 9000), ("30d", 2592000), ("1w", 604800), ("250ms", 0.25)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "m", "5 parsecs", "1h-", "h1", "36501d", "99999999999", "inf", "nan"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(SettingError):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("100000000", 100_000_000),
        ("100M", 100_000_000),
        ("100MB", 100_000_000),
        ("64MiB", 64 * 2**20),
        ("1.5G", 1_500_000_000),
        ("10k", 10_000),
    ],
)
def test_parse_count(text: str, value: int) -> None:
    assert parse_count(text) == value


@pytest.mark.parametrize("text", ["", "lots", "0", "-5M", "5Q"])
def test_parse_count_rejects(text: str) -> None:
    with pytest.raises(SettingError):
        parse_count(text)


@pytest.mark.parametrize(
    "kwargs",
    [{"format": "gif"}, {"crop": "faces"}, {"size": 0}, {"quality": 101}, {"background": "white"}],
)
def test_profile_rejects_bad_values(kwargs: dict) -> None:
    with pytest.raises(SettingError):
        Profile(**kwargs)


def test_profile_defaults_match_the_contract() -> None:
    profile = Profile()
    assert [str(r) for r in profile.ratios] == ["1:1", "4:3", "16:9"]
    assert (profile.size, profile.format, profile.qualities["jpeg"], profile.crop) == (512, "jpeg", 85, "smart")
    assert profile.background == "#ffffff"
