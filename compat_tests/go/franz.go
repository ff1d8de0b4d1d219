package main

// franz-go: kgo for produce/consume, kadm for the admin commands, kmsg for ListOffsets (kadm's
// ListOffsetsAfterMilli turns "no such record" into the end offset, hiding the broker's -1).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func franzFail(err error) {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		fail(err, ke.Code)
	}
	fail(err, 0)
}

func franzCompression(name string) kgo.CompressionCodec {
	switch name {
	case "none":
		return kgo.NoCompression()
	case "gzip":
		return kgo.GzipCompression()
	case "snappy":
		return kgo.SnappyCompression()
	case "lz4":
		return kgo.Lz4Compression()
	case "zstd":
		return kgo.ZstdCompression()
	}
	usage("unknown compression " + name)
	return kgo.NoCompression()
}

func runFranz(command string, a *args) {
	timeout := a.timeout()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	opts := []kgo.Opt{
		kgo.SeedBrokers(strings.Split(a.must("bootstrap"), ",")...),
		kgo.ClientID(a.str("client-id", "compat-franz-go")),
		kgo.RequestTimeoutOverhead(timeout),
		kgo.RetryTimeout(timeout),
	}
	opts = append(opts, securityFrom(a).franzOpts()...)
	switch command {
	case "produce":
		franzProduce(ctx, a, opts)
		return
	case "transactions":
		franzTransactions(ctx, a, opts)
		return
	case "consume":
		franzConsume(ctx, a, opts)
		return
	case "group-consume":
		franzGroupConsume(a, opts)
		return
	}
	client, err := kgo.NewClient(opts...)
	if err != nil {
		franzFail(err)
	}
	defer client.Close()
	adm := kadm.NewClient(client)
	topic := a.str("topic", "")
	switch command {
	case "offset-for-time":
		offset, _, err := franzListOffset(ctx, client, topic, int32(a.int64("partition", 0)), a.int64("timestamp", 0))
		if err != nil {
			franzFail(err)
		}
		if offset < 0 {
			emit(map[string]any{"offset": nil})
		} else {
			emit(map[string]any{"offset": offset})
		}
	case "list-offsets":
		spec := a.must("spec")
		ts := map[string]int64{"earliest": -2, "latest": -1, "max-timestamp": -3}[spec]
		if ts == 0 {
			n, err := strconv.ParseInt(spec, 10, 64)
			if err != nil {
				usage("bad --spec " + spec)
			}
			ts = n
		}
		offset, stamp, err := franzListOffset(ctx, client, topic, int32(a.int64("partition", 0)), ts)
		if err != nil {
			franzFail(err)
		}
		emit(map[string]any{"offset": offset, "timestamp": stamp})
	case "create-topic":
		configs := map[string]*string{}
		for k, v := range a.keyValues("config") {
			configs[k] = &v
		}
		resp, err := adm.CreateTopic(ctx, int32(a.int64("partitions", 1)), int16(a.int64("replication-factor", 1)), configs, topic)
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			franzFail(err)
		}
		emit(map[string]any{"topic": topic, "partitions": resp.NumPartitions})
	case "delete-topic":
		resp, err := adm.DeleteTopic(ctx, topic)
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			franzFail(err)
		}
		emit(map[string]any{"topic": topic, "deleted": true})
	case "describe-topic":
		details, err := adm.ListTopics(ctx, topic)
		if err != nil {
			franzFail(err)
		}
		detail, ok := details[topic]
		if !ok {
			franzFail(kerr.UnknownTopicOrPartition)
		}
		if detail.Err != nil {
			franzFail(detail.Err)
		}
		emit(map[string]any{"topic": topic, "partitions": len(detail.Partitions)})
	case "describe-configs":
		rcs, err := adm.DescribeTopicConfigs(ctx, topic)
		if err != nil {
			franzFail(err)
		}
		rc, err := rcs.On(topic, nil)
		if err == nil {
			err = rc.Err
		}
		if err != nil {
			franzFail(err)
		}
		configs := map[string]any{}
		for _, c := range rc.Configs {
			value := ""
			if c.Value != nil {
				value = *c.Value
			}
			configs[c.Key] = value
		}
		emit(map[string]any{"topic": topic, "configs": configs})
	case "alter-configs":
		var alters []kadm.AlterConfig
		for k, v := range a.keyValues("set") {
			alters = append(alters, kadm.AlterConfig{Op: kadm.SetConfig, Name: k, Value: &v})
		}
		resps, err := adm.AlterTopicConfigs(ctx, alters, topic)
		if err == nil {
			var r kadm.AlterConfigsResponse
			r, err = resps.On(topic, nil)
			if err == nil {
				err = r.Err
			}
		}
		if err != nil {
			franzFail(err)
		}
		emit(map[string]any{"topic": topic, "altered": len(alters)})
	case "create-partitions":
		resps, err := adm.UpdatePartitions(ctx, int(a.int64("total", 0)), topic)
		if err == nil {
			err = resps.Error()
		}
		if err != nil {
			franzFail(err)
		}
		emit(map[string]any{"topic": topic, "partitions": a.int64("total", 0)})
	case "delete-records":
		partition := int32(a.int64("partition", 0))
		offsets := kadm.Offsets{}
		offsets.Add(kadm.Offset{Topic: topic, Partition: partition, At: a.int64("before", 0), LeaderEpoch: -1})
		resps, err := adm.DeleteRecords(ctx, offsets)
		if err != nil {
			franzFail(err)
		}
		r, ok := resps.Lookup(topic, partition)
		if !ok {
			franzFail(kerr.UnknownTopicOrPartition)
		}
		if r.Err != nil {
			franzFail(r.Err)
		}
		emit(map[string]any{"low_watermark": r.LowWatermark})
	default:
		usage("unknown command " + command)
	}
}

