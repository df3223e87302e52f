"""The video path: request validation, geometry, keyframes, ffmpeg mux and verification.

The engine renders frames (and audio) through its registered ``video_generate``;
everything here decides, before and after that render, whether hours of rendering
produce the right thing. Entry point: :class:`harness.video.pipeline.VideoPipeline`.
"""

from __future__ import annotations
