"""``python -m exactlyonce.integration.jars``: resolve every jar set now and print where."""

from __future__ import annotations

import sys

from exactlyonce.integration.jars import KAFKA_BROKER, folder, resolve, spark_connectors


def main() -> int:
    try:
        for jars in (KAFKA_BROKER, spark_connectors()):
            found = resolve(jars)
            print(f"{jars.name}: {len(found)} jars in {folder(jars)}")
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
