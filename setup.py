"""The one compiled part: the Kafka sink's native produce loop (see its module docstring).

Optional: where it does not build (no C compiler, no ``dlfcn.h``), the package installs
without it and the sink produces from Python (:mod:`exactlyonce.connectors.kafka.arrowproduce`).
Everything else is in pyproject.toml.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "exactlyonce.connectors.kafka._arrowproduce",
            ["exactlyonce/connectors/kafka/_arrowproduce.c"],
            libraries=["dl"],
            optional=True,
        )
    ]
)
