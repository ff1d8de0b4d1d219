package pybroker.compat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * `produce`: records from stdin (JSON lines), sent in order; one delivery line per record, in input
 * order, once every record is acknowledged.
 */
final class ProduceCommand {
    private static final Set<String> CODECS = Set.of("none", "gzip", "snappy", "lz4", "zstd");
    private static final Set<String> ACKS = Set.of("all", "1", "0");

    private ProduceCommand() {}

    static void run(Args args) throws IOException, InterruptedException, ExecutionException {
        String topic = args.required("topic");
        List<ProducerRecord<byte[], byte[]>> records = readRecords(topic);
        List<Future<RecordMetadata>> deliveries = new ArrayList<>(records.size());
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(producerConfig(args))) {
            for (ProducerRecord<byte[], byte[]> record : records) {
                deliveries.add(producer.send(record));
            }
            producer.flush();
            List<ObjectNode> lines = new ArrayList<>(deliveries.size());
            for (Future<RecordMetadata> delivery : deliveries) {
                RecordMetadata meta = delivery.get();
                ObjectNode line = Json.object();
                line.put("partition", meta.partition());
                // acks=0 gets no offset back from the broker: the client reports -1.
                line.put("offset", meta.hasOffset() ? meta.offset() : -1);
                line.put("timestamp", meta.hasTimestamp() ? meta.timestamp() : -1);
                lines.add(line);
            }
            lines.forEach(Json::emit);
        }
    }

    private static Properties producerConfig(Args args) {
        String compression = args.optional("compression", "none");
        if (!CODECS.contains(compression)) {
            throw new UsageException("--compression must be one of " + CODECS);
        }
        String acks = args.optional("acks", "all");
        if (!ACKS.contains(acks)) {
            throw new UsageException("--acks must be one of " + ACKS);
        }
        boolean idempotent = args.optionalBool("idempotent", false);
        if (idempotent && !acks.equals("all")) {
            throw new UsageException("--idempotent true needs --acks all");
        }
        int timeoutMs = ClientConfig.timeoutMs(args);
        Properties props = ClientConfig.base(args);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, compression);
        props.put(ProducerConfig.ACKS_CONFIG, acks);
        // Spelled out both ways: 3.x turns idempotence on by default.
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, Boolean.toString(idempotent));
        props.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, Integer.toString(timeoutMs));
        // delivery.timeout.ms must cover linger.ms + request.timeout.ms or the producer refuses to start.
        int requestTimeoutMs = Math.min(timeoutMs, 30_000);
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, Integer.toString(Math.max(timeoutMs, requestTimeoutMs + 5)));
        ClientConfig.applyOverrides(props, args);
        return props;
    }

    private static List<ProducerRecord<byte[], byte[]>> readRecords(String topic) throws IOException {
        List<ProducerRecord<byte[], byte[]>> records = new ArrayList<>();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        int lineNumber = 0;
        while ((line = in.readLine()) != null) {
            lineNumber++;
            if (line.isBlank()) {
                continue;
            }
            try {
                records.add(toRecord(topic, Json.parseLine(line)));
            } catch (UsageException e) {
                throw new UsageException("stdin line " + lineNumber + ": " + e.getMessage());
            }
        }
        return records;
    }

    private static ProducerRecord<byte[], byte[]> toRecord(String topic, JsonNode node) {
        if (!node.isObject()) {
            throw new UsageException("each line must be a JSON object");
        }
        Long partition = Json.longOrNull(node, "partition");
        return new ProducerRecord<>(
                topic,
                partition == null ? null : Math.toIntExact(partition),
                Json.longOrNull(node, "timestamp"),
                Json.bytesOrNull(node, "key"),
                Json.bytesOrNull(node, "value"),
                Json.headersFrom(node));
    }
}
