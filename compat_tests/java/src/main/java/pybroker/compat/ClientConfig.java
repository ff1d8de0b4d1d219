package pybroker.compat;

import java.util.Properties;
import org.apache.kafka.clients.CommonClientConfigs;

/** Settings every command shares: bootstrap, a bounded wait, and `--property k=v` pass-through. */
final class ClientConfig {
    private ClientConfig() {}

    static Properties base(Args args) {
        Properties props = new Properties();
        props.put(CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG, args.required("bootstrap"));
        props.put(CommonClientConfigs.CLIENT_ID_CONFIG, args.optional("client-id", "pybroker-compat-java"));
        int timeoutMs = timeoutMs(args);
        props.put(CommonClientConfigs.REQUEST_TIMEOUT_MS_CONFIG, Integer.toString(Math.min(timeoutMs, 30_000)));
        props.put(CommonClientConfigs.DEFAULT_API_TIMEOUT_MS_CONFIG, Integer.toString(timeoutMs));
        return props;
    }

    /** Applied last so a scenario can override anything this program chose. */
    static void applyOverrides(Properties props, Args args) {
        props.putAll(args.keyValues("property"));
    }

    static int timeoutMs(Args args) {
        return args.optionalInt("timeout-ms", 30_000);
    }
}
