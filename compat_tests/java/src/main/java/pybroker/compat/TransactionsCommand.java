package pybroker.compat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * `transactions`: a transactional producer (`--transactional-id`). Each stdin line is one
 * transaction, `{"commit": bool, "records": [record, ...]}` (records as for `produce`); the program
 * runs initTransactions() once, then per line begin, send, commit or abort, and prints one line
 * `{"deliveries": [{partition, offset, timestamp}, ...]}` per transaction.
 */
final class TransactionsCommand {
    private TransactionsCommand() {}

    static void run(Args args) throws IOException, InterruptedException, ExecutionException {
        String topic = args.required("topic");
        List<JsonNode> transactions = readLines();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(producerConfig(args))) {
            producer.initTransactions();
            List<ObjectNode> out = new ArrayList<>();
            for (JsonNode txn : transactions) {
                producer.beginTransaction();
                List<Future<RecordMetadata>> deliveries = new ArrayList<>();
                for (JsonNode record : txn.get("records")) {
                    Long partition = Json.longOrNull(record, "partition");
                    deliveries.add(producer.send(new ProducerRecord<>(
                            topic,
                            partition == null ? null : Math.toIntExact(partition),
                            null,
                            Json.bytesOrNull(record, "key"),
                            Json.bytesOrNull(record, "value"),
                            Json.headersFrom(record))));
                }
                producer.flush();
                ObjectNode line = Json.object();
                ArrayNode lines = line.putArray("deliveries");
                for (Future<RecordMetadata> delivery : deliveries) {
                    RecordMetadata meta = delivery.get();
                    ObjectNode d = lines.addObject();
                    d.put("partition", meta.partition());
                    d.put("offset", meta.offset());
                    d.put("timestamp", meta.timestamp());
                }
                if (txn.path("commit").asBoolean(false)) {
                    producer.commitTransaction();
                } else {
                    producer.abortTransaction();
                }
                out.add(line);
            }
            out.forEach(Json::emit);
        }
    }

    private static Properties producerConfig(Args args) {
        int timeoutMs = ClientConfig.timeoutMs(args);
        Properties props = ClientConfig.base(args);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, args.required("transactional-id"));
        props.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, Integer.toString(timeoutMs));
        int requestTimeoutMs = Math.min(timeoutMs, 30_000);
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, Integer.toString(Math.max(timeoutMs, requestTimeoutMs + 5)));
        ClientConfig.applyOverrides(props, args);
        return props;
    }

    private static List<JsonNode> readLines() throws IOException {
        List<JsonNode> lines = new ArrayList<>();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (!line.isBlank()) {
                JsonNode node = Json.parseLine(line);
                if (!node.isObject() || !node.path("records").isArray()) {
                    throw new UsageException("each line must be {\"commit\": bool, \"records\": [...]}");
                }
                lines.add(node);
            }
        }
        return lines;
    }
}
