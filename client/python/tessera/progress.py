"""Progress of long transfers: tqdm's bar when tqdm is installed, a plain line on stderr
otherwise, or the caller's callback ``progress(bytes_done, bytes_total)``."""

from __future__ import annotations

import sys
from typing import Callable, Optional, Union

__all__ = ["ProgressArg", "Progress", "AUTO_THRESHOLD_BYTES"]

# A transfer this large shows a bar by itself when stderr is a terminal (progress=None).
AUTO_THRESHOLD_BYTES = 64 << 20

#: What a call's ``progress`` takes: None (a bar for long transfers to a terminal), True (always
#: a bar), False (never), or a callable given (bytes done, bytes in all).
ProgressArg = Optional[Union[bool, Callable[[int, int], None]]]


class Progress:
    """Counts the bytes of one transfer and reports them as ``progress`` asks."""

    def __init__(self, total: int, description: str, progress: ProgressArg = None) -> None:
        self.total = total
        self.done = 0
        self._callback: Optional[Callable[[int, int], None]] = None
        self._bar = None
        self._plain = False
        self._description = description
        if callable(progress):
            self._callback = progress
            return
        show = progress is True or (
            progress is None and total >= AUTO_THRESHOLD_BYTES and sys.stderr.isatty()
        )
        if not show:
            return
        try:
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=description, unit="B", unit_scale=True,
                             unit_divisor=1024, leave=False)
        except ImportError:
            self._plain = True

    def add(self, n: int) -> None:
        """``n`` more bytes went."""
        self.done += n
        if self._callback is not None:
            self._callback(self.done, self.total)
        elif self._bar is not None:
            self._bar.update(n)
        elif self._plain:
            sys.stderr.write(f"\r{self._description}: {self.done >> 20}/{self.total >> 20} MiB")
            sys.stderr.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif self._plain:
            sys.stderr.write("\n")
            self._plain = False
