package pybroker.compat;

/** A malformed command line or input line: the caller's mistake, not the broker's. */
final class UsageException extends RuntimeException {
    UsageException(String message) {
        super(message);
    }
}
