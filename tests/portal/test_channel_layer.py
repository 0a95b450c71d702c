"""The Channels layer on real Redis stays healthy while idle (no socket timeout racing its blocking read)."""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

import pytest
from channels_redis.core import RedisChannelLayer
from django.conf import settings


def test_an_idle_receive_outlasts_redis_pys_default_socket_timeout() -> None:
    """channels_redis blocks 5 s per read; with redis-py's 5 s default socket timeout an idle receive
    raised "Timeout reading from ..." after 5 s and the consumer's socket closed with 1011."""

    async def idle() -> float:
        # A layer of its own, as configured (the process-wide one may be bound to another test's loop).
        config = cast(dict[str, Any], settings.CHANNEL_LAYERS["default"]["CONFIG"])
        layer = RedisChannelLayer(**config)
        channel = await layer.new_channel()
        started = time.monotonic()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(layer.receive(channel), timeout=11)
        await layer.flush()
        return time.monotonic() - started

    assert asyncio.run(idle()) >= 11, "the receive waited out the outer timeout, two blocking reads"
