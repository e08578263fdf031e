"""A session's ordered op stream (DTensorService.OpStream): ops and frees go out in order without
waiting for their answers, so Python issues them as fast as it builds them; each call's outcome
arrives later. The calls queued while the previous message was on its way go out as one
StreamCalls message, which the coordinator answers with one StreamResults message; a reader
thread records every result on its call's :class:`Outcome`, in order. At most
``MAX_UNANSWERED`` calls are outstanding (``send`` waits for room). A stream lives at most
``LIFETIME_S``; the first call after that drains it and opens the next, so calls stay in order
across streams. When a stream breaks, its unanswered calls fail UNAVAILABLE and the next call
opens a new one."""

from __future__ import annotations

import collections
import threading
import time
from typing import Any, Callable, Deque, Iterator, List, Optional, Tuple

import grpc

from .errors import TesseraError, error_for

__all__ = ["OpStream", "Outcome"]

_OK = 0
_UNAVAILABLE = grpc.StatusCode.UNAVAILABLE.value[0]
_DATA_LOSS = grpc.StatusCode.DATA_LOSS.value[0]


class Outcome:
    """The outcome of one call on the stream: ``code`` is None until its result arrives, then
    the google.rpc code (0: OK) with ``message`` and, for a described op, ``reply`` (OpReply).
    ``name`` is the tensor the call makes or frees; ``inputs`` the outcomes of the op's inputs
    that were not known when it was sent (kept until it succeeds, to name the reason of a
    failure that an input's failure caused)."""

    __slots__ = ("id", "name", "inputs", "code", "message", "reply", "_stream")

    def __init__(self, stream: "OpStream", id_: int, name: str,
                 inputs: Tuple["Outcome", ...]) -> None:
        self._stream = stream
        self.id = id_
        self.name = name
        self.inputs = inputs
        self.code: Optional[int] = None
        self.message = ""
        self.reply: Any = None

    @property
    def done(self) -> bool:
        return self.code is not None

    @property
    def failed(self) -> bool:
        return self.code is not None and self.code != _OK

    def wait(self, timeout: Optional[float]) -> bool:
        """Waits up to ``timeout`` seconds for the result; whether it came."""
        if self.code is not None:
            return True
        return self._stream._wait_for(self, timeout)

    def error(self) -> Optional[TesseraError]:
        """None if the call succeeded (or is not answered yet), else its exception: for an op
        whose input's own op failed, that failure (the coordinator only saw a missing input)."""
        if not self.failed:
            return None
        root: Outcome = self
        chain: List[str] = []
        while True:
            failed_input = next((i for i in root.inputs if i.failed), None)
            if failed_input is None:
                break
            chain.append(failed_input.name)
            root = failed_input
        why = "".join(f"its input '{n}' failed: " for n in chain)
        return error_for(root.code, f"{why}{root.message}")

    def _set(self, code: int, message: str, reply: Any) -> None:
        self.code, self.message, self.reply = code, message, reply
        if code == _OK:
            self.inputs = ()


class _Channel:
    """One gRPC OpStream call with its calls: ``queue`` not sent yet, ``outcomes`` every call not
    answered yet (sent or not), in order."""

    def __init__(self) -> None:
        self.queue: List[Any] = []
        self.outcomes: Deque[Outcome] = collections.deque()
        self.opened_at = time.monotonic()
        self.closing = False  # send what is queued, then half-close
        self.ended = False  # the call is over; nothing more is answered
        self.call: Any = None
        self.reader: Optional[threading.Thread] = None


