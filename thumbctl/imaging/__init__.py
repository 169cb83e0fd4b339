"""All the pixels: sniffing and probing sources, decoding, cropping, resampling, encoding.

Pure functions of bytes and settings; no ledger, no output folder.

Imports: :mod:`thumbctl.core` only.
"""

from ..core.profile import ANALYSIS_REFERENCE_SIZE
from .crop import CropAnalysis, CropChoice, Geometry, decode_scale, focus_box, output_geometry
from .decode import DecodedSource, SourceDecoder, decode_source, flatten
from .encode import ALPHA_FORMATS, SRGB_PROFILE, encode, preview_jpeg, resample, verify_output
from .fit import fit_geometry
from .formats import PILLOW_FORMATS, SNIFF_BYTES, SourceInfo, check_supported, heif_available, probe, sniff_format
from .placeholder import Placeholder, placeholder_of

__all__ = [
    "ALPHA_FORMATS",
    "ANALYSIS_REFERENCE_SIZE",
    "PILLOW_FORMATS",
    "Placeholder",
    "SNIFF_BYTES",
    "SRGB_PROFILE",
    "CropAnalysis",
    "CropChoice",
    "DecodedSource",
    "Geometry",
    "SourceDecoder",
    "SourceInfo",
    "check_supported",
    "decode_scale",
    "decode_source",
    "encode",
    "fit_geometry",
    "flatten",
    "focus_box",
    "heif_available",
    "output_geometry",
    "placeholder_of",
    "preview_jpeg",
    "probe",
    "resample",
    "sniff_format",
    "verify_output",
]
