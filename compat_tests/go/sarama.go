package main

// sarama: Client + SyncProducer + Consumer + ClusterAdmin, configured as a stock user would
// (config.Version = sarama.DefaultVersion, which picks the request versions; no negotiation).

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

func saramaFail(err error) {
	var pes sarama.ProducerErrors
	if errors.As(err, &pes) && len(pes) > 0 {
		err = pes[0]
	}
	var ke sarama.KError
	if errors.As(err, &ke) {
		fail(err, int16(ke))
	}
	fail(err, 0)
}

func saramaCompression(name string) sarama.CompressionCodec {
	switch name {
	case "none":
		return sarama.CompressionNone
	case "gzip":
		return sarama.CompressionGZIP
	case "snappy":
		return sarama.CompressionSnappy
	case "lz4":
		return sarama.CompressionLZ4
	case "zstd":
		return sarama.CompressionZSTD
	}
	usage("unknown compression " + name)
	return sarama.CompressionNone
}

func runSarama(command string, a *args) {
	timeout := a.timeout()
	config := sarama.NewConfig()
	config.Version = sarama.DefaultVersion
	config.ClientID = a.str("client-id", "compat-sarama")
	config.Net.DialTimeout = timeout
	config.Net.ReadTimeout = timeout
	config.Net.WriteTimeout = timeout
	config.Admin.Timeout = timeout
	config.Metadata.AllowAutoTopicCreation = false
	config.Metadata.Retry.Max = 3
	config.Metadata.Retry.Backoff = 250 * time.Millisecond
	securityFrom(a).applySarama(config)
	brokers := strings.Split(a.must("bootstrap"), ",")
	topic := a.str("topic", "")
	switch command {
	case "produce":
		saramaProduce(a, config, brokers)
		return
	case "transactions":
		saramaTransactions(a, config, brokers)
		return
	case "consume":
		saramaConsume(a, config, brokers)
		return
	case "group-consume":
		saramaGroupConsume(a, config, brokers)
		return
	}
	client, err := sarama.NewClient(brokers, config)
	if err != nil {
		saramaFail(err)
	}
	defer client.Close()
	partition := int32(a.int64("partition", 0))
	switch command {
	case "offset-for-time":
		offset, err := client.GetOffset(topic, partition, a.int64("timestamp", 0))
		if err != nil {
			saramaFail(err)
		}
		if offset < 0 {
			emit(map[string]any{"offset": nil})
		} else {
			emit(map[string]any{"offset": offset})
		}
		return
	case "list-offsets":
		spec := a.must("spec")
		var ts int64
		switch spec {
		case "earliest":
			ts = sarama.OffsetOldest
		case "latest":
			ts = sarama.OffsetNewest
		case "max-timestamp":
			fail(notExpressible{"sarama's Client.GetOffset has no max-timestamp spec (ListOffsets v7)"}, 0)
		default:
			n, err := strconv.ParseInt(spec, 10, 64)
			if err != nil {
				usage("bad --spec " + spec)
			}
			ts = n
		}
		offset, err := client.GetOffset(topic, partition, ts)
		if err != nil {
			saramaFail(err)
		}
		// GetOffset returns only the offset; for a timestamp lookup a sarama user reads that record
		// to learn its timestamp, and so do we.
		stamp := int64(-1)
		if ts >= 0 && offset >= 0 {
			stamp = saramaRecordTimestamp(config, brokers, topic, partition, offset, a.timeout())
		}
		emit(map[string]any{"offset": offset, "timestamp": stamp})
		return
	}
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		saramaFail(err)
	}
	switch command {
	case "create-topic":
		entries := map[string]*string{}
		for k, v := range a.keyValues("config") {
			entries[k] = &v
		}
		detail := &sarama.TopicDetail{
			NumPartitions:     int32(a.int64("partitions", 1)),
			ReplicationFactor: int16(a.int64("replication-factor", 1)),
			ConfigEntries:     entries,
		}
		if err := admin.CreateTopic(topic, detail, false); err != nil {
			saramaFail(err)
		}
		emit(map[string]any{"topic": topic, "partitions": detail.NumPartitions})
	case "delete-topic":
		if err := admin.DeleteTopic(topic); err != nil {
			saramaFail(err)
		}
		emit(map[string]any{"topic": topic, "deleted": true})
	case "describe-topic":
		metas, err := admin.DescribeTopics([]string{topic})
		if err != nil {
			saramaFail(err)
		}
		if len(metas) != 1 {
			saramaFail(sarama.ErrUnknownTopicOrPartition)
		}
		if metas[0].Err != sarama.ErrNoError {
			saramaFail(metas[0].Err)
		}
		emit(map[string]any{"topic": topic, "partitions": len(metas[0].Partitions)})
	case "describe-configs":
		entries, err := admin.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: topic})
		if err != nil {
			saramaFail(err)
		}
		configs := map[string]any{}
		for _, e := range entries {
			configs[e.Name] = e.Value
		}
		emit(map[string]any{"topic": topic, "configs": configs})
	case "alter-configs":
		entries := map[string]sarama.IncrementalAlterConfigsEntry{}
		for k, v := range a.keyValues("set") {
			entries[k] = sarama.IncrementalAlterConfigsEntry{Operation: sarama.IncrementalAlterConfigsOperationSet, Value: &v}
		}
		if err := admin.IncrementalAlterConfig(sarama.TopicResource, topic, entries, false); err != nil {
			saramaFail(err)
		}
		emit(map[string]any{"topic": topic, "altered": len(entries)})
	case "create-partitions":
		if err := admin.CreatePartitions(topic, int32(a.int64("total", 0)), nil, false); err != nil {
			saramaFail(err)
		}
		emit(map[string]any{"topic": topic, "partitions": a.int64("total", 0)})
	case "delete-records":
		if err := admin.DeleteRecords(topic, map[int32]int64{partition: a.int64("before", 0)}); err != nil {
			saramaFail(err)
		}
		// DeleteRecords returns no low watermark; ask for the earliest offset, as a sarama user would.
		low, err := client.GetOffset(topic, partition, sarama.OffsetOldest)
		if err != nil {
			saramaFail(err)
		}
		emit(map[string]any{"low_watermark": low})
	default:
		usage("unknown command " + command)
	}
}

