package pybroker.compat;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.RebalanceInProgressException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * `group-consume`: subscribe() as a group member, commit synchronously, print records and rebalance
 * events as JSON lines.
 *
 * <p>stdin controls the member: a line {@code stop} closes the consumer gracefully (LeaveGroup for a
 * dynamic member); end of stdin halts the JVM at once without closing anything, exactly like a crashed
 * application, so a killed parent process never leaves an orphan member heartbeating. With
 * {@code --ack-each true} the member waits after every printed record for a line {@code next} or
 * {@code stop}, so the caller decides record by record (and nothing past the last acknowledged record
 * is committed).
 *
 * <p>Options: {@code --topic T --group G [--count N] [--deadline-ms MS] [--commit record|poll|none]
 * [--assignor range|roundrobin|sticky|cooperative-sticky|CLASS] [--instance-id ID]
 * [--session-timeout-ms MS] [--ack-each true|false] [--reset earliest|latest|none]
 * [--group-protocol classic|consumer] [--remote-assignor uniform|range]}; with {@code consumer} (KIP-848)
 * the assignor, session timeout and heartbeat options are not sent (the broker owns them).
 */
final class GroupConsumeCommand {
    private static final String STOP = "stop";
    private static final String EOF = "\u0000eof";

    private GroupConsumeCommand() {}

    static void run(Args args) throws InterruptedException {
        String topic = args.required("topic");
        int count = args.optionalInt("count", Integer.MAX_VALUE);
        String commitMode = args.optional("commit", "record");
        if (!Set.of("record", "poll", "none").contains(commitMode)) {
            throw new UsageException("--commit must be record, poll or none, got " + commitMode);
        }
        boolean ackEach = args.optionalBool("ack-each", false);
        // --deadline-ms bounds the whole run (default: --timeout-ms); --timeout-ms stays the per-call limit.
        long runMs = Long.parseLong(args.optional("deadline-ms", Integer.toString(ClientConfig.timeoutMs(args))));
        long deadline = System.nanoTime() + Duration.ofMillis(runMs).toNanos();
        BlockingQueue<String> control = startControlReader();

        KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(consumerConfig(args));
        consumer.subscribe(List.of(topic), new EventListener(consumer));
        int emitted = 0;
        boolean stopping = false;
        try {
            while (!stopping && emitted < count && System.nanoTime() < deadline) {
                stopping = takeControl(control, 0) != null;
                if (stopping) {
                    break;
                }
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
                Map<TopicPartition, OffsetAndMetadata> pollOffsets = new HashMap<>();
                Set<TopicPartition> failed = new TreeSet<>(GroupConsumeCommand::compare);
                for (ConsumerRecord<byte[], byte[]> record : records) {
                    TopicPartition tp = new TopicPartition(record.topic(), record.partition());
                    if (failed.contains(tp) || emitted >= count || stopping) {
                        continue;
                    }
                    OffsetAndMetadata next = new OffsetAndMetadata(record.offset() + 1);
                    if (commitMode.equals("record") && !commit(consumer, Map.of(tp, next), tp, record.offset())) {
                        failed.add(tp);
                        continue;
                    }
                    pollOffsets.put(tp, next);
                    Json.emit(recordJson(record, consumer));
                    emitted++;
                    if (ackEach) {
                        String answer = takeControl(control, Long.MAX_VALUE);
                        stopping = answer != null && !answer.equals("next");
                    }
                }
                if (commitMode.equals("poll") && !pollOffsets.isEmpty()) {
                    try {
                        consumer.commitSync(pollOffsets);
                    } catch (KafkaException e) {
                        Json.emit(event("commit-failed", consumer).put("error", e.getClass().getSimpleName()));
                    }
                }
            }
        } finally {
            consumer.close();
        }
        Json.emit(Json.object().put("event", "closed").put("records", emitted));
    }

    /** Commit one record's offset; on failure rewind so the record is fetched again if still ours. */
    private static boolean commit(
            KafkaConsumer<byte[], byte[]> consumer, Map<TopicPartition, OffsetAndMetadata> offsets,
            TopicPartition tp, long offset) {
        try {
            consumer.commitSync(offsets);
            return true;
        } catch (RebalanceInProgressException | org.apache.kafka.clients.consumer.CommitFailedException e) {
            Json.emit(event("commit-failed", consumer).put("error", e.getClass().getSimpleName())
                    .put("partition", tp.partition()).put("offset", offset));
            if (consumer.assignment().contains(tp)) {
                consumer.seek(tp, offset);
            }
            return false;
        }
    }

