"""Partition vs conditioning: refuse combinations the declared checkpoint cannot render.

The FL2VA and Ref2VA DiTs are byte-identical in structure (quantized community
files even lose the metadata), so the partition is declared, never detected. A
mismatch does not fail cleanly: reference conditioning fed to the FL2VA DiT
renders for hours and returns frames covered in a coloured checkerboard. These
checks therefore run before the engine is called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.core.errors import VideoError, did_you_mean
from harness.video.options import PARTITIONS
from harness.video.request import VideoRequest

if TYPE_CHECKING:
    from harness.families.table import VideoFamily

#: What each partition refuses, and what to use instead.
_FL2VA_REFUSES = ("ref_image", "ref_video", "audio")
_REF2VA_REFUSES = ("start_image", "end_image")


def resolve_partition(declared: str | None, family: VideoFamily | None = None) -> tuple[str, list[str]]:
    """The effective partition and any warning; undeclared means FL2VA.

    ``t2va`` maps to ``fl2va``: text-to-video is served by the FL2VA checkpoint. Undeclared
    warns only for a family whose partitions' checkpoints cannot be told apart.

    :param family: whose partitions the declared one must be.
    """
    if declared is None:
        if family is not None and not family.declare_partition:
            return "fl2va", []
        return "fl2va", [
            "video_partition is not declared: assuming fl2va (the FL2VA DiT). "
            "Declare video_partition: fl2va or ref2va in the model config; a wrong "
            "guess renders for hours and returns garbage"]
    name = declared.strip().lower()
    known = family.partitions if family is not None else PARTITIONS
    if name not in known:
        whose = f" of the {family.name} family" if family is not None else ""
        msg = (f"unknown video_partition {declared!r}{whose}{did_you_mean(name, known)}; "
               f"expected one of {', '.join(known)}")
        raise VideoError(msg)
    return ("fl2va" if name == "t2va" else name), []


def check_partition(declared: str | None, request: VideoRequest,
                    family: VideoFamily | None = None) -> tuple[str, list[str]]:
    """Refuse conditioning the declared partition cannot take.

    :return: the effective partition and warnings.
    :raises VideoError: naming every refused key and what to do instead.
    """
    partition, warnings = resolve_partition(declared, family)
    given = request.given()
    if partition == "fl2va":
        bad = [k for k in _FL2VA_REFUSES if k in given]
        if bad:
            msg = (f"video_partition {declared or 'fl2va (assumed)'} cannot take "
                   f"{', '.join(bad)}: reference conditioning on the FL2VA DiT renders for hours "
                   "and returns a checkerboard. Use start_image (and end_image) for keyframe "
                   "conditioning, or, if this DiT is the Ref2VA checkpoint, declare "
                   "video_partition: ref2va in the model config.")
            raise VideoError(msg)
    else:
        bad = [k for k in _REF2VA_REFUSES if k in given]
        if bad:
            msg = (f"video_partition ref2va cannot take keyframes ({', '.join(bad)}): the "
                   "Ref2VA DiT conditions on references. Use ref_image / ref_video, or load "
                   "the FL2VA checkpoint with video_partition: fl2va for keyframes.")
            raise VideoError(msg)
    return partition, warnings
