"""The lab's upstream Kafka: an at-least-once producer of the seeded events
(:mod:`.producer`) and the topics it writes into, created afresh (:mod:`.topics`). The demo
feeds its input topic with them, and ``exactlyonce chaos --events`` a Kafka source's topic."""
