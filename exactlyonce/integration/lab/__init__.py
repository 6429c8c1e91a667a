"""The lab: what runs the product under faults, on this machine. Not needed to run a pipeline.

- :mod:`.services`: local PostgreSQL, Redis and Apache Kafka (and Tansu) as plain processes
  (``python -m exactlyonce.integration.lab.services up``, ``make services``);
- :mod:`.fault_proxy`: a TCP proxy that loses replies, refuses and stalls connections;
- :mod:`.cluster`: a local Spark standalone cluster (a master and workers) to SIGKILL workers;
- :mod:`.runs`, :mod:`.echo`, :mod:`.events`: runs of ``exactlyonce run`` as process groups
  (started, watched, SIGKILLed), their output echoed, and the seeded at-least-once input:
  shared by the two below;
- :mod:`.upstream`: an at-least-once producer of that input and the topics it goes to (the
  demo's input topic, a Kafka source's topic under ``exactlyonce chaos --events``);
- :mod:`.demo`: the kill -9 demo (``python -m exactlyonce.integration.lab.demo``, ``make demo``);
- :mod:`.chaos`: ``exactlyonce chaos``, any pipeline under a seeded schedule of faults.

Imports point down: the product (the rest of :mod:`exactlyonce.integration`) never imports the
lab; the CLI reaches the lab's commands by name, on use
(:mod:`exactlyonce.integration.cli.lab`). Inside the lab, ``demo`` and ``chaos`` are
independent of each other, above ``runs``/``upstream``, above ``echo``/``events``, above
``services``, ``fault_proxy`` and ``cluster``. import-linter's contracts in ``pyproject.toml``
hold it.
"""