class OpStream:
    """The ordered op stream of one transport (see the module's docstring). ``open_call(requests,
    timeout)`` starts the gRPC call and returns its response iterator. Thread-safe."""

    MAX_UNANSWERED = 4096
    LIFETIME_S = 3600.0
    CLOSE_TIMEOUT_S = 10.0
    # A stream with nothing to send or await for this long is closed by the client (the next call
    # opens another), before the coordinator's --session_stream_idle_timeout (10 min by default)
    # cuts it: a stream the client closes itself never loses a call it sent.
    IDLE_CLOSE_S = 240.0

    def __init__(self, open_call: Callable[[Iterator[Any], float], Any],
                 make_message: Callable[[List[Any]], Any]) -> None:
        self._open_call = open_call
        self._make_message = make_message
        self._cond = threading.Condition(threading.Lock())
        self._channel: Optional[_Channel] = None
        self._next_id = 1

    def send(self, call: Any, name: str = "", inputs: Tuple[Outcome, ...] = ()) -> Outcome:
        """Queues ``call`` (a StreamCall; its id is set here) and returns its outcome, known
        later. Waits while ``MAX_UNANSWERED`` calls are outstanding. Never call it from a
        finalizer: it may open a gRPC call and wait."""
        with self._cond:
            while True:
                channel = self._ready_channel()
                if len(channel.outcomes) < self.MAX_UNANSWERED:
                    break
                self._cond.wait()
            outcome = Outcome(self, self._next_id, name, inputs)
            call.id = self._next_id
            self._next_id += 1
            channel.queue.append(call)
            channel.outcomes.append(outcome)
            self._cond.notify_all()
            return outcome

    def flush(self, timeout: Optional[float]) -> bool:
        """Waits up to ``timeout`` until every call sent so far is answered; whether they are."""
        with self._cond:
            channel = self._channel
            last = channel.outcomes[-1] if channel is not None and channel.outcomes else None
        return last is None or last.wait(timeout)

    def close(self) -> None:
        """Sends what is queued, half-closes and waits up to CLOSE_TIMEOUT_S for the answers;
        what is not answered then fails UNAVAILABLE."""
        with self._cond:
            channel, self._channel = self._channel, None
        if channel is not None:
            self._finish(channel)

    # -- inside ----------------------------------------------------------------------------------

    def _wait_for(self, outcome: Outcome, timeout: Optional[float]) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: outcome.code is not None, timeout)

    def _ready_channel(self) -> _Channel:
        """The open channel, opening one when there is none or it ended, and replacing one past
        its lifetime once it has drained. ``_cond`` held."""
        channel = self._channel
        if channel is not None and not channel.ended and \
                time.monotonic() - channel.opened_at >= self.LIFETIME_S:
            # Drain the old stream first: a call on the new one must not overtake its calls.
            channel.closing = True
            self._cond.notify_all()
            if not self._cond.wait_for(lambda: channel.ended, self.CLOSE_TIMEOUT_S):
                channel.call.cancel()  # the reader fails what is left
                self._cond.wait_for(lambda: channel.ended, self.CLOSE_TIMEOUT_S)
        if channel is None or channel.ended or channel.closing:
            channel = _Channel()
            # The deadline leaves room to drain after the lifetime.
            channel.call = self._open_call(self._requests(channel),
                                           self.LIFETIME_S + 10 * self.CLOSE_TIMEOUT_S)
            channel.reader = threading.Thread(target=self._read, args=(channel,),
                                              name="tessera-op-stream", daemon=True)
            channel.reader.start()
            self._channel = channel
        return channel

    def _requests(self, channel: _Channel) -> Iterator[Any]:
        """The stream's messages: waits for the first queued call, then sends every call queued
        by then as one message. Ends (half-closes) once closing and drained."""
        while True:
            with self._cond:
                idle_since = time.monotonic()
                while not channel.queue and not channel.closing and not channel.ended:
                    if not self._cond.wait(self.IDLE_CLOSE_S) and not channel.outcomes and \
                            time.monotonic() - idle_since >= self.IDLE_CLOSE_S:
                        channel.closing = True  # idle: the next call opens another stream
                if not channel.queue:
                    return
                calls, channel.queue = channel.queue, []
            yield self._make_message(calls)

    def _read(self, channel: _Channel) -> None:
        """Records each result on its call's outcome, in order; when the stream ends, fails
        every call not answered."""
        code, why = _UNAVAILABLE, "the op stream ended before answering"
        try:
            for message in channel.call:
                with self._cond:
                    for r in message.results:
                        if not channel.outcomes or channel.outcomes[0].id != r.id:
                            expected = channel.outcomes[0].id if channel.outcomes else "none"
                            raise _Mismatch(f"the op stream answered call {r.id} where call "
                                            f"{expected} was next")
                        outcome = channel.outcomes.popleft()
                        outcome._set(r.code, r.message, r.op if r.HasField("op") else None)
                    self._cond.notify_all()
        except _Mismatch as e:
            code, why = _DATA_LOSS, str(e)
            channel.call.cancel()
        except grpc.RpcError as e:
            details = e.details() if hasattr(e, "details") else str(e)
            why = f"the op stream broke: {details}"
        except Exception as e:  # noqa: BLE001 - every failure ends the stream the same way
            why = f"the op stream broke: {e!r}"
        finally:
            with self._cond:
                channel.ended = True
                for outcome in channel.outcomes:
                    outcome._set(code, why, None)
                channel.outcomes.clear()
                channel.queue = []
                self._cond.notify_all()

    def _finish(self, channel: _Channel) -> None:
        with self._cond:
            channel.closing = True
            self._cond.notify_all()
            if not self._cond.wait_for(lambda: channel.ended, self.CLOSE_TIMEOUT_S):
                channel.call.cancel()
        if channel.reader is not None:
            channel.reader.join(self.CLOSE_TIMEOUT_S)


class _Mismatch(Exception):
    """A result out of order (a broken stream)."""
