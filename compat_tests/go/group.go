package main

// The group-consume command's plumbing, shared by both libraries: the stdin control channel
// ("next" after each record, "stop" to leave), the member's own view of its assignment, and the
// JSON events, in the same shape as compat_tests/java's group-consume.

import (
	"bufio"
	"os"
	"sort"
	"strings"
	"sync"
)

// groupControl reads the adapter's lines: "next" releases the record being processed, "stop"
// asks for a graceful leave. The end of stdin means the adapter process is gone (killed): exit at
// once, without leaving the group, exactly like a crashed application.
type groupControl struct {
	acks     chan struct{}
	stopped  chan struct{}
	stopOnce sync.Once
}

func newGroupControl() *groupControl {
	c := &groupControl{acks: make(chan struct{}, 1), stopped: make(chan struct{})}
	go func() {
		scanner := bufio.NewScanner(os.Stdin)
		for scanner.Scan() {
			switch strings.TrimSpace(scanner.Text()) {
			case "next":
				c.acks <- struct{}{}
			case "stop":
				c.stop()
			}
		}
		os.Exit(0)
	}()
	return c
}

func (c *groupControl) stop() { c.stopOnce.Do(func() { close(c.stopped) }) }

func (c *groupControl) isStopped() bool {
	select {
	case <-c.stopped:
		return true
	default:
		return false
	}
}

// waitAck blocks until the adapter has processed the record just emitted; false means stop.
func (c *groupControl) waitAck() bool {
	select {
	case <-c.acks:
		return true
	case <-c.stopped:
		return false
	}
}

// ownership is the member's assignment as its rebalance callbacks report it.
type ownership struct {
	mu    sync.Mutex
	owned map[int32]bool
}

func newOwnership() *ownership { return &ownership{owned: map[int32]bool{}} }

// change applies one callback and emits {"event", "partitions", "assignment", "generation"}.
// assigned partitions already owned are dropped (nothing emitted when none is left).
func (o *ownership) change(event string, partitions []int32, generation any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var changed []int32
	for _, p := range partitions {
		if (event == "assigned") != o.owned[p] {
			changed = append(changed, p)
		}
	}
	if len(changed) == 0 {
		return
	}
	for _, p := range changed {
		if event == "assigned" {
			o.owned[p] = true
		} else {
			delete(o.owned, p)
		}
	}
	assignment := []int32{}
	for p := range o.owned {
		assignment = append(assignment, p)
	}
	sort.Slice(assignment, func(i, j int) bool { return assignment[i] < assignment[j] })
	sort.Slice(changed, func(i, j int) bool { return changed[i] < changed[j] })
	emit(map[string]any{"event": event, "partitions": changed, "assignment": assignment, "generation": generation})
}

func (o *ownership) all() []int32 {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := []int32{}
	for p := range o.owned {
		out = append(out, p)
	}
	return out
}

func recordEvent(partition int32, offset int64, value []byte) map[string]any {
	return map[string]any{"event": "record", "partition": partition, "offset": offset, "value": b64(value)}
}
