"""exactlyonce: exactly-once sinks for PySpark Structured Streaming."""

__version__ = "0.1.0"
