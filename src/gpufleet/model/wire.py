"""The wire form of the node -> control plane contract: JSON (the default) or msgpack, both decoded with the
contract's ranges checked before anything is written.
"""

from __future__ import annotations

import msgspec
import numpy as np

from gpufleet.errors import UserError
from gpufleet.model.observe import SCHEMA_VERSION, Ack, Batch

JSON = "application/json"
MSGPACK = "application/msgpack"
MAX_BODY = 16 * 1024 * 1024

_json_batch = msgspec.json.Decoder(Batch)
_msgpack_batch = msgspec.msgpack.Decoder(Batch)


def _numpy_scalars(obj: object) -> object:
    """Detectors compute with numpy: its scalars go on the wire as the plain numbers they are."""
    if isinstance(obj, np.generic):
        return obj.item()
    raise NotImplementedError(f"cannot encode {type(obj).__name__}")


_json = msgspec.json.Encoder(enc_hook=_numpy_scalars)
_msgpack = msgspec.msgpack.Encoder(enc_hook=_numpy_scalars)


class WireError(UserError):
    """A batch that does not follow the contract."""


def encode(obj: object, content_type: str = JSON) -> bytes:
    return _msgpack.encode(obj) if content_type == MSGPACK else _json.encode(obj)


def decode_batch(body: bytes, content_type: str | None = JSON) -> Batch:
    """A batch from its wire form; every problem is one WireError naming where it is and what to send instead."""
    if len(body) > MAX_BODY:
        raise WireError(f"batch of {len(body)} bytes is over {MAX_BODY}", fix="push smaller batches")
    packed = (content_type or JSON).split(";", 1)[0].strip().lower() == MSGPACK
    try:
        return _msgpack_batch.decode(body) if packed else _json_batch.decode(body)
    except msgspec.ValidationError as exc:
        raise WireError(
            f"batch does not follow schema v{SCHEMA_VERSION}: {exc}",
            fix="see docs/wire.md; an agent and a control plane of the same gpufleet version always agree",
        ) from None
    except msgspec.DecodeError as exc:
        raise WireError(
            f"batch is not valid {'msgpack' if packed else 'JSON'}: {exc}",
            fix=f"send Content-Type {JSON} (or {MSGPACK}) with a body that matches it",
        ) from None


def decode_ack(body: bytes) -> Ack:
    try:
        return msgspec.json.decode(body, type=Ack)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise WireError(f"control plane answered with something that is not an ack: {exc}") from None
