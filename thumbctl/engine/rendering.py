"""What one derivative's pixels are: its geometry, its framing (the window of its ratio, or the
whole photo placed on the canvas), resampling and encoding.

A claim's source is analysed once (:meth:`Rendering.analyse`: the crop analysis, and the trimmed
box when the batch trims), on the analysis copy, which depends on the source alone. Each ratio's
window is chosen once and shared by every size and format; each derivative key is rendered once
per claim (:class:`SharedRender`) for every claimed item that has it.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

from PIL import Image

from ..core.encoders import recorded_encoder
from ..core.errors import ItemFailure
from ..core.profile import DEFAULT_TRIM_TOLERANCE, TRANSPARENT, parse_ratio
from ..imaging import (
    ALPHA_FORMATS,
    ANALYSIS_REFERENCE_SIZE,
    CropAnalysis,
    CropChoice,
    DecodedSource,
    Geometry,
    SourceDecoder,
    decode_scale,
    encode,
    placeholder_of,
    resample,
)
from ..imaging.fit import Box, Placement, analysis_region, canvas_size, fit_geometry, pad, place, trim_box
from ..imaging.window import fixed_window
from ..ledger import Claim, ClaimedItem

#: Stands in for the crop, resample and encode of a render: the encoded bytes of an output of
#: ``geometry`` in ``format``. For benchmarks of the queue only, passed to ``run_worker`` from
#: Python; no command or setting reaches it.
Renderer = Callable[[Geometry, str], bytes]
#: The context a render's encode is timed in (the worker's ``encode_ms``).
Timer = Callable[[], AbstractContextManager[None]]


@dataclass(frozen=True)
class Framing:
    """What a derivative kept of its source: the crop window (cover) or the placement (contain),
    and the trimmed box when the batch trims."""

    choice: CropChoice
    fit: str = "cover"
    placement: Placement | None = None
    trim: Box | None = None

    def to_result(self) -> dict[str, object]:
        """The item result's part that says what was kept (a cover output's is what it always was)."""
        result: dict[str, object] = {"crop": self.choice.to_json()}
        if self.fit != "cover":
            result["fit"] = self.fit
        if self.placement is not None:
            result["placed"] = list(self.placement.placed)
        if self.trim is not None:
            result["trim"] = list(self.trim)
        return result


@dataclass
class SharedRender:
    """One derivative key's output, rendered once per claim for every claimed item with that key."""

    geometry: Geometry
    format: str
    #: The encoded bytes and what they kept of the source, once rendered.
    output: tuple[bytes, Framing] | None = None
    #: The render or its verification failed: every item sharing it fails the same way.
    error: Exception | None = None
    verified: bool = False


def decoder_background(profile: dict[str, object]) -> str:
    """The colour transparency is flattened onto for outputs without alpha and the analysis copy
    (a transparent background only goes with formats that keep alpha)."""
    background = str(profile["background"])
    return "#ffffff" if background == TRANSPARENT else background


