package pybroker.compat;

import com.fasterxml.jackson.databind.node.ObjectNode;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/** `consume` and `offset-for-time`: a group-less consumer on one assigned partition (as Spark executors do). */
final class ConsumeCommand {
    private ConsumeCommand() {}

    static void consume(Args args) {
        TopicPartition partition = new TopicPartition(args.required("topic"), args.requiredInt("partition"));
        String start = args.required("start");
        int count = args.requiredInt("count");
        long deadline = System.nanoTime() + Duration.ofMillis(ClientConfig.timeoutMs(args)).toNanos();
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(consumerConfig(args))) {
            consumer.assign(List.of(partition));
            switch (start) {
                case "beginning" -> consumer.seekToBeginning(List.of(partition));
                case "end" -> {
                    consumer.seekToEnd(List.of(partition));
                    // seekToEnd is lazy: pin "end" now, not at the first fetch.
                    consumer.position(partition);
                }
                default -> consumer.seek(partition, parseOffset(start));
            }
            int emitted = 0;
            while (emitted < count) {
                long remainingMs = Duration.ofNanos(deadline - System.nanoTime()).toMillis();
                if (remainingMs <= 0) {
                    break;
                }
                for (ConsumerRecord<byte[], byte[]> record : consumer.poll(Duration.ofMillis(Math.min(remainingMs, 500)))) {
                    if (emitted == count) {
                        break;
                    }
                    Json.emit(toJson(record));
                    emitted++;
                }
            }
        }
    }

    static void offsetForTime(Args args) {
        TopicPartition partition = new TopicPartition(args.required("topic"), args.requiredInt("partition"));
        long timestamp = args.requiredLong("timestamp");
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(consumerConfig(args))) {
            Map<TopicPartition, OffsetAndTimestamp> found = consumer.offsetsForTimes(
                    Map.of(partition, timestamp), Duration.ofMillis(ClientConfig.timeoutMs(args)));
            OffsetAndTimestamp hit = found.get(partition);
            ObjectNode line = Json.object();
            if (hit == null) {
                line.putNull("offset");
                line.putNull("timestamp");
            } else {
                line.put("offset", hit.offset());
                line.put("timestamp", hit.timestamp());
            }
            Json.emit(line);
        }
    }

    private static Properties consumerConfig(Args args) {
        Properties props = ClientConfig.base(args);
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.ALLOW_AUTO_CREATE_TOPICS_CONFIG, "false");
        // "none" makes a seek past the log a visible OffsetOutOfRangeException instead of a silent reset.
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, args.optional("reset", "none"));
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, args.optional("isolation", "read_uncommitted"));
        ClientConfig.applyOverrides(props, args);
        return props;
    }

    private static ObjectNode toJson(ConsumerRecord<byte[], byte[]> record) {
        ObjectNode line = Json.object();
        line.put("topic", record.topic());
        line.put("partition", record.partition());
        line.put("offset", record.offset());
        line.put("timestamp", record.timestamp());
        line.put("timestamp_type", record.timestampType().name);
        line.put("key", Json.base64(record.key()));
        line.put("value", Json.base64(record.value()));
        line.set("headers", Json.headersTo(record.headers()));
        record.leaderEpoch().ifPresent(epoch -> line.put("leader_epoch", epoch));
        return line;
    }

    private static long parseOffset(String start) {
        try {
            return Long.parseLong(start);
        } catch (NumberFormatException e) {
            throw new UsageException("--start must be beginning, end or an offset, got " + start);
        }
    }
}
