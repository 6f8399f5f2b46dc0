"""The Kafka protocol listener: Kafka's own clients (kcat, librdkafka, kafka-python,
aiokafka) produce to and consume from tidelog.

    server = await start_kafka_server(log, host="127.0.0.1", port=9092)

wire.py speaks the protocol through kio, batches.py reads and writes record
batches, broker.py holds what the handlers share, server.py the connections
and their limits; topics.py, produce.py, fetch.py, groups.py and sasl.py
translate each API to the core.
"""

from __future__ import annotations

from .server import KafkaServer, kafka_state, start_kafka_server, stop_kafka_server

__all__ = ["KafkaServer", "kafka_state", "start_kafka_server", "stop_kafka_server"]