// franzListOffset sends ListOffsets to the partition leader (the client routes it) for one timestamp
// (-2 earliest, -1 latest, -3 max timestamp, else a time in ms).
func franzListOffset(ctx context.Context, client *kgo.Client, topic string, partition int32, timestamp int64) (int64, int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition = partition
	rp.Timestamp = timestamp
	rp.CurrentLeaderEpoch = -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, client)
	if err != nil {
		return 0, 0, err
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return 0, 0, err
			}
			return p.Offset, p.Timestamp, nil
		}
	}
	return 0, 0, kerr.UnknownTopicOrPartition
}

func franzProduce(ctx context.Context, a *args, opts []kgo.Opt) {
	records := readRecords()
	acks := a.str("acks", "all")
	idempotent := a.str("idempotent", "false") == "true"
	opts = append(opts, kgo.ProducerBatchCompression(franzCompression(a.str("compression", "none"))),
		// No RecordDeliveryTimeout: kgo measures it from each record's own Timestamp, so a record
		// with an explicit, older timestamp would time out before it is sent; ctx bounds the wait.
		kgo.ProducerLinger(5*time.Millisecond))
	switch acks {
	case "all":
		opts = append(opts, kgo.RequiredAcks(kgo.AllISRAcks()))
	case "1":
		opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()))
	case "0":
		opts = append(opts, kgo.RequiredAcks(kgo.NoAck()))
	default:
		usage("bad --acks " + acks)
	}
	if !idempotent {
		opts = append(opts, kgo.DisableIdempotentWrite())
	} else if acks != "all" {
		usage("an idempotent producer needs --acks all")
	}
	explicit := false
	for _, r := range records {
		explicit = explicit || r.Partition != nil
	}
	if explicit {
		// Records without a partition then go to 0: the scenarios always give one when they give any.
		opts = append(opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	}
	client, err := kgo.NewClient(opts...)
	if err != nil {
		franzFail(err)
	}
	defer client.Close()
	topic := a.must("topic")
	out := make([]*kgo.Record, 0, len(records))
	for _, r := range records {
		rec := &kgo.Record{Topic: topic, Key: r.Key, Value: r.Value}
		for _, h := range r.Headers {
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: h.Name, Value: h.Value})
		}
		if r.Timestamp != nil {
			rec.Timestamp = time.UnixMilli(*r.Timestamp)
		}
		if r.Partition != nil {
			rec.Partition = *r.Partition
		}
		out = append(out, rec)
	}
	results := client.ProduceSync(ctx, out...)
	if err := results.FirstErr(); err != nil {
		franzFail(err)
	}
	// -1: kgo never copies the produce response's LogAppendTime into the record, so the only
	// timestamp it has is the one it sent, which is wrong for a LogAppendTime topic.
	for _, res := range results {
		offset := res.Record.Offset
		if acks == "0" {
			offset = -1
		}
		emit(map[string]any{"partition": res.Record.Partition, "offset": offset, "timestamp": -1})
	}
}

func franzConsume(ctx context.Context, a *args, opts []kgo.Opt) {
	topic := a.must("topic")
	partition := int32(a.int64("partition", 0))
	count := int(a.int64("count", 1))
	var start kgo.Offset
	switch s := a.must("start"); s {
	case "beginning":
		start = kgo.NewOffset().AtStart()
	case "end":
		start = kgo.NewOffset().AtEnd()
	default:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			usage("bad --start " + s)
		}
		start = kgo.NewOffset().At(n)
	}
	// kgo never asks the broker to auto-create topics unless AllowAutoTopicCreation is given.
	opts = append(opts, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: start}}))
	if a.str("isolation", "read_uncommitted") == "read_committed" {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	client, err := kgo.NewClient(opts...)
	if err != nil {
		franzFail(err)
	}
	defer client.Close()
	got := 0
	for got < count {
		fetches := client.PollRecords(ctx, count-got)
		if ctx.Err() != nil {
			return // the deadline: fewer records than asked, as the contract allows
		}
		for _, fe := range fetches.Errors() {
			if errors.Is(fe.Err, context.DeadlineExceeded) || errors.Is(fe.Err, context.Canceled) {
				return
			}
			var ke *kerr.Error
			if errors.As(fe.Err, &ke) && ke.Retriable {
				continue
			}
			franzFail(fe.Err)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			if got >= count {
				return
			}
			var headers []header
			for _, h := range r.Headers {
				headers = append(headers, header{h.Key, h.Value})
			}
			logAppend := r.Attrs.TimestampType() == 1
			emit(consumedLine(r.Topic, r.Partition, r.Offset, r.Timestamp, &logAppend, r.Key, r.Value, headers))
			got++
		})
	}
}

