"""Reads of a daemon's store from code on the same node, without a network hop.

:class:`LocalReads` opens the store in a daemon's data directory through a secondary
instance of its own (:mod:`epochstate.daemon.store.secondary_catalog`) and serves the
``epochstate.v1.EpochState`` reads with the daemon's own servicer, called in the
caller's thread: the same selectors, the same errors (the same status codes and
``ErrorInfo`` reasons) and, for a pinned read, the same response bytes. It hands
them out as a :class:`grpc.Channel`, so the client's stubs, its typed errors and its
decoding are the ones every other target uses.

Who may read is decided by the store directory's permissions (as the daemon's Unix
socket is): the caller needs read access to its files, nothing else. The reader
writes nothing there. It follows no job and reports no epoch (those calls need the
daemon: FAILED_PRECONDITION), and it resolves no ``aligned_with`` selector (that needs
ZooKeeper).
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any, NoReturn

import grpc

from epochstate.core import reasons
from epochstate.core.errors import EpochStateError
from epochstate.daemon.server.secondary_service import SecondaryService
from epochstate.daemon.server.status import rich_status
from epochstate.daemon.store.catalog import JobEntry
from epochstate.daemon.store.secondary import SecondaryStore
from epochstate.daemon.store.secondary_catalog import SecondaryCatalog
from epochstate.v1 import epochstate_pb2 as pb

_PREFIX = "/" + pb.DESCRIPTOR.services_by_name["EpochState"].full_name + "/"


class ReadOnlyReader(EpochStateError):
    """A call that needs the daemon itself (following a job, reporting an epoch): an
    in-process reader holds the read role only."""

    reason = reasons.ROLE_MISSING


class _NoIngest:
    """The ingest control of a reader: it has none."""

    def follow(self, job: str, checkpoint: str) -> JobEntry:
        raise ReadOnlyReader(
            f"an in-process reader cannot follow job {job!r} (it has the read role only): ask the daemon",
            metadata={"role": "admin"},
        )

    def poke(self, job: str, epoch: int | None = None, run_id: str = "", query_id: str = "") -> None:
        raise ReadOnlyReader(
            f"an in-process reader takes no reports of job {job!r} (it has the read role only): "
            f"report to the daemon",
            metadata={"role": "report"},
        )


class LocalReads:
    """The reads of the daemon whose data directory is ``data_dir``, in this process.

    ``catch_up_interval``: how often the reader looks for newly ingested epochs (a read
    asking for an epoch it has not seen yet looks at once). Close it when done.

    Raises:
        NoStore: ``data_dir`` holds no daemon's store this process can read.
        LayoutMismatch: the store has another layout version than this release reads.
    """

    def __init__(
        self, data_dir: Path | str, *, catch_up_interval: float = 0.02, max_wait: float | None = 60.0
    ) -> None:
        self._workdir = Path(tempfile.mkdtemp(prefix="epochstate-reader-"))
        try:
            store = SecondaryStore(Path(data_dir) / "store", self._workdir)
        except BaseException:
            shutil.rmtree(self._workdir, ignore_errors=True)
            raise
        self.secondary = SecondaryCatalog(store, catch_up_interval)
        self.service = SecondaryService(self.secondary, ingest=_NoIngest(), max_wait=max_wait)
        self.secondary.start()

    def channel(self) -> grpc.Channel:
        """A channel whose EpochState calls this reader answers (closing it closes the reader)."""
        return LocalChannel(self)

    def close(self) -> None:
        self.service.close()
        self.secondary.close()
        shutil.rmtree(self._workdir, ignore_errors=True)


class LocalCallError(grpc.RpcError, grpc.Call):
    """A call the reader answered with an error status (as a remote call would fail)."""

    def __init__(self, status: grpc.Status) -> None:
        super().__init__(status.details)
        self._status = status

    def code(self) -> grpc.StatusCode:
        code: grpc.StatusCode = self._status.code
        return code

    def details(self) -> str:
        details: str = self._status.details
        return details

    def trailing_metadata(self) -> Any:
        return self._status.trailing_metadata

    def initial_metadata(self) -> Any:
        return ()

    def is_active(self) -> bool:
        return False

    def time_remaining(self) -> float:
        return 0.0

    def cancel(self) -> bool:
        return False

    def add_callback(self, callback: Callable[[], None]) -> bool:
        return False


class _Context:
    """The servicer context of one in-process call."""

    def __init__(self, timeout: float | None, closed: threading.Event) -> None:
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._closed = closed
        self._callbacks: list[Callable[[], None]] = []
        self._done = False

    def time_remaining(self) -> float | None:
        return None if self._deadline is None else max(0.0, self._deadline - time.monotonic())

    def is_active(self) -> bool:
        return not (self._done or self._closed.is_set())

    def add_callback(self, callback: Callable[[], None]) -> bool:
        self._callbacks.append(callback)
        return True

    def abort_with_status(self, status: grpc.Status) -> NoReturn:
        raise LocalCallError(status)

    def abort(self, code: grpc.StatusCode, details: str) -> NoReturn:
        raise LocalCallError(_Status(code, details, ()))

    def end(self) -> None:
        self._done = True
        for callback in self._callbacks:
            callback()


class _Status(grpc.Status):
    def __init__(self, code: grpc.StatusCode, details: str, trailing_metadata: Any) -> None:
        self.code, self.details, self.trailing_metadata = code, details, trailing_metadata


class _Unary:
    def __init__(self, channel: LocalChannel, name: str, deserialize: Callable[[bytes], Any] | None) -> None:
        self._closed = channel.closed
        self._name = name
        self._behavior = getattr(channel.reads.service, name, None)
        self._deserialize = deserialize

    def __call__(self, request: Any, timeout: float | None = None, **ignored: Any) -> Any:
        if self._closed.is_set():
            raise LocalCallError(_Status(grpc.StatusCode.CANCELLED, "the channel is closed", ()))
        if self._behavior is None:
            raise _unimplemented(self._name)
        context = _Context(timeout, self._closed)
        try:
            response = self._behavior(request, context)
        except EpochStateError as error:  # raised outside a handler's own error table
            raise LocalCallError(rich_status(error)) from None
        finally:
            context.end()
        if isinstance(response, bytes) and self._deserialize is not None:
            return self._deserialize(response)
        return response

    def future(self, request: Any, timeout: float | None = None, **ignored: Any) -> _Answered:
        """The call as a future, as a stub's ``future`` gives it: answered in this thread
        before it is returned (there is no network to overlap with)."""
        try:
            return _Answered(self(request, timeout), None)
        except LocalCallError as error:
            return _Answered(None, error)


class _Answered(grpc.Future):  # type: ignore[type-arg]
    """A finished call: its response or its error."""

    def __init__(self, response: Any, error: LocalCallError | None) -> None:
        self._response, self._error = response, error

    def result(self, timeout: float | None = None) -> Any:
        if self._error is not None:
            raise self._error
        return self._response

    def exception(self, timeout: float | None = None) -> LocalCallError | None:
        return self._error

    def traceback(self, timeout: float | None = None) -> None:
        return None

    def done(self) -> bool:
        return True

    def running(self) -> bool:
        return False

    def cancelled(self) -> bool:
        return False

    def cancel(self) -> bool:
        return False

    def add_done_callback(self, fn: Callable[[Any], None]) -> None:
        fn(self)


class _Responses:
    """A stream's responses, which the caller may cancel as a gRPC call's."""

    def __init__(self, responses: Generator[Any, None, None]) -> None:
        self._responses = responses

    def __iter__(self) -> _Responses:
        return self

    def __next__(self) -> Any:
        return next(self._responses)

    def cancel(self) -> bool:
        self._responses.close()
        return True


class _Stream:
    def __init__(self, channel: LocalChannel, name: str, deserialize: Callable[[bytes], Any] | None) -> None:
        self._closed = channel.closed
        self._name = name
        self._behavior = getattr(channel.reads.service, name, None)
        self._deserialize = deserialize

    def __call__(self, request: Any, timeout: float | None = None, **ignored: Any) -> _Responses:
        if self._behavior is None:
            raise _unimplemented(self._name)
        return _Responses(self._stream(request, timeout))

    def _stream(self, request: Any, timeout: float | None) -> Generator[Any, None, None]:
        context = _Context(timeout, self._closed)
        assert self._behavior is not None
        parse = self._deserialize
        try:
            for response in self._behavior(request, context):
                # Changes sends its messages as wire bytes, as the reads do.
                yield parse(response) if isinstance(response, bytes) and parse is not None else response
        finally:
            context.end()


class LocalChannel(grpc.Channel):
    """A :class:`grpc.Channel` whose ``epochstate.v1.EpochState`` calls a :class:`LocalReads`
    answers in the calling thread; any other service is UNIMPLEMENTED."""

    def __init__(self, reads: LocalReads) -> None:
        self.reads = reads
        self.closed = threading.Event()

    def unary_unary(
        self, method: str, request_serializer: Any = None, response_deserializer: Any = None, **_: Any
    ) -> Any:
        return _Unary(self, _name(method), response_deserializer)

    def unary_stream(
        self, method: str, request_serializer: Any = None, response_deserializer: Any = None, **_: Any
    ) -> Any:
        return _Stream(self, _name(method), response_deserializer)

    def stream_unary(self, method: str, *args: Any, **kwargs: Any) -> Any:
        raise _unimplemented(method)

    def stream_stream(self, method: str, *args: Any, **kwargs: Any) -> Any:
        raise _unimplemented(method)

    def subscribe(self, callback: Any, try_to_connect: bool = False) -> None:
        callback(grpc.ChannelConnectivity.READY)

    def unsubscribe(self, callback: Any) -> None:
        pass

    def close(self) -> None:
        if not self.closed.is_set():
            self.closed.set()
            self.reads.close()

    def __enter__(self) -> LocalChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _unimplemented(method: str) -> LocalCallError:
    return LocalCallError(_Status(grpc.StatusCode.UNIMPLEMENTED, f"{method} is not served in-process", ()))


def _name(method: str) -> str:
    """The EpochState method ``method`` names ("": another service's, never served here)."""
    return method[len(_PREFIX) :] if method.startswith(_PREFIX) else ""


def open_channel(data_dir: str) -> grpc.Channel:
    """The channel of a ``local://`` target: in-process reads of the daemon at ``data_dir``."""
    return LocalReads(data_dir).channel()
