package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"
)

// txnLine is one stdin line of the `transactions` command: {"commit": bool, "records": [record...]},
// records as for `produce` (their timestamps are not used).
type txnLine struct {
	Commit  bool       `json:"commit"`
	Records []inRecord `json:"records"`
}

func readTransactions() []txnLine {
	var out []txnLine
	scanner := bufio.NewScanner(os.Stdin)
	scanner.Buffer(make([]byte, 1<<20), 64<<20)
	for scanner.Scan() {
		line := strings.TrimSpace(scanner.Text())
		if line == "" {
			continue
		}
		var t txnLine
		if err := json.Unmarshal([]byte(line), &t); err != nil {
			usage(fmt.Sprintf("bad transaction line: %v", err))
		}
		out = append(out, t)
	}
	return out
}

func toRecord(in inRecord) record {
	r := record{Key: unb64(in.Key), Value: unb64(in.Value), Partition: in.Partition}
	for _, h := range in.Headers {
		if len(h) != 2 || h[0] == nil {
			usage("a header is [name, b64|null]")
		}
		r.Headers = append(r.Headers, header{*h[0], unb64(h[1])})
	}
	return r
}

// franzTransactions: a kgo client with a TransactionalID; per line BeginTransaction, ProduceSync,
// EndTransaction(commit or abort); one {"deliveries": [...]} line per transaction.
func franzTransactions(ctx context.Context, a *args, opts []kgo.Opt) {
	txns := readTransactions()
	opts = append(opts, kgo.TransactionalID(a.must("transactional-id")), kgo.ProducerLinger(5*time.Millisecond),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	client, err := kgo.NewClient(opts...)
	if err != nil {
		franzFail(err)
	}
	defer client.Close()
	topic := a.must("topic")
	for _, t := range txns {
		if err := client.BeginTransaction(); err != nil {
			franzFail(err)
		}
		recs := make([]*kgo.Record, 0, len(t.Records))
		for _, in := range t.Records {
			r := toRecord(in)
			rec := &kgo.Record{Topic: topic, Key: r.Key, Value: r.Value}
			for _, h := range r.Headers {
				rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: h.Name, Value: h.Value})
			}
			if r.Partition != nil {
				rec.Partition = *r.Partition
			}
			recs = append(recs, rec)
		}
		results := client.ProduceSync(ctx, recs...)
		if err := results.FirstErr(); err != nil {
			franzFail(err)
		}
		commit := kgo.TryAbort
		if t.Commit {
			commit = kgo.TryCommit
		}
		if err := client.EndTransaction(ctx, commit); err != nil {
			franzFail(err)
		}
		deliveries := make([]map[string]any, 0, len(results))
		for _, res := range results {
			deliveries = append(deliveries, map[string]any{
				"partition": res.Record.Partition, "offset": res.Record.Offset, "timestamp": -1})
		}
		emit(map[string]any{"deliveries": deliveries})
	}
}

// saramaTransactions: a SyncProducer with Producer.Transaction.ID; per line BeginTxn,
// SendMessages, CommitTxn or AbortTxn.
func saramaTransactions(a *args, config *sarama.Config, brokers []string) {
	txns := readTransactions()
	config.Producer.Return.Successes = true
	config.Producer.Return.Errors = true
	config.Producer.RequiredAcks = sarama.WaitForAll
	config.Producer.Idempotent = true
	config.Producer.Transaction.ID = a.must("transactional-id")
	config.Producer.Partitioner = sarama.NewManualPartitioner
	config.Producer.Timeout = a.timeout()
	config.Net.MaxOpenRequests = 1
	producer, err := sarama.NewSyncProducer(brokers, config)
	if err != nil {
		saramaFail(err)
	}
	defer producer.Close()
	topic := a.must("topic")
	for _, t := range txns {
		if err := producer.BeginTxn(); err != nil {
			saramaFail(err)
		}
		messages := make([]*sarama.ProducerMessage, 0, len(t.Records))
		for _, in := range t.Records {
			r := toRecord(in)
			m := &sarama.ProducerMessage{Topic: topic}
			if r.Key != nil {
				m.Key = sarama.ByteEncoder(r.Key)
			}
			if r.Value != nil {
				m.Value = sarama.ByteEncoder(r.Value)
			}
			for _, h := range r.Headers {
				m.Headers = append(m.Headers, sarama.RecordHeader{Key: []byte(h.Name), Value: h.Value})
			}
			if r.Partition != nil {
				m.Partition = *r.Partition
			}
			messages = append(messages, m)
		}
		if err := producer.SendMessages(messages); err != nil {
			saramaFail(err)
		}
		if t.Commit {
			err = producer.CommitTxn()
		} else {
			err = producer.AbortTxn()
		}
		if err != nil {
			saramaFail(err)
		}
		deliveries := make([]map[string]any, 0, len(messages))
		for _, m := range messages {
			deliveries = append(deliveries, map[string]any{"partition": m.Partition, "offset": m.Offset, "timestamp": -1})
		}
		emit(map[string]any{"deliveries": deliveries})
	}
}
