"""SparkSession construction shared by the examples, the tests and the benchmark.

The kafka connector is not part of PySpark: it comes through ``spark.jars.packages`` from Maven Central,
at exactly the installed PySpark version. Ivy's cache lives in the repository's git-ignored ``.cache/ivy``
so CI (and the next run) resolve it offline.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from pyspark import __version__ as PYSPARK_VERSION
from pyspark.sql import SparkSession

REPO_ROOT = Path(__file__).resolve().parent.parent
IVY_DIR = Path(os.environ.get("PYBROKER_IVY_DIR", REPO_ROOT / ".cache" / "ivy"))
SCALA_BINARY_VERSION = "2.13"
KAFKA_CONNECTOR = f"org.apache.spark:spark-sql-kafka-0-10_{SCALA_BINARY_VERSION}:{PYSPARK_VERSION}"
DEFAULT_BOOTSTRAP = os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092")


def build_spark(
    app_name: str, master: str = "local[2]", extra_conf: dict[str, str] | None = None
) -> SparkSession:
    """A small local session with the kafka connector on its classpath."""
    IVY_DIR.mkdir(parents=True, exist_ok=True)
    builder = (
        SparkSession.builder.appName(app_name)
        .master(master)
        .config("spark.jars.packages", KAFKA_CONNECTOR)
        .config("spark.jars.ivy", str(IVY_DIR))
        .config("spark.ui.enabled", "false")
        # Few, small shuffles: the default 200 partitions would dominate the tests' run time.
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", os.environ.get("SPARK_DRIVER_MEMORY", "1g"))
    )
    for key, value in (extra_conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("SPARK_LOG_LEVEL", "WARN"))
    return spark


def add_bootstrap_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap",
        default=DEFAULT_BOOTSTRAP,
        help="kafka.bootstrap.servers (default: $KAFKA_BOOTSTRAP or %(default)s, where `python -m pybroker serve` listens)",
    )


def main() -> None:
    """`python -m spark_examples.common`: resolve the connector into the Ivy cache and exit (CI warm-up)."""
    spark = build_spark("resolve-kafka-connector")
    jars = spark.sparkContext.getConf().get("spark.jars", "")
    spark.stop()
    if "spark-sql-kafka" not in jars:
        raise SystemExit(f"the kafka connector did not resolve: spark.jars={jars!r}")
    print(f"resolved {KAFKA_CONNECTOR} into {IVY_DIR}")


if __name__ == "__main__":
    main()