class Rendering:
    """The pixels of a claim's derivatives."""

    def __init__(self, claim: Claim, renderer: Renderer | None = None) -> None:
        self.claim = claim
        self.profile = claim.profile
        self.renderer = renderer
        self.upscale = bool(self.profile["upscale"])
        self.geometries = {
            item.row: fit_geometry(
                claim.source_width, claim.source_height, parse_ratio(item.ratio), item.size, self.upscale, item.fit
            )
            for item in claim.items
        }
        #: The window of each (ratio, focus), chosen once and shared by every size and format.
        self.choices: dict[tuple[str, tuple[float, float] | None], CropChoice] = {}
        self.analysis: CropAnalysis | None = None
        #: The trimmed box (upright source pixels) when the batch trims.
        self.trim: Box | None = None
        #: The crop analysis inside the trimmed box (cover outputs of a trimmed source).
        self.trimmed_analysis: CropAnalysis | None = None
        #: The dominant colour and tiny image of each box shown, made once (``imaging.placeholder``).
        self.placeholders: dict[Box, dict[str, str]] = {}

    def analyse(self, decoder: SourceDecoder) -> CropAnalysis:
        """The source's crop analysis (and trimmed box), on the analysis copy."""
        w, h = self.claim.source_width, self.claim.source_height
        copy = decoder.analysis_copy(decode_scale(w, h, ANALYSIS_REFERENCE_SIZE))
        policy = str(self.profile["crop"])
        self.analysis = CropAnalysis(copy, w, h, policy)
        if "trim" in self.profile:
            tolerance = int(self.profile.get("trim", DEFAULT_TRIM_TOLERANCE))
            box = trim_box(copy, w, h, tolerance)
            if box == (0, 0, w, h):  # nothing to trim: framed exactly as untrimmed
                return self.analysis
            self.trim = box
            box_w, box_h = self.trim[2] - self.trim[0], self.trim[3] - self.trim[1]
            self.trimmed_analysis = CropAnalysis(analysis_region(copy, self.trim, w, h), box_w, box_h, policy)
        return self.analysis

    def decode_scales(self) -> set[float]:
        """Every scale the claim decodes its source at: each item's size, and the analysis copy."""
        w, h = self.claim.source_width, self.claim.source_height
        scales = {decode_scale(w, h, item.size) for item in self.claim.items}
        return scales | {decode_scale(w, h, ANALYSIS_REFERENCE_SIZE)}

    def decoded_for(self, decoder: SourceDecoder, item: ClaimedItem) -> DecodedSource:
        """The decode an item's size and format render from: made for that size alone, so the
        output's bytes are a function of its derivative key."""
        scale = decode_scale(self.claim.source_width, self.claim.source_height, item.size)
        return decoder.decoded(scale, keep_alpha=item.format in ALPHA_FORMATS)

    def shared_for(self, item: ClaimedItem) -> SharedRender:
        return SharedRender(self.geometries[item.row], item.format)

    def rendered(
        self, decoded: DecodedSource, item: ClaimedItem, shared: SharedRender, timed: Timer
    ) -> tuple[bytes, Framing]:
        """The derivative's bytes and framing: made for the first item of the claim with its key,
        reused after. ``timed`` is the context the encode is timed in."""
        if shared.error is not None:
            raise shared.error
        if shared.output is None:
            try:
                if item.fit == "contain":
                    shared.output = self._contained(decoded, item, shared, timed)
                else:
                    framing = self._window(item, shared.geometry)
                    with timed():
                        shared.output = self._render(decoded, framing.choice.box, shared), framing
            except (ItemFailure, OSError) as exc:
                shared.error = exc
                raise
        return shared.output

    def _window(self, item: ClaimedItem, geometry: Geometry) -> Framing:
        """The window of the item's ratio (and focus), chosen once: the window of a ratio depends
        only on the source, not on the size, so every size shows the same framing. A trimmed
        source's window is the largest of the ratio inside the trimmed box."""
        key = (item.ratio, item.focus)
        if key not in self.choices:
            self.choices[key] = self._choose(item, geometry)
        return Framing(self.choices[key], trim=self.trim)

    def window_of(self, item: ClaimedItem) -> Framing:
        """The framing of a cover item, chosen as its render chooses it (after :meth:`analyse`)."""
        return self._window(item, self.geometries[item.row])

    def placeholder(self, framing: Framing) -> dict[str, str]:
        """What a page shows while a derivative loads: the placeholder of the part of the source it
        shows (a cover output's window; a contained one's whole, or trimmed, photo, without the
        padding), made once per box from the analysis copy, so every size and format shares it."""
        if self.analysis is None or self.renderer is not None or self.profile["background"] == TRANSPARENT:
            return {}  # transparent pixels would show the placeholder behind the loaded file
        box = framing.choice.box
        if box not in self.placeholders:
            w, h = self.claim.source_width, self.claim.source_height
            self.placeholders[box] = placeholder_of(self.analysis.preview(), w, h, box).to_json()
        return self.placeholders[box]

    def _choose(self, item: ClaimedItem, geometry: Geometry) -> CropChoice:
        assert self.analysis is not None
        if item.focus is not None:
            w, h = self.claim.source_width, self.claim.source_height
            return CropChoice(
                fixed_window(w, h, parse_ratio(item.ratio), item.fit, self.trim, item.focus), 1.0, "focus"
            )
        if self.trim is None or self.trimmed_analysis is None:
            return self.analysis.choose(geometry, item.focus)
        left, top, right, bottom = self.trim
        inside = fit_geometry(right - left, bottom - top, parse_ratio(item.ratio), item.size, True, "cover")
        choice = self.trimmed_analysis.choose(inside, item.focus)
        x0, y0, x1, y1 = choice.box
        return CropChoice((x0 + left, y0 + top, x1 + left, y1 + top), choice.score, choice.policy)

    def _contained(
        self, decoded: DecodedSource, item: ClaimedItem, shared: SharedRender, timed: Timer
    ) -> tuple[bytes, Framing]:
        """The whole (trimmed) photo placed on the ratio's canvas and padded."""
        w, h = self.claim.source_width, self.claim.source_height
        box = self.trim or (0, 0, w, h)
        canvas = canvas_size(parse_ratio(item.ratio), item.size)
        placement = place(box, canvas, self.upscale)
        framing = Framing(CropChoice(box, 1.0, "contain"), "contain", placement, self.trim)
        with timed():
            if self.renderer is not None:
                return self.renderer(shared.geometry, shared.format), framing
            left, top, right, bottom = placement.placed
            photo = resample(decoded, box, right - left, bottom - top)
            image = pad(photo, canvas, placement.placed, str(self.profile["background"]))
            return self._encode(image, shared.format), framing

    def _render(self, decoded: DecodedSource, box: tuple[int, int, int, int], shared: SharedRender) -> bytes:
        geometry = shared.geometry
        if self.renderer is not None:
            return self.renderer(geometry, shared.format)
        image = resample(decoded, box, geometry.out_w, geometry.out_h)
        return self._encode(image, shared.format)

    def _encode(self, image: Image.Image, fmt: str) -> bytes:
        quality, effort = recorded_encoder(self.claim.profile, fmt)
        return encode(image, fmt, quality, effort=effort)