func saramaProduce(a *args, config *sarama.Config, brokers []string) {
	records := readRecords()
	acks := a.str("acks", "all")
	config.Producer.Return.Successes = true
	config.Producer.Return.Errors = true
	config.Producer.Compression = saramaCompression(a.str("compression", "none"))
	config.Producer.Flush.Frequency = 5 * time.Millisecond
	config.Producer.Timeout = a.timeout()
	switch acks {
	case "all":
		config.Producer.RequiredAcks = sarama.WaitForAll
	case "1":
		config.Producer.RequiredAcks = sarama.WaitForLocal
	case "0":
		config.Producer.RequiredAcks = sarama.NoResponse
	default:
		usage("bad --acks " + acks)
	}
	if a.str("idempotent", "false") == "true" {
		config.Producer.Idempotent = true
		config.Net.MaxOpenRequests = 1
	}
	topic := a.must("topic")
	messages := make([]*sarama.ProducerMessage, 0, len(records))
	explicit := false
	for _, r := range records {
		m := &sarama.ProducerMessage{Topic: topic}
		// A nil Encoder is sent as a null key/value; ByteEncoder(nil) would be too, but be explicit.
		if r.Key != nil {
			m.Key = sarama.ByteEncoder(r.Key)
		}
		if r.Value != nil {
			m.Value = sarama.ByteEncoder(r.Value)
		}
		for _, h := range r.Headers {
			m.Headers = append(m.Headers, sarama.RecordHeader{Key: []byte(h.Name), Value: h.Value})
		}
		if r.Timestamp != nil {
			m.Timestamp = time.UnixMilli(*r.Timestamp)
		}
		if r.Partition != nil {
			m.Partition = *r.Partition
			explicit = true
		}
		messages = append(messages, m)
	}
	if explicit {
		config.Producer.Partitioner = sarama.NewManualPartitioner
	}
	producer, err := sarama.NewSyncProducer(brokers, config)
	if err != nil {
		saramaFail(err)
	}
	defer producer.Close()
	if err := producer.SendMessages(messages); err != nil {
		saramaFail(err)
	}
	for _, m := range messages {
		offset := m.Offset
		if acks == "0" {
			offset = -1
		}
		// -1: sarama does not hand back the broker's LogAppendTime, only the timestamp it sent.
		emit(map[string]any{"partition": m.Partition, "offset": offset, "timestamp": -1})
	}
}

func saramaConsume(a *args, config *sarama.Config, brokers []string) {
	topic := a.must("topic")
	partition := int32(a.int64("partition", 0))
	count := int(a.int64("count", 1))
	var start int64
	switch s := a.must("start"); s {
	case "beginning":
		start = sarama.OffsetOldest
	case "end":
		start = sarama.OffsetNewest
	default:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			usage("bad --start " + s)
		}
		start = n
	}
	config.Consumer.Return.Errors = true
	if a.str("isolation", "read_uncommitted") == "read_committed" {
		config.Consumer.IsolationLevel = sarama.ReadCommitted
	}
	consumer, err := sarama.NewConsumer(brokers, config)
	if err != nil {
		saramaFail(err)
	}
	defer consumer.Close()
	pc, err := consumer.ConsumePartition(topic, partition, start)
	if err != nil {
		saramaFail(err)
	}
	defer pc.Close()
	deadline := time.After(a.timeout())
	for got := 0; got < count; {
		select {
		case m := <-pc.Messages():
			var headers []header
			for _, h := range m.Headers {
				headers = append(headers, header{string(h.Key), h.Value})
			}
			// ConsumerMessage carries no timestamp type (sarama swaps in LogAppendTime silently).
			emit(consumedLine(m.Topic, m.Partition, m.Offset, m.Timestamp, nil, m.Key, m.Value, headers))
			got++
		case e := <-pc.Errors():
			saramaFail(e)
		case <-deadline:
			return
		}
	}
}

