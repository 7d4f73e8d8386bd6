"""The ffmpeg the video side runs (assembly, loudness, the listener's check, thumbnails):
imageio-ffmpeg's static build, which has xfade and libass. A module of its own, so that the
assembly and the loudness measure both use it without importing each other."""

from __future__ import annotations


def ffmpeg_exe() -> str:
    import imageio_ffmpeg  # the video extra's, like moviepy: imported when a command is built

    return imageio_ffmpeg.get_ffmpeg_exe()
