"""Batch job: read a slice of the events topic, aggregate per (source header, kind), write with the batch sink.

The slice is given either by offsets or by time:

    python -m spark_examples.batch_job --bootstrap 127.0.0.1:9092 --input events --output event-totals \\
        --starting-offsets '{"events":{"0":10,"1":-2,"2":5}}' --ending-offsets '{"events":{"0":200,"1":-1,"2":300}}'
    python -m spark_examples.batch_job --input events --output event-totals-since \\
        --starting-offsets-by-timestamp '{"events":{"0":1704067500000,"1":1704067500000,"2":1704067500000}}'

Each result record has key ``<source>|<kind>`` and a JSON value
``{"source", "kind", "events", "amount", "first_event_id", "last_event_id"}``; ``source`` comes from the
record's ``source`` header (read with includeHeaders=true).
"""

from __future__ import annotations

import argparse

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_examples.common import add_bootstrap_argument, build_spark
from spark_examples.streaming_job import EVENT_SCHEMA


def read_slice(
    spark: SparkSession,
    bootstrap: str,
    topic: str,
    starting_offsets: str | None = None,
    ending_offsets: str | None = None,
    starting_offsets_by_timestamp: str | None = None,
    extra_options: dict[str, str] | None = None,
) -> DataFrame:
    reader = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("includeHeaders", "true")
    )
    if starting_offsets_by_timestamp:
        reader = reader.option("startingOffsetsByTimestamp", starting_offsets_by_timestamp)
    elif starting_offsets:
        reader = reader.option("startingOffsets", starting_offsets)
    if ending_offsets:
        reader = reader.option("endingOffsets", ending_offsets)
    for key, value in (extra_options or {}).items():
        reader = reader.option(key, value)
    return reader.load()


def totals(records: DataFrame) -> DataFrame:
    source_header = F.filter("headers", lambda h: h["key"] == F.lit("source"))[0]["value"].cast("string")
    events = records.select(
        source_header.alias("source"), F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e")
    ).select("source", "e.*")
    grouped = events.groupBy("source", "kind").agg(
        F.count("*").alias("events"),
        F.sum("amount").alias("amount"),
        F.min("event_id").alias("first_event_id"),
        F.max("event_id").alias("last_event_id"),
    )
    return grouped.select(
        F.concat_ws("|", "source", "kind").alias("key"),
        F.to_json(F.struct("source", "kind", "events", "amount", "first_event_id", "last_event_id")).alias(
            "value"
        ),
    )


def write(results: DataFrame, bootstrap: str, topic: str) -> None:
    results.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", topic).save()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_bootstrap_argument(parser)
    parser.add_argument("--input", default="events")
    parser.add_argument("--output", default="event-totals")
    parser.add_argument("--starting-offsets", default="earliest", help="'earliest' or JSON per partition")
    parser.add_argument("--ending-offsets", default="latest", help="'latest' or JSON per partition")
    parser.add_argument(
        "--starting-offsets-by-timestamp", default=None, help="JSON: partition → timestamp (ms)"
    )
    args = parser.parse_args()
    spark = build_spark("event-totals")
    records = read_slice(
        spark,
        args.bootstrap,
        args.input,
        args.starting_offsets,
        args.ending_offsets,
        args.starting_offsets_by_timestamp,
    )
    write(totals(records), args.bootstrap, args.output)
    spark.stop()


if __name__ == "__main__":
    main()
