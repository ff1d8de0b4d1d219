package pybroker.streams;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Kafka's word count: lines from --input are split into lower-case words, re-keyed by word (through
 * the repartition topic APP-words-repartition), counted in the store "counts" (changelog
 * APP-counts-changelog) and every new count goes to --output as (word, 8-byte big-endian long).
 *
 * <pre>
 * java -jar streams-wordcount.jar --bootstrap HOST:PORT --application-id APP --input IN --output OUT
 *      --state-dir DIR --guarantee exactly_once_v2|at_least_once [--group-protocol classic|streams]
 * </pre>
 *
 * stdout carries one JSON line per event: {"event":"state","state":"RUNNING"} on each state change and
 * {"event":"closed"} after a clean close.  A line "stop" on stdin (or its end) closes the instance
 * cleanly (committing what it processed); killing the process is the unclean stop.
 */
public final class WordCount {
  private WordCount() {}

  public static void main(String[] argv) throws Exception {
    Map<String, String> args = parse(argv);
    Properties props = new Properties();
    props.put(StreamsConfig.APPLICATION_ID_CONFIG, need(args, "application-id"));
    props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, need(args, "bootstrap"));
    props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, need(args, "guarantee"));
    props.put(StreamsConfig.STATE_DIR_CONFIG, need(args, "state-dir"));
    // Every update is forwarded (no record cache), so the output shows each count in turn; a commit
    // (a transaction, under EOS) a second leaves the test time to kill the instance in the middle of one.
    props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
    props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 1000);
    // Streams deletes the repartition records it has committed past (DeleteRecords) at most this
    // often (default 30 s): often enough to happen within a test run.
    props.put(StreamsConfig.REPARTITION_PURGE_INTERVAL_MS_CONFIG, 1000);
    // --group-protocol classic (the default) or streams (KIP-1071: the broker assigns the tasks).
    String groupProtocol = args.getOrDefault("group-protocol", "classic");
    props.put(StreamsConfig.GROUP_PROTOCOL_CONFIG, groupProtocol);
    if (groupProtocol.equals("classic")) {
      // A killed instance's group membership must expire within the test's patience (the minimum the
      // brokers accept); everything else is Kafka Streams' default. Under the streams protocol the
      // session timeout and heartbeat interval are the group's (broker-side) configs.
      props.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 6000);
      props.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 1000);
    }

    StreamsBuilder builder = new StreamsBuilder();
    builder.stream(need(args, "input"), Consumed.with(Serdes.String(), Serdes.String()))
        .flatMapValues(line -> Arrays.asList(line.toLowerCase(Locale.ROOT).split("\\W+")))
        .filter((key, word) -> !word.isEmpty())
        .groupBy((key, word) -> word, Grouped.with("words", Serdes.String(), Serdes.String()))
        .count(Materialized.as("counts"))
        .toStream()
        .to(need(args, "output"), Produced.with(Serdes.String(), Serdes.Long()));
    Topology topology = builder.build();

    KafkaStreams streams = new KafkaStreams(topology, props);
    CountDownLatch failed = new CountDownLatch(1);
    streams.setStateListener((now, before) -> emit("{\"event\":\"state\",\"state\":\"" + now + "\"}"));
    streams.setUncaughtExceptionHandler(exception -> {
      System.err.println("uncaught exception in a stream thread: " + exception);
      exception.printStackTrace();
      failed.countDown();
      return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse
          .SHUTDOWN_CLIENT;
    });
    streams.start();

    Thread stdin = new Thread(() -> {
      try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
        String line;
        while ((line = in.readLine()) != null) {
          if (line.trim().equals("stop")) {
            break;
          }
        }
      } catch (Exception ignored) {
        // End of stdin stops the instance as "stop" does.
      }
      failed.countDown();
    }, "stdin");
    stdin.setDaemon(true);
    stdin.start();
    failed.await();
    boolean closed = streams.close(Duration.ofSeconds(60));
    emit("{\"event\":\"closed\",\"clean\":" + closed + "}");
    System.exit(closed ? 0 : 1);
  }

  private static synchronized void emit(String json) {
    System.out.println(json);
    System.out.flush();
  }

  private static Map<String, String> parse(String[] argv) {
    Map<String, String> args = new HashMap<>();
    for (int i = 0; i + 1 < argv.length; i += 2) {
      if (!argv[i].startsWith("--")) {
        throw new IllegalArgumentException("expected --name value pairs, got " + argv[i]);
      }
      args.put(argv[i].substring(2), argv[i + 1]);
    }
    return args;
  }

  private static String need(Map<String, String> args, String name) {
    String value = args.get(name);
    if (value == null) {
      throw new IllegalArgumentException("missing --" + name);
    }
    return value;
  }
}