// franzBalancer is the kgo GroupBalancer named like Java's partition.assignment.strategy.
func franzBalancer(name string) kgo.GroupBalancer {
	switch name {
	case "range":
		return kgo.RangeBalancer()
	case "roundrobin":
		return kgo.RoundRobinBalancer()
	case "sticky":
		return kgo.StickyBalancer()
	case "cooperative-sticky":
		return kgo.CooperativeStickyBalancer()
	}
	usage("unknown --assignor " + name)
	return nil
}

// franzGroupConsume is a classic group member (JoinGroup/SyncGroup): subscribe, then one record
// at a time — commit it (CommitRecords, synchronous), emit it, wait for the adapter's "next".
// BlockRebalanceOnPoll keeps a rebalance from revoking partitions between a poll and the commit
// of its records, so a record is committed only by the member that owns its partition.
func franzGroupConsume(a *args, opts []kgo.Opt) {
	control := newGroupControl()
	owned := newOwnership()
	commitEach := a.str("commit", "record") == "record"
	session := time.Duration(a.int64("session-timeout-ms", 45000)) * time.Millisecond
	var client *kgo.Client
	generation := func() any {
		if client == nil {
			return nil
		}
		_, gen := client.GroupMetadata()
		return gen
	}
	callback := func(event string) func(context.Context, *kgo.Client, map[string][]int32) {
		return func(_ context.Context, _ *kgo.Client, partitions map[string][]int32) {
			owned.change(event, partitions[a.must("topic")], generation())
		}
	}
	opts = append(opts,
		kgo.ConsumerGroup(a.must("group")),
		kgo.ConsumeTopics(a.must("topic")),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.Balancers(franzBalancer(a.str("assignor", "range"))),
		kgo.SessionTimeout(session),
		kgo.HeartbeatInterval(max(session/6, 100*time.Millisecond)),
		kgo.OnPartitionsAssigned(callback("assigned")),
		kgo.OnPartitionsRevoked(callback("revoked")),
		kgo.OnPartitionsLost(callback("lost")),
	)
	if id := a.str("instance-id", ""); id != "" {
		opts = append(opts, kgo.InstanceID(id))
	}
	var err error
	client, err = kgo.NewClient(opts...)
	if err != nil {
		franzFail(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-control.stopped
		cancel() // wakes a PollRecords that is waiting for data
	}()
	for !control.isStopped() {
		fetches := client.PollRecords(ctx, 16)
		for _, fe := range fetches.Errors() {
			if errors.Is(fe.Err, context.Canceled) {
				continue
			}
			var ke *kerr.Error
			if errors.As(fe.Err, &ke) && !ke.Retriable {
				franzFail(fe.Err)
			}
			fmt.Fprintf(os.Stderr, "fetch %s[%d]: %v\n", fe.Topic, fe.Partition, fe.Err)
		}
		skipped := map[int32]bool{} // partitions whose commit failed: the rest of the poll is refetched
		for _, r := range fetches.Records() {
			if control.isStopped() {
				break
			}
			if skipped[r.Partition] {
				continue
			}
			if commitEach {
				// Not ctx: a stop cancels ctx, and a commit cancelled after it was sent may still be
				// applied by the broker while the client reports failure — the record would then be
				// neither emitted here nor refetched by the next owner. Like the Java adapter, a stop
				// lets the commit in flight finish so its outcome is known.
				commitCtx, commitDone := context.WithTimeout(context.Background(), 30*time.Second)
				err := client.CommitRecords(commitCtx, r)
				commitDone()
				if err != nil {
					fmt.Fprintf(os.Stderr, "commit %s[%d]@%d: %v\n", r.Topic, r.Partition, r.Offset, err)
					skipped[r.Partition] = true
					client.SetOffsets(map[string]map[int32]kgo.EpochOffset{
						r.Topic: {r.Partition: {Epoch: -1, Offset: r.Offset}},
					})
					continue
				}
			}
			emit(recordEvent(r.Partition, r.Offset, r.Value))
			if !control.waitAck() {
				break
			}
		}
		client.AllowRebalance()
	}
	client.Close() // LeaveGroup for a dynamic member; a static one keeps its place (KIP-345)
}
