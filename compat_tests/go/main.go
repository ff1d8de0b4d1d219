// Command compat-go drives franz-go or sarama from JSON lines, like compat_tests/java does for the
// Java client:  compat-go <franz|sarama> <command> --bootstrap HOST:PORT [options]
// stdout carries only JSON lines; bytes are base64 or null; a failure prints one error object
// {"error", "message", "kafka_error", "kafka_error_code"} and exits 1 (2 for usage, 3 for
// "the library cannot express this").
package main

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

type args struct {
	values map[string][]string
}

func parseArgs(argv []string) (*args, error) {
	a := &args{values: map[string][]string{}}
	for i := 0; i < len(argv); i++ {
		if !strings.HasPrefix(argv[i], "--") || i+1 >= len(argv) {
			return nil, fmt.Errorf("expected --name value, got %q", argv[i])
		}
		name := strings.TrimPrefix(argv[i], "--")
		a.values[name] = append(a.values[name], argv[i+1])
		i++
	}
	return a, nil
}

func (a *args) str(name, def string) string {
	if v := a.values[name]; len(v) > 0 {
		return v[len(v)-1]
	}
	return def
}

func (a *args) must(name string) string {
	v := a.str(name, "")
	if v == "" {
		usage(fmt.Sprintf("--%s is required", name))
	}
	return v
}

func (a *args) int64(name string, def int64) int64 {
	s := a.str(name, "")
	if s == "" {
		return def
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		usage(fmt.Sprintf("--%s: %v", name, err))
	}
	return n
}

func (a *args) keyValues(name string) map[string]string {
	out := map[string]string{}
	for _, kv := range a.values[name] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			usage(fmt.Sprintf("--%s wants k=v, got %q", name, kv))
		}
		out[k] = v
	}
	return out
}

func (a *args) timeout() time.Duration {
	return time.Duration(a.int64("timeout-ms", 30000)) * time.Millisecond
}

// inRecord is one line of produce's stdin.
type inRecord struct {
	Key       *string     `json:"key"`
	Value     *string     `json:"value"`
	Headers   [][]*string `json:"headers"`
	Timestamp *int64      `json:"timestamp"`
	Partition *int32      `json:"partition"`
}

type header struct {
	Name  string
	Value []byte
}

type record struct {
	Key, Value []byte
	Headers    []header
	Timestamp  *int64
	Partition  *int32
}

func unb64(s *string) []byte {
	if s == nil {
		return nil
	}
	b, err := base64.StdEncoding.DecodeString(*s)
	if err != nil {
		usage(fmt.Sprintf("bad base64: %v", err))
	}
	if b == nil {
		b = []byte{}
	}
	return b
}

func b64(b []byte) any {
	if b == nil {
		return nil
	}
	return base64.StdEncoding.EncodeToString(b)
}

func readRecords() []record {
	var out []record
	scanner := bufio.NewScanner(os.Stdin)
	scanner.Buffer(make([]byte, 1<<20), 64<<20)
	for scanner.Scan() {
		line := strings.TrimSpace(scanner.Text())
		if line == "" {
			continue
		}
		var in inRecord
		if err := json.Unmarshal([]byte(line), &in); err != nil {
			usage(fmt.Sprintf("bad record line: %v", err))
		}
		r := record{Key: unb64(in.Key), Value: unb64(in.Value), Timestamp: in.Timestamp, Partition: in.Partition}
		for _, h := range in.Headers {
			if len(h) != 2 || h[0] == nil {
				usage("a header is [name, b64|null]")
			}
			r.Headers = append(r.Headers, header{*h[0], unb64(h[1])})
		}
		out = append(out, r)
	}
	return out
}

// consumed is one line of consume's output.
func consumedLine(topic string, partition int32, offset int64, ts time.Time, logAppend *bool, key, value []byte, headers []header) map[string]any {
	hs := [][]any{}
	for _, h := range headers {
		hs = append(hs, []any{h.Name, b64(h.Value)})
	}
	var tsType any
	if logAppend != nil {
		tsType = "CreateTime"
		if *logAppend {
			tsType = "LogAppendTime"
		}
	}
	return map[string]any{
		"topic": topic, "partition": partition, "offset": offset, "timestamp": ts.UnixMilli(),
		"timestamp_type": tsType, "key": b64(key), "value": b64(value), "headers": hs,
	}
}

var (
	stdout   = json.NewEncoder(os.Stdout)
	stdoutMu sync.Mutex // group consumers emit from the libraries' callback goroutines too
)

func emit(v any) {
	stdoutMu.Lock()
	defer stdoutMu.Unlock()
	if err := stdout.Encode(v); err != nil {
		os.Exit(4)
	}
}

type notExpressible struct{ what string }

func (e notExpressible) Error() string { return e.what }

func usage(msg string) {
	emit(map[string]any{"error": "UsageError", "message": msg, "kafka_error": "UNKNOWN", "kafka_error_code": -1})
	os.Exit(2)
}

// fail prints the error object; the Kafka error name comes from franz-go's kerr table for both libraries.
func fail(err error, code int16) {
	var ne notExpressible
	if errors.As(err, &ne) {
		emit(map[string]any{"error": "NotExpressible", "message": ne.what, "kafka_error": "UNKNOWN", "kafka_error_code": -1})
		os.Exit(3)
	}
	name := "UNKNOWN"
	if code != 0 {
		if ke, ok := kerr.ErrorForCode(code).(*kerr.Error); ok {
			name = ke.Message
		}
	}
	emit(map[string]any{"error": fmt.Sprintf("%T", err), "message": err.Error(), "kafka_error": name, "kafka_error_code": code})
	os.Exit(1)
}

func main() {
	if len(os.Args) < 3 {
		usage("compat-go <franz|sarama> <command> --bootstrap HOST:PORT [options]")
	}
	a, err := parseArgs(os.Args[3:])
	if err != nil {
		usage(err.Error())
	}
	switch os.Args[1] {
	case "franz":
		runFranz(os.Args[2], a)
	case "sarama":
		runSarama(os.Args[2], a)
	default:
		usage("library must be franz or sarama")
	}
}
