"""What every record shares: the error a malformed one raises, the two ways a record is kept (one JSON
value, :class:`JsonRecord`; a hash of a field per attribute, :class:`HashRecord`) and their text helpers."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Self, TypeVar

import msgspec


class RecordError(ValueError):
    """A record read back from Redis is not what its type says."""


class JsonRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A record kept as one JSON value (a stream field, a sorted set's member, a hash field)."""

    def encode(self) -> bytes:
        return ENCODER.encode(self)

    @classmethod
    def decode(cls, raw: bytes | str, where: str) -> Self:
        """``raw`` as this record, or :class:`RecordError` naming ``where`` and what is wrong."""
        return decode_json(raw, cls, where)


class HashRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A record kept as a Redis hash, one field per attribute, each value its text: an integer in decimal and
    ``None`` as the empty string (what the commits have always written), so a partial ``HMGET`` reads back as
    a record whose other attributes keep their defaults."""

    def to_hash(self, *only: str) -> dict[str, str]:
        """The hash fields, or only those named (the job writes ``stopped_ms`` alone)."""
        out = self._fields()
        return {f: v for f, v in out.items() if f in only} if only else out

    def _fields(self) -> dict[str, str]:
        return {f: hash_text(getattr(self, f)) for f in self.__struct_fields__}

    @classmethod
    def from_hash(cls, mapping: Mapping[Any, Any], where: str) -> Self:
        """The record of a hash as Redis returns it (bytes or text); a field that is missing, ``None`` (from an
        ``HMGET``) or empty keeps its default. Raises :class:`RecordError` naming the field that is not what the
        type says."""
        fields = {decoded(k): decoded(v) for k, v in mapping.items() if v is not None and v not in ("", b"")}
        try:
            return msgspec.convert(cls._doc(fields, where), type=cls, strict=False)  # strict=False: "5" -> 5
        except msgspec.ValidationError as exc:
            raise RecordError(f"{where} is not a {cls.__name__}: {exc}") from None

    @classmethod
    def _doc(cls, fields: dict[str, str], where: str) -> dict[str, object]:
        return {f: v for f, v in fields.items() if f in cls.__struct_fields__}


def hash_text(value: object) -> str:
    return "" if value is None else str(value)


def decoded(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def json_field(raw: str, name: str, record: str, where: str) -> object:
    try:
        return json.loads(raw)
    except ValueError:
        raise RecordError(f"{where} is not a {record}: `{name}` is not JSON: {raw!r}") from None


ENCODER = msgspec.json.Encoder()


T = TypeVar("T")


def decode_json(raw: bytes | str, kind: type[T], where: str) -> T:
    """``raw`` as a ``kind``, or :class:`RecordError` naming ``where`` and what is wrong."""
    try:
        return msgspec.json.decode(raw, type=kind)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise RecordError(f"{where} is not a {kind.__name__}: {exc}") from None
