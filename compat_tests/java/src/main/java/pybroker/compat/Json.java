package pybroker.compat;

import com.fasterxml.jackson.core.JsonGenerator;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.common.header.internals.RecordHeaders;

/** JSON lines in and out; bytes travel as base64 so any key/value survives unchanged. */
final class Json {
    static final ObjectMapper MAPPER = new ObjectMapper().configure(JsonGenerator.Feature.AUTO_CLOSE_TARGET, false);
    private static final PrintStream OUT = new PrintStream(System.out, false, StandardCharsets.UTF_8);

    private Json() {}

    static ObjectNode object() {
        return MAPPER.createObjectNode();
    }

    static ArrayNode array() {
        return MAPPER.createArrayNode();
    }

    static synchronized void emit(JsonNode node) {
        try {
            OUT.println(MAPPER.writeValueAsString(node));
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
        OUT.flush();
    }

    static JsonNode parseLine(String line) {
        try {
            return MAPPER.readTree(line);
        } catch (IOException e) {
            throw new UsageException("input line is not JSON: " + e.getMessage());
        }
    }

    static String base64(byte[] bytes) {
        return bytes == null ? null : Base64.getEncoder().encodeToString(bytes);
    }

    static byte[] bytesOrNull(JsonNode node, String field) {
        JsonNode value = node.get(field);
        if (value == null || value.isNull()) {
            return null;
        }
        if (!value.isTextual()) {
            throw new UsageException("\"" + field + "\" must be base64 text or null");
        }
        return decodeBase64(value.asText(), field);
    }

    static Long longOrNull(JsonNode node, String field) {
        JsonNode value = node.get(field);
        if (value == null || value.isNull()) {
            return null;
        }
        if (!value.canConvertToLong()) {
            throw new UsageException("\"" + field + "\" must be an integer or null");
        }
        return value.asLong();
    }

    /** `[[name, base64|null], ...]` → Kafka headers (order and duplicates preserved). */
    static Headers headersFrom(JsonNode node) {
        RecordHeaders headers = new RecordHeaders();
        JsonNode list = node.get("headers");
        if (list == null || list.isNull()) {
            return headers;
        }
        if (!list.isArray()) {
            throw new UsageException("\"headers\" must be a list of [name, base64|null] pairs");
        }
        for (JsonNode pair : list) {
            if (!pair.isArray() || pair.size() != 2 || !pair.get(0).isTextual()) {
                throw new UsageException("each header must be [name, base64|null]");
            }
            JsonNode value = pair.get(1);
            byte[] bytes = value.isNull() ? null : decodeBase64(value.asText(), "header " + pair.get(0).asText());
            headers.add(pair.get(0).asText(), bytes);
        }
        return headers;
    }

    static ArrayNode headersTo(Headers headers) {
        ArrayNode list = array();
        for (Header header : headers) {
            ArrayNode pair = list.addArray();
            pair.add(header.key());
            pair.add(base64(header.value()));
        }
        return list;
    }

    private static byte[] decodeBase64(String text, String what) {
        try {
            return Base64.getDecoder().decode(text);
        } catch (IllegalArgumentException e) {
            throw new UsageException(what + " is not valid base64");
        }
    }
}
