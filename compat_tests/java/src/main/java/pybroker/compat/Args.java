package pybroker.compat;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** `--name value` options; a name may repeat (`--config a=1 --config b=2`). */
final class Args {
    private final Map<String, List<String>> values = new LinkedHashMap<>();

    static Args parse(String[] argv, int from) {
        Args args = new Args();
        for (int i = from; i < argv.length; i++) {
            String token = argv[i];
            if (!token.startsWith("--")) {
                throw new UsageException("unexpected argument: " + token);
            }
            if (i + 1 >= argv.length) {
                throw new UsageException("missing value for " + token);
            }
            args.values.computeIfAbsent(token.substring(2), k -> new ArrayList<>()).add(argv[++i]);
        }
        return args;
    }

    String required(String name) {
        List<String> found = values.get(name);
        if (found == null) {
            throw new UsageException("missing required option --" + name);
        }
        return found.get(found.size() - 1);
    }

    String optional(String name, String fallback) {
        List<String> found = values.get(name);
        return found == null ? fallback : found.get(found.size() - 1);
    }

    int requiredInt(String name) {
        return parseInt(name, required(name));
    }

    int optionalInt(String name, int fallback) {
        String raw = optional(name, null);
        return raw == null ? fallback : parseInt(name, raw);
    }

    long requiredLong(String name) {
        String raw = required(name);
        try {
            return Long.parseLong(raw);
        } catch (NumberFormatException e) {
            throw new UsageException("--" + name + " expects an integer, got " + raw);
        }
    }

    boolean optionalBool(String name, boolean fallback) {
        String raw = optional(name, null);
        if (raw == null) {
            return fallback;
        }
        if (!raw.equals("true") && !raw.equals("false")) {
            throw new UsageException("--" + name + " expects true or false, got " + raw);
        }
        return Boolean.parseBoolean(raw);
    }

    List<String> all(String name) {
        return values.getOrDefault(name, List.of());
    }

    /** Every `--name k=v` as an ordered map. */
    Map<String, String> keyValues(String name) {
        Map<String, String> result = new LinkedHashMap<>();
        for (String pair : all(name)) {
            int eq = pair.indexOf('=');
            if (eq <= 0) {
                throw new UsageException("--" + name + " expects key=value, got " + pair);
            }
            result.put(pair.substring(0, eq), pair.substring(eq + 1));
        }
        return result;
    }

    private static int parseInt(String name, String raw) {
        try {
            return Integer.parseInt(raw);
        } catch (NumberFormatException e) {
            throw new UsageException("--" + name + " expects an integer, got " + raw);
        }
    }
}
