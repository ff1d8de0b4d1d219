package pybroker.compat;

import com.fasterxml.jackson.databind.node.ObjectNode;
import java.time.Duration;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * `warmup`: builds (and closes) a producer, a consumer and an admin client without contacting a
 * broker, so a JVM run with -XX:ArchiveClassesAtExit records the classes every command loads into a
 * class-data-sharing archive; later runs start about twice as fast from it.
 */
final class WarmupCommand {
    private WarmupCommand() {}

    static void run(Args args) {
        Properties producerProps = ClientConfig.base(args);
        producerProps.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        producerProps.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(producerProps)) {
            new ProducerRecord<>("warmup", 0, 0L, new byte[0], new byte[0], Json.headersFrom(Json.parseLine("{}")));
            producer.close(Duration.ZERO);
        }
        Properties consumerProps = ClientConfig.base(args);
        consumerProps.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        consumerProps.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(consumerProps)) {
            consumer.close(Duration.ZERO);
        }
        try (Admin admin = Admin.create(ClientConfig.base(args))) {
            admin.close(Duration.ZERO);
        }
        ObjectNode out = Json.object();
        out.put("warmed_up", true);
        Json.emit(out);
    }
}
