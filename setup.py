"""The compiled parts (see :mod:`exactlyonce.dedup.native`): the numpy Bloom filter's loops
and the Kafka sink's produce loop.

Both optional: where one does not build (no C compiler, no ``dlfcn.h``), the package installs
without it and runs the Python/numpy code it replaces. Everything else is in pyproject.toml.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "exactlyonce.dedup._bloomkernel",
            ["exactlyonce/dedup/_bloomkernel.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        Extension(
            "exactlyonce.connectors.kafka._arrowproduce",
            ["exactlyonce/connectors/kafka/_arrowproduce.c"],
            libraries=["dl"],
            optional=True,
        )
    ]
)
