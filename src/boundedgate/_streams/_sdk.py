"""What the SDKs' streams offer beyond iteration, as protocols: how GatedStream types their helpers.

A :class:`GatedStream` is generic over the stream it wraps. Each helper it passes through is
declared for the wrapped streams that have it (its ``self`` is a ``GatedStream`` of one of these
protocols), with the type the SDK gives it, so a type checker accepts ``text_stream`` on an
anthropic message stream, rejects it on an openai chat stream, and rejects a misspelt name on both.
Nothing here runs: the protocols are for the type checker.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol, TypeVar

_T_co = TypeVar("_T_co", covariant=True)


class TextStream(AsyncIterator[Any], Protocol[_T_co]):
    """A stream with the text of its deltas as a stream of its own (anthropic's ``text_stream``)."""

    @property
    def text_stream(self) -> AsyncIterator[_T_co]: ...


class UntilDoneNone(AsyncIterator[Any], Protocol):
    """A stream whose ``until_done()`` reads it to its end and returns nothing (anthropic's)."""

    async def until_done(self) -> None: ...


class UntilDone(AsyncIterator[Any], Protocol):
    """A stream whose ``until_done()`` reads it to its end and returns something (openai's: itself)."""

    async def until_done(self) -> Any: ...


class FinalMessage(AsyncIterator[Any], Protocol[_T_co]):
    """A stream that assembles its message (anthropic's ``get_final_message()``)."""

    async def get_final_message(self) -> _T_co: ...


class FinalText(AsyncIterator[Any], Protocol[_T_co]):
    """A stream that assembles its text (anthropic's ``get_final_text()``)."""

    async def get_final_text(self) -> _T_co: ...


class FinalCompletion(AsyncIterator[Any], Protocol[_T_co]):
    """A stream that assembles its completion (openai's chat ``get_final_completion()``)."""

    async def get_final_completion(self) -> _T_co: ...


class FinalResponse(AsyncIterator[Any], Protocol[_T_co]):
    """A stream that assembles its response (openai's Responses ``get_final_response()``)."""

    async def get_final_response(self) -> _T_co: ...


class HasResponse(AsyncIterator[Any], Protocol[_T_co]):
    """A stream with the HTTP response it reads (openai's and anthropic's ``.response``)."""

    @property
    def response(self) -> _T_co: ...


class HasRequestId(AsyncIterator[Any], Protocol[_T_co]):
    """A stream with the provider's request id (anthropic's ``request_id``)."""

    @property
    def request_id(self) -> _T_co: ...


class MessageSnapshot(AsyncIterator[Any], Protocol[_T_co]):
    """A stream with the message assembled so far (anthropic's ``current_message_snapshot``)."""

    @property
    def current_message_snapshot(self) -> _T_co: ...


class CompletionSnapshot(AsyncIterator[Any], Protocol[_T_co]):
    """A stream with the completion assembled so far (openai's ``current_completion_snapshot``)."""

    @property
    def current_completion_snapshot(self) -> _T_co: ...