func saramaRecordTimestamp(config *sarama.Config, brokers []string, topic string, partition int32, offset int64, timeout time.Duration) int64 {
	consumer, err := sarama.NewConsumer(brokers, config)
	if err != nil {
		saramaFail(err)
	}
	defer consumer.Close()
	pc, err := consumer.ConsumePartition(topic, partition, offset)
	if err != nil {
		saramaFail(err)
	}
	defer pc.Close()
	select {
	case m := <-pc.Messages():
		return m.Timestamp.UnixMilli()
	case <-time.After(timeout):
		fail(errors.New("timed out reading the record at the listed offset"), 0)
	}
	return -1
}

// saramaStrategy is the sarama BalanceStrategy named like Java's partition.assignment.strategy.
func saramaStrategy(name string) sarama.BalanceStrategy {
	switch name {
	case "range":
		return sarama.NewBalanceStrategyRange()
	case "roundrobin":
		return sarama.NewBalanceStrategyRoundRobin()
	case "sticky":
		return sarama.NewBalanceStrategySticky()
	case "cooperative-sticky":
		return sarama.NewBalanceStrategyCooperativeSticky()
	}
	usage("unknown --assignor " + name)
	return nil
}

// saramaGroupHandler reports sarama's session lifecycle as rebalance events: Setup's claims are
// the assignment, a ConsumeClaim ending while the session lives is a cooperative revocation, and
// Cleanup (the end of an eager session, or leaving) revokes whatever is left.
type saramaGroupHandler struct {
	topic      string
	commitEach bool
	control    *groupControl
	owned      *ownership
	processing sync.Mutex // one record at a time across the claims' goroutines
}

func (h *saramaGroupHandler) Setup(s sarama.ConsumerGroupSession) error {
	h.owned.change("assigned", s.Claims()[h.topic], s.GenerationID())
	return nil
}

func (h *saramaGroupHandler) Cleanup(s sarama.ConsumerGroupSession) error {
	h.owned.change("revoked", h.owned.all(), s.GenerationID())
	return nil
}

func (h *saramaGroupHandler) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	partition := claim.Partition()
	h.owned.change("assigned", []int32{partition}, s.GenerationID()) // a cooperative addition
	defer func() {
		if s.Context().Err() == nil && !h.control.isStopped() {
			h.owned.change("revoked", []int32{partition}, s.GenerationID()) // cooperative revocation
		}
	}()
	for {
		select {
		case <-s.Context().Done():
			return nil
		case <-h.control.stopped:
			return nil
		case msg, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			if !h.process(s, msg) {
				return nil
			}
		}
	}
}

// process commits (MarkMessage + a synchronous Commit) then emits one record and waits for the
// adapter; false when the session or the member is ending, before anything is committed.
func (h *saramaGroupHandler) process(s sarama.ConsumerGroupSession, msg *sarama.ConsumerMessage) bool {
	h.processing.Lock()
	defer h.processing.Unlock()
	if s.Context().Err() != nil || h.control.isStopped() {
		return false // rebalancing or stopping: the partition's next owner starts from the commit
	}
	if h.commitEach {
		s.MarkMessage(msg, "")
		s.Commit()
	}
	emit(recordEvent(msg.Partition, msg.Offset, msg.Value))
	return h.control.waitAck()
}

// saramaGroupConsume is a sarama ConsumerGroup member, Consume called in a loop as sarama's
// documentation prescribes (an eager rebalance ends each call).
func saramaGroupConsume(a *args, config *sarama.Config, brokers []string) {
	control := newGroupControl()
	// sarama's own account of joins, syncs and commits, on stderr (the adapter reads only stdout).
	sarama.Logger = log.New(os.Stderr, "[sarama] ", log.LstdFlags)
	session := time.Duration(a.int64("session-timeout-ms", 45000)) * time.Millisecond
	config.Consumer.Group.Session.Timeout = session
	config.Consumer.Group.Heartbeat.Interval = max(session/6, 100*time.Millisecond)
	config.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{saramaStrategy(a.str("assignor", "range"))}
	config.Consumer.Group.InstanceId = a.str("instance-id", "")
	config.Consumer.Offsets.Initial = sarama.OffsetOldest
	config.Consumer.Offsets.AutoCommit.Enable = false
	group, err := sarama.NewConsumerGroup(brokers, a.must("group"), config)
	if err != nil {
		saramaFail(err)
	}
	handler := &saramaGroupHandler{
		topic:      a.must("topic"),
		commitEach: a.str("commit", "record") == "record",
		control:    control,
		owned:      newOwnership(),
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-control.stopped
		cancel()
	}()
	for ctx.Err() == nil {
		if err := group.Consume(ctx, []string{handler.topic}, handler); err != nil && ctx.Err() == nil {
			fmt.Fprintf(os.Stderr, "consume: %v\n", err)
			if errors.Is(err, sarama.ErrClosedConsumerGroup) {
				break
			}
			time.Sleep(250 * time.Millisecond) // sarama's own retry backoff before joining again
		}
	}
	if err := group.Close(); err != nil { // LeaveGroup for a dynamic member (KIP-345: not a static one)
		saramaFail(err)
	}
}
