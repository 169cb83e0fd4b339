"""The review page's list (cropreview/photos.py): photos grouped from catalogue entries, worst score
first (at the ratio the list filters on, when it does), the low-score and changed filters, pages,
and whether a ratio's thumbnails show its fix."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from thumbctl.core.catalogue import CatalogueEntry
from thumbctl.cropreview.photos import Listing, Shown, groups_of, photos_of

RATIOS = ("1:1", "4:3", "16:9")
Point = tuple[float, float]


def entry(
    photo: int,
    ratio: str,
    score: float | None,
    *,
    focus: Point | None = None,
    rendered: Point | None = None,
    changed_at: str = "2026-01-01T00:00:00Z",
) -> CatalogueEntry:
    crop = {} if score is None else {"crop": {"box": [0, 0, 10, 10], "score": score, "policy": "smart"}}
    return CatalogueEntry(
        name=f"/out/p{photo}.{ratio.replace(':', 'x')}.jpg",
        out_dir="/out",
        source=f"/photos/p{photo}.jpg",
        source_root="/photos",
        source_digest=f"{photo:064x}",
        ratio=ratio,
        size=320,
        format="jpeg",
        fit="cover",
        result={"width": 10, "height": 10, **crop},
        focus=focus,
        rendered_focus=rendered,
        object_path=f"/store/{photo}{ratio}",
        source_size=(100, 80),
        alt="",
        version="v1",
        changed_at=changed_at,
        batch_id="b_1",
    )


scores = st.one_of(st.none(), st.floats(0, 1))
catalogues = st.dictionaries(
    st.integers(0, 60), st.fixed_dictionaries({ratio: scores for ratio in RATIOS}), min_size=1, max_size=30
)


def entries_of(catalogue: dict[int, dict[str, float | None]]) -> list[CatalogueEntry]:
    return [entry(photo, ratio, score) for photo, at in catalogue.items() for ratio, score in at.items()]


def order_key(score: float | None, source: str) -> tuple[bool, float, str]:
    return score is not None, score if score is not None else 0.0, source


def worst(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return min(known) if known else None


@given(catalogues)
def test_photos_come_worst_score_first_with_unknown_scores_before_all(catalogue) -> None:
    photos = photos_of(entries_of(catalogue), {})
    keys = [order_key(p.score, p.shown) for p in photos]
    assert keys == sorted(keys) and len(photos) == len(catalogue)
    for photo in photos:
        assert photo.score == worst(list(catalogue[int(photo.digest, 16)].values()))


@given(catalogues, st.sampled_from(RATIOS), st.floats(0, 1), st.integers(0, 40), st.integers(1, 40))
def test_a_ratio_filter_orders_and_filters_by_that_ratio_s_score(catalogue, ratio, below, offset, limit) -> None:
    groups = groups_of(entries_of(catalogue), {})
    total, page = Listing(ratio=ratio, offset=offset, limit=limit).page(groups)
    whole = sorted(catalogue, key=lambda n: order_key(catalogue[n][ratio], f"p{n}.jpg"))
    assert total == len(catalogue)
    assert [int(p.digest, 16) for p in page] == whole[offset : offset + limit]
    total, low = Listing(shown=Shown.LOW, ratio=ratio, below=below, limit=100).page(groups)
    wanted = [n for n in whole if (s := catalogue[n][ratio]) is not None and s < below]
    assert total == len(wanted) and [int(p.digest, 16) for p in low] == wanted


def test_the_changed_filter_keeps_photos_never_approved_or_changed_since() -> None:
    entries = [entry(1, "1:1", 0.5), entry(2, "1:1", 0.6), entry(3, "1:1", 0.7, changed_at="2026-03-01T00:00:00Z")]
    reviews = {f"{2:064x}": "2026-02-01T00:00:00Z", f"{3:064x}": "2026-02-01T00:00:00Z"}
    total, page = Listing(shown=Shown.CHANGED).page(groups_of(entries, reviews))
    assert total == 2 and [int(p.digest, 16) for p in page] == [1, 3]


def test_a_ratio_is_rendered_only_while_every_name_shows_its_fix() -> None:
    fix, earlier = (0.2, 0.5), (0.8, 0.5)
    cases = {
        "smart crop": ([entry(1, "1:1", 0.5)], True),
        "fix rendered": ([entry(1, "1:1", 0.5, focus=fix, rendered=fix)], True),
        "fix not rendered": ([entry(1, "1:1", 0.5, focus=fix)], False),
        "over an earlier fix": ([entry(1, "1:1", 0.5, focus=fix, rendered=earlier)], False),
        "reset not rendered": ([entry(1, "1:1", 0.5, rendered=earlier)], False),
    }
    for case, (entries, rendered) in cases.items():
        (photo,) = photos_of(entries, {})
        assert photo.ratio("1:1").rendered is rendered, case
