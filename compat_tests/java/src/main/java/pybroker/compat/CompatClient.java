package pybroker.compat;

import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.Set;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.common.errors.UnknownServerException;
import org.apache.kafka.common.protocol.Errors;

/**
 * {@code java -jar compat-client.jar <command> --bootstrap HOST:PORT [options]}.
 *
 * <p>stdout carries only JSON lines; a failure is one
 * {@code {"error", "error_class", "message", "kafka_error", "kafka_error_code"}} object on stdout and
 * exit code 1 (2 for a usage error), so a caller can assert on the Kafka exception a broker provoked.
 */
public final class CompatClient {
    private static final Set<String> ADMIN_COMMANDS = Set.of(
            "create-topic", "delete-topic", "list-topics", "describe-topic", "describe-configs",
            "alter-configs", "create-partitions", "list-offsets", "delete-records", "describe-cluster",
            "list-groups", "describe-group", "delete-group", "committed-offsets");

    private CompatClient() {}

    public static void main(String[] argv) {
        int exitCode;
        try {
            if (argv.length == 0) {
                throw new UsageException("usage: <command> --bootstrap HOST:PORT [options]");
            }
            run(argv[0], Args.parse(argv, 1));
            exitCode = 0;
        } catch (UsageException e) {
            emitError(e);
            exitCode = 2;
        } catch (Throwable e) {
            emitError(rootCause(e));
            exitCode = 1;
        }
        System.out.flush();
        // Client threads (metadata refresh, network) must not keep the JVM alive past the answer.
        Runtime.getRuntime().halt(exitCode);
    }

    private static void run(String command, Args args) throws Exception {
        switch (command) {
            case "produce" -> ProduceCommand.run(args);
            case "transactions" -> TransactionsCommand.run(args);
            case "consume" -> ConsumeCommand.consume(args);
            case "offset-for-time" -> ConsumeCommand.offsetForTime(args);
            case "group-consume" -> GroupConsumeCommand.run(args);
            case "share-consume" -> ShareConsumeCommand.run(args);
            case "warmup" -> WarmupCommand.run(args);
            default -> {
                if (!ADMIN_COMMANDS.contains(command)) {
                    throw new UsageException("unknown command " + command);
                }
                AdminCommands.run(command, args);
            }
        }
    }

    private static Throwable rootCause(Throwable e) {
        Throwable current = e;
        while ((current instanceof ExecutionException || current instanceof CompletionException)
                && current.getCause() != null) {
            current = current.getCause();
        }
        return current;
    }

    private static void emitError(Throwable e) {
        ObjectNode error = Json.object();
        error.put("error", e.getClass().getSimpleName());
        error.put("error_class", e.getClass().getName());
        error.put("message", e.getMessage());
        // The protocol error the client maps this exception to (the same table the client decodes
        // responses with), so scenarios can compare Java with other clients by Kafka error name.
        Errors kafkaError = Errors.forException(e);
        boolean mapped = kafkaError != Errors.UNKNOWN_SERVER_ERROR || e instanceof UnknownServerException;
        error.put("kafka_error", mapped ? kafkaError.name() : "UNKNOWN");
        if (mapped) {
            error.put("kafka_error_code", kafkaError.code());
        } else {
            error.putNull("kafka_error_code");
        }
        Json.emit(error);
    }
}
