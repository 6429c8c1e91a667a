"""The local persistent Redis (service ``redis-aof``): ``redis-server`` with an append-only
file fsynced at every write, under ``<home>/redis-aof``, started on demand (``services up
--only redis-aof``). A hard restart (SIGKILL) loses nothing it acknowledged: what a Redis
sink's server must guarantee, and what chaos needs to restart the sink's own server.
"""

from __future__ import annotations

from exactlyonce.integration.lab.services.redis import PROCESS_NAME, RedisService

__all__ = ["PROCESS_NAME", "SERVICE", "answers", "pid", "start", "stop"]

SERVICE = RedisService("redis-aof", persistent=True)
pid, answers, start, stop = SERVICE.pid, SERVICE.answers, SERVICE.start, SERVICE.stop
