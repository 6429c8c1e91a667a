"""TCP proxies that lose a server's reply after the server applied the request, refuse
connections, cut them or hold replies (:mod:`.tcp`), and one that reads the Kafka protocol's
frames to lose the reply to one Kafka request (:mod:`.kafka`: an ``EndTxn``, the commit of a
transaction)."""

from __future__ import annotations

from exactlyonce.integration.lab.fault_proxy.kafka import END_TXN, KafkaFaultProxy
from exactlyonce.integration.lab.fault_proxy.tcp import (
    READ_BYTES,
    Arming,
    Conversation,
    DroppedReply,
    FaultProxy,
    ThreadedProxy,
)

__all__ = [
    "END_TXN",
    "READ_BYTES",
    "Arming",
    "Conversation",
    "DroppedReply",
    "FaultProxy",
    "KafkaFaultProxy",
    "ThreadedProxy",
]