    /** Lines from stdin; EOF halts the JVM (the parent is gone: behave like a crash). */
    private static BlockingQueue<String> startControlReader() {
        BlockingQueue<String> queue = new LinkedBlockingQueue<>();
        Thread reader = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                String line;
                while ((line = in.readLine()) != null) {
                    queue.add(line.trim());
                }
            } catch (IOException e) {
                // treated as end of input
            }
            queue.add(EOF);
        }, "stdin-control");
        reader.setDaemon(true);
        reader.start();
        return queue;
    }

    /** Next control line ("next"/"stop"), or null when none arrives within waitMs; EOF halts. */
    private static String takeControl(BlockingQueue<String> control, long waitMs) throws InterruptedException {
        String line = waitMs == 0 ? control.poll() : control.poll(waitMs, TimeUnit.MILLISECONDS);
        if (EOF.equals(line)) {
            System.out.flush();
            Runtime.getRuntime().halt(3);
        }
        if (line != null && !line.equals("next") && !line.equals(STOP)) {
            return takeControl(control, waitMs);
        }
        return line;
    }

    private static Properties consumerConfig(Args args) {
        Properties props = ClientConfig.base(args);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, args.required("group"));
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, args.optional("reset", "earliest"));
        String protocol = args.optional("group-protocol", "classic");
        if (protocol.equals("consumer")) {
            // KIP-848: the broker owns the session timeout, heartbeat interval and assignment; the client
            // refuses those settings, and names a server-side assignor (uniform, range) at most.
            props.put("group.protocol", "consumer");
            String remote = args.optional("remote-assignor", null);
            if (remote != null) {
                props.put("group.remote.assignor", remote);
            }
        } else {
            props.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, assignorClass(args.optional("assignor", "range")));
            int sessionMs = args.optionalInt("session-timeout-ms", 6000);
            props.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, Integer.toString(sessionMs));
            props.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, Integer.toString(Math.max(sessionMs / 6, 100)));
        }
        String instanceId = args.optional("instance-id", null);
        if (instanceId != null) {
            props.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, instanceId);
        }
        ClientConfig.applyOverrides(props, args);
        return props;
    }

    static String assignorClass(String name) {
        return switch (name) {
            case "range" -> "org.apache.kafka.clients.consumer.RangeAssignor";
            case "roundrobin" -> "org.apache.kafka.clients.consumer.RoundRobinAssignor";
            case "sticky" -> "org.apache.kafka.clients.consumer.StickyAssignor";
            case "cooperative-sticky" -> "org.apache.kafka.clients.consumer.CooperativeStickyAssignor";
            default -> name; // a class name, or a comma-separated list of them
        };
    }

    private static ObjectNode recordJson(ConsumerRecord<byte[], byte[]> record, KafkaConsumer<byte[], byte[]> consumer) {
        ObjectNode line = Json.object();
        line.put("event", "record");
        line.put("topic", record.topic());
        line.put("partition", record.partition());
        line.put("offset", record.offset());
        line.put("key", Json.base64(record.key()));
        line.put("value", Json.base64(record.value()));
        line.put("generation", consumer.groupMetadata().generationId());
        return line;
    }

    private static ObjectNode event(String name, KafkaConsumer<byte[], byte[]> consumer) {
        ObjectNode line = Json.object();
        line.put("event", name);
        line.put("generation", consumer.groupMetadata().generationId());
        line.put("member_id", consumer.groupMetadata().memberId());
        return line;
    }

    private static int compare(TopicPartition a, TopicPartition b) {
        int byTopic = a.topic().compareTo(b.topic());
        return byTopic != 0 ? byTopic : Integer.compare(a.partition(), b.partition());
    }

    private static ArrayNode partitions(Collection<TopicPartition> partitions) {
        ArrayNode out = Json.array();
        partitions.stream().map(TopicPartition::partition).sorted().forEach(out::add);
        return out;
    }

    /** Prints every callback: the changed partitions and the whole assignment after the change. */
    private static final class EventListener implements ConsumerRebalanceListener {
        private final KafkaConsumer<byte[], byte[]> consumer;

        EventListener(KafkaConsumer<byte[], byte[]> consumer) {
            this.consumer = consumer;
        }

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> revoked) {
            emit("revoked", revoked, true);
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> assigned) {
            emit("assigned", assigned, false);
        }

        @Override
        public void onPartitionsLost(Collection<TopicPartition> lost) {
            emit("lost", lost, true);
        }

        private void emit(String name, Collection<TopicPartition> changed, boolean removing) {
            Set<TopicPartition> after = new TreeSet<>(GroupConsumeCommand::compare);
            after.addAll(consumer.assignment());
            if (removing) {
                after.removeAll(changed);
            } else {
                after.addAll(changed);
            }
            ObjectNode line = event(name, consumer);
            line.set("partitions", partitions(changed));
            line.set("assignment", partitions(after));
            Json.emit(line);
        }
    }
}
