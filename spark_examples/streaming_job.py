"""Streaming job: kafka source → JSON → 1-minute event-time windows with a watermark → kafka sink.

    python -m spark_examples.streaming_job --bootstrap 127.0.0.1:9092 --input events --output event-windows \\
        --checkpoint /tmp/event-windows-checkpoint

Each result record has key ``<window start>|<kind>`` and a JSON value
``{"window_start", "kind", "events", "amount"}``. Output mode is append: a window is written once, when
the watermark (max event time − 1 hour) has passed its end.
"""

from __future__ import annotations

import argparse

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import LongType, StringType, StructField, StructType

from spark_examples.common import add_bootstrap_argument, build_spark

EVENT_SCHEMA = StructType(
    [
        StructField("event_id", LongType()),
        StructField("user", StringType()),
        StructField("kind", StringType()),
        StructField("amount", LongType()),
        StructField("ts", LongType()),
    ]
)
# Longer than the data set's event-time span, so no event of the seeded set is ever late.
WATERMARK_DELAY = "1 hour"


def window_aggregates(source: DataFrame) -> DataFrame:
    events = (
        source.select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e"))
        .select("e.*")
        .withColumn("event_time", F.timestamp_millis("ts"))
        .withWatermark("event_time", WATERMARK_DELAY)
    )
    # No filter for the flush event: Spark pushes a filter below the watermark, which would then never see
    # the flush event's time. Its own window is never emitted anyway (it ends after the watermark).
    windows = events.groupBy(F.window("event_time", "1 minute"), "kind").agg(
        F.count("*").alias("events"), F.sum("amount").alias("amount")
    )
    window_start = F.date_format("window.start", "yyyy-MM-dd'T'HH:mm:ss")
    return windows.select(
        F.concat_ws("|", window_start, "kind").alias("key"),
        F.to_json(F.struct(window_start.alias("window_start"), "kind", "events", "amount")).alias("value"),
    )


def start(
    spark: SparkSession,
    bootstrap: str,
    input_topic: str,
    output_topic: str,
    checkpoint: str,
    max_offsets_per_trigger: int | None = None,
    trigger_interval: str = "1 second",
    fail_on_data_loss: bool = True,
    kafka_options: dict[str, str] | None = None,
) -> StreamingQuery:
    """``kafka_options``: client settings for the source's consumers and admin client, without Spark's
    ``kafka.`` prefix (e.g. ``{"default.api.timeout.ms": "10000"}``)."""
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", input_topic)
        .option("startingOffsets", "earliest")
        # Spark's default, said out loud: an offset range that shrinks or vanishes (records a broker
        # acknowledged and then lost, e.g. in a leader change) fails the query instead of skipping them.
        .option("failOnDataLoss", str(fail_on_data_loss).lower())
    )
    for key, value in (kafka_options or {}).items():
        reader = reader.option(f"kafka.{key}", value)
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    return (
        window_aggregates(reader.load())
        .writeStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", output_topic)
        .option("checkpointLocation", checkpoint)
        .outputMode("append")
        .trigger(processingTime=trigger_interval)
        .start()
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_bootstrap_argument(parser)
    parser.add_argument("--input", default="events")
    parser.add_argument("--output", default="event-windows")
    parser.add_argument("--checkpoint", default="/tmp/spark-examples/event-windows-checkpoint")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None)
    parser.add_argument(
        "--run-seconds", type=float, default=None, help="stop after this long (default: run until killed)"
    )
    args = parser.parse_args()
    spark = build_spark("event-windows")
    query = start(
        spark, args.bootstrap, args.input, args.output, args.checkpoint, args.max_offsets_per_trigger
    )
    query.awaitTermination(args.run_seconds)
    query.stop()
    spark.stop()


if __name__ == "__main__":
    main()
