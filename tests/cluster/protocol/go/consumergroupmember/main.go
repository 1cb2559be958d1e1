// Command consumergroupmember is one member of a consumer group written with franz-go's kgo as its documentation
// tells a new user to: kgo.ConsumerGroup and kgo.ConsumeTopics with the default balancers (cooperative-sticky) and
// the default group protocol (classic), unless told to opt into KIP-848 with kgo.ServerSideBalancer. It reads its
// topic from the start (franz-go's default start offset) and commits what it read in the pattern franz-go's
// "Offset management" docs recommend for reading each record once across a rebalance: autocommit off,
// BlockRebalanceOnPoll, CommitUncommittedOffsets after every poll before AllowRebalance, and a blocking commit in
// OnPartitionsRevoked.
//
// It prints a line for each thing it does: "RECORD partition offset", "ASSIGNMENT p,p,..." whenever its partitions
// change, "REQUEST name" the first time it sends a request of a kind (which group protocol it speaks: JoinGroup or
// ConsumerGroupHeartbeat), "COMMIT-ERROR error" and "FETCH-ERROR partition error" if one fails, and "CLOSED" once it
// left the group. franz-go's own info log goes to stderr.
//
// Arguments: bootstrap servers (comma separated), topic, group id, a file whose existence tells it to leave the
// group and stop, and the balancing: "client" (the defaults) or "server" (kgo.ServerSideBalancer).
package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// pollTimeout bounds one poll, so the stop file is looked at five times a second.
const pollTimeout = 200 * time.Millisecond

// printer writes whole lines from the poll loop, the group's callbacks and the hook's goroutines.
type printer struct {
	mu   sync.Mutex
	sent map[int16]bool
}

func (p *printer) line(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Printf(format+"\n", args...)
}

// OnBrokerWrite implements kgo.HookBrokerWrite: the first request of each kind.
func (p *printer) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.sent[key] {
		p.sent[key] = true
		fmt.Printf("REQUEST %s\n", kmsg.NameForKey(key))
	}
}

// assignment is the member's partitions, as the group's callbacks change them.
type assignment struct {
	out        *printer
	partitions map[int32]bool
}

func (a *assignment) change(partitions []int32, owned bool) {
	for _, partition := range partitions {
		if owned {
			a.partitions[partition] = true
		} else {
			delete(a.partitions, partition)
		}
	}
	numbers := make([]string, 0, len(a.partitions))
	for _, partition := range slices.Sorted(maps.Keys(a.partitions)) {
		numbers = append(numbers, strconv.Itoa(int(partition)))
	}
	a.out.line("ASSIGNMENT %s", strings.Join(numbers, ","))
}

func main() {
	if len(os.Args) != 6 || (os.Args[5] != "client" && os.Args[5] != "server") {
		fmt.Fprintln(os.Stderr, "usage: consumergroupmember BOOTSTRAP TOPIC GROUP STOP_FILE client|server")
		os.Exit(2)
	}
	bootstrap, topic, group, stop, balancing := os.Args[1], os.Args[2], os.Args[3], os.Args[4], os.Args[5]
	out := &printer{sent: map[int16]bool{}}
	owned := &assignment{out: out, partitions: map[int32]bool{}}
	// The callbacks run on the group's goroutine; with BlockRebalanceOnPoll never while a poll's records are
	// being read, and never two at once (kgo's guarantee), so `owned` needs no lock of its own.
	options := []kgo.Opt{
		kgo.SeedBrokers(strings.Split(bootstrap, ",")...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
			owned.change(assigned[topic], true)
		}),
		kgo.OnPartitionsRevoked(func(ctx context.Context, client *kgo.Client, revoked map[string][]int32) {
			if err := client.CommitUncommittedOffsets(ctx); err != nil {
				out.line("COMMIT-ERROR %v", err)
			}
			owned.change(revoked[topic], false)
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
			owned.change(lost[topic], false)
		}),
		kgo.WithHooks(out),
		kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelInfo, func() string {
			return time.Now().Format("15:04:05.000 ")
		})),
	}
	if balancing == "server" {
		options = append(options, kgo.ServerSideBalancer())
	}
	client, err := kgo.NewClient(options...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cannot create the client:", err)
		os.Exit(1)
	}
	for {
		if _, err := os.Stat(stop); err == nil {
			break
		}
		ctx, cancel := context.WithTimeout(context.Background(), pollTimeout)
		fetches := client.PollRecords(ctx, 10_000)
		cancel()
		if fetches.IsClientClosed() {
			break
		}
		fetches.EachError(func(_ string, partition int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				out.line("FETCH-ERROR %d %v", partition, err)
			}
		})
		fetches.EachRecord(func(record *kgo.Record) {
			out.line("RECORD %d %d", record.Partition, record.Offset)
		})
		if fetches.NumRecords() > 0 {
			if err := client.CommitUncommittedOffsets(context.Background()); err != nil {
				out.line("COMMIT-ERROR %v", err)
			}
		}
		client.AllowRebalance()
	}
	client.Close()
	out.line("CLOSED")
}
