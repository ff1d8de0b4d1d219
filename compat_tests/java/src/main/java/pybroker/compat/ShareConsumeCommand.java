package pybroker.compat;

import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Optional;
import java.util.Properties;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * `share-consume`: a KafkaShareConsumer (KIP-932) member of a share group, printing each delivered
 * record as a JSON line {@code {"event": "record", "partition", "offset", "key", "value", "delivery_count"}}.
 *
 * <p>{@code --ack implicit} (the default) lets the consumer accept every record of a poll on the next
 * poll. {@code --ack accept|release|reject} acknowledges each record explicitly with that type and commits
 * after each poll ({@code share.acknowledgement.mode=explicit}). {@code --ack control} waits after each
 * record for a stdin line {@code accept}, {@code release} or {@code reject} (acknowledged and committed at
 * once, then {@code {"event": "acked"}} is printed), or {@code stop}. As for {@code group-consume}, a line
 * {@code stop} closes the consumer gracefully and end of stdin halts the JVM like a crash.
 *
 * <p>Options: {@code --topic T --group G [--count N] [--deadline-ms MS] [--ack implicit|accept|release|reject|control]}.
 */
final class ShareConsumeCommand {
    private static final String EOF = "\u0000eof";

    private ShareConsumeCommand() {}

    static void run(Args args) throws InterruptedException {
        String topic = args.required("topic");
        int count = args.optionalInt("count", Integer.MAX_VALUE);
        String ack = args.optional("ack", "implicit");
        if (!List.of("implicit", "accept", "release", "reject", "control").contains(ack)) {
            throw new UsageException("--ack must be implicit, accept, release, reject or control, got " + ack);
        }
        long runMs = Long.parseLong(args.optional("deadline-ms", Integer.toString(ClientConfig.timeoutMs(args))));
        long deadline = System.nanoTime() + Duration.ofMillis(runMs).toNanos();
        BlockingQueue<String> control = startControlReader();

        Properties props = ClientConfig.base(args);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, args.required("group"));
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        if (!ack.equals("implicit")) {
            props.put("share.acknowledgement.mode", "explicit");
        }
        ClientConfig.applyOverrides(props, args);

        KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(props);
        consumer.subscribe(List.of(topic));
        int emitted = 0;
        boolean stopping = false;
        try {
            while (!stopping && emitted < count && System.nanoTime() < deadline) {
                stopping = STOP.equals(takeControl(control, 0));
                if (stopping) {
                    break;
                }
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
                boolean acknowledged = false;
                for (ConsumerRecord<byte[], byte[]> record : records) {
                    if (stopping) {
                        // explicit mode: every record of the poll must be acknowledged before the next one
                        if (!ack.equals("implicit")) {
                            consumer.acknowledge(record, AcknowledgeType.RELEASE);
                        }
                        continue;
                    }
                    Json.emit(recordJson(record));
                    emitted++;
                    switch (ack) {
                        case "implicit" -> { }
                        case "control" -> {
                            String answer = takeControl(control, Long.MAX_VALUE);
                            AcknowledgeType type = switch (answer) {
                                case "accept" -> AcknowledgeType.ACCEPT;
                                case "release" -> AcknowledgeType.RELEASE;
                                case "reject" -> AcknowledgeType.REJECT;
                                default -> null;
                            };
                            if (type == null) {
                                stopping = true;
                                consumer.acknowledge(record, AcknowledgeType.RELEASE);
                            } else {
                                consumer.acknowledge(record, type);
                                consumer.commitSync();
                                Json.emit(Json.object().put("event", "acked").put("offset", record.offset())
                                        .put("partition", record.partition()).put("type", answer));
                            }
                        }
                        default -> {
                            consumer.acknowledge(record, AcknowledgeType.valueOf(ack.toUpperCase()));
                            acknowledged = true;
                        }
                    }
                    if (emitted >= count) {
                        stopping = true;
                    }
                }
                if (acknowledged) {
                    consumer.commitSync();
                }
            }
            if (ack.equals("implicit")) {
                consumer.commitSync(); // the records of the last poll, accepted
            }
        } finally {
            consumer.close();
        }
        Json.emit(Json.object().put("event", "closed").put("records", emitted));
    }

    private static final String STOP = "stop";

    private static ObjectNode recordJson(ConsumerRecord<byte[], byte[]> record) {
        ObjectNode line = Json.object();
        line.put("event", "record");
        line.put("topic", record.topic());
        line.put("partition", record.partition());
        line.put("offset", record.offset());
        line.put("key", Json.base64(record.key()));
        line.put("value", Json.base64(record.value()));
        Short deliveryCount = deliveryCount(record);
        if (deliveryCount == null) {
            line.putNull("delivery_count");
        } else {
            line.put("delivery_count", deliveryCount);
        }
        return line;
    }

    /** ConsumerRecord.deliveryCount() (kafka-clients 4.x); by reflection so the 3.9 build compiles too. */
    private static Short deliveryCount(ConsumerRecord<byte[], byte[]> record) {
        try {
            Method method = record.getClass().getMethod("deliveryCount");
            Object value = method.invoke(record);
            if (value instanceof Optional<?> optional && optional.isPresent()) {
                return (Short) optional.get();
            }
        } catch (ReflectiveOperationException e) {
            // not in this client version
        }
        return null;
    }

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

    /** Next control line, or null when none arrives within waitMs; end of stdin halts (a crash). */
    private static String takeControl(BlockingQueue<String> control, long waitMs) throws InterruptedException {
        String line = waitMs == 0 ? control.poll() : control.poll(waitMs, TimeUnit.MILLISECONDS);
        if (EOF.equals(line)) {
            System.out.flush();
            Runtime.getRuntime().halt(3);
        }
        return line;
    }
}
