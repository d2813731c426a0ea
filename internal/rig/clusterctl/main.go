// Command clusterctl answers what scripts/kafka-cluster.sh asks its three
// brokers: whether they are ready, whether one has rejoined, who leads a
// partition and who coordinates a group or a transactional id. The script
// builds it once per start (go build, cached); a call then costs a few
// milliseconds of CPU, where a Kafka command-line tool starts a JVM (about
// a second of CPU each, on a machine the brokers already keep busy).
//
//	clusterctl -brokers B ready N         N brokers registered, the internal topics made and in sync
//	clusterctl -brokers B insync ID       broker ID answers and is in the ISR of every partition it replicates
//	clusterctl -brokers B leader TOPIC P  the id of the leader of TOPIC's partition P
//	clusterctl -brokers B coordinator group|txn KEY   the id of the group's or transactional id's coordinator
//
// B is the bootstrap list. Each question goes to every address of it at
// once, each answer bounded by -timeout, and the first answer counts: a
// dead broker refuses, a frozen one never answers, and either leaves the
// others to answer. A question that is not answered yet (no leader, the
// coordinator loading) is asked again until -wait has passed. Answers go to
// stdout, one line; errors to stderr, with exit status 1.
//
// It uses franz-go's kgo and kmsg, which kord's tests already use to read
// back independently of the client under test.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func main() {
	brokers := flag.String("brokers", "", "bootstrap list, host:port,host:port,...")
	timeout := flag.Duration("timeout", 3*time.Second, "bound of one answer from one broker")
	wait := flag.Duration("wait", 20*time.Second, "how long to ask again while the answer is not there yet")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: clusterctl -brokers B ready N | insync ID | leader TOPIC P | coordinator group|txn KEY")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *brokers == "" || flag.NArg() < 2 {
		flag.Usage()
		os.Exit(2)
	}
	q := &asker{addrs: strings.Split(*brokers, ","), timeout: *timeout}
	ctx, cancel := context.WithTimeout(context.Background(), *wait)
	defer cancel()
	out, err := run(ctx, q, flag.Args())
	if err != nil {
		fmt.Fprintf(os.Stderr, "clusterctl: %s: %v\n", strings.Join(flag.Args(), " "), err)
		os.Exit(1)
	}
	fmt.Println(out)
}

func run(ctx context.Context, q *asker, args []string) (string, error) {
	switch args[0] {
	case "ready":
		n, err := strconv.Atoi(args[1])
		if err != nil {
			return "", fmt.Errorf("broker count %q", args[1])
		}
		return again(ctx, func(ctx context.Context) (string, error) { return q.ready(ctx, n) })
	case "insync":
		id, err := strconv.Atoi(args[1])
		if err != nil {
			return "", fmt.Errorf("broker id %q", args[1])
		}
		return again(ctx, func(ctx context.Context) (string, error) { return q.insync(ctx, int32(id)) })
	case "leader":
		if len(args) != 3 {
			return "", errors.New("want TOPIC PARTITION")
		}
		p, err := strconv.Atoi(args[2])
		if err != nil {
			return "", fmt.Errorf("partition %q", args[2])
		}
		return again(ctx, func(ctx context.Context) (string, error) { return q.leader(ctx, args[1], int32(p)) })
	case "coordinator":
		if len(args) != 3 {
			return "", errors.New("want group|txn KEY")
		}
		var typ int8
		switch args[1] {
		case "group":
			typ = 0
		case "txn":
			typ = 1
		default:
			return "", fmt.Errorf("coordinator type %q: want group or txn", args[1])
		}
		return again(ctx, func(ctx context.Context) (string, error) { return q.coordinator(ctx, typ, args[2]) })
	}
	return "", fmt.Errorf("unknown command %q", args[0])
}

// again calls f every 200 ms until it succeeds or ctx ends, and returns
// its last error then.
func again(ctx context.Context, f func(context.Context) (string, error)) (string, error) {
	for {
		out, err := f(ctx)
		if err == nil {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return "", err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// asker sends a request to every bootstrap address at once.
type asker struct {
	addrs   []string
	timeout time.Duration
}

// first sends the request newReq returns to every address and returns the
// first response that check accepts, or the errors of all.
func (q *asker) first(ctx context.Context, newReq func() kmsg.Request, check func(kmsg.Response) error) (kmsg.Response, error) {
	type answer struct {
		resp kmsg.Response
		err  error
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	answers := make(chan answer, len(q.addrs))
	for _, addr := range q.addrs {
		go func() {
			resp, err := q.ask(ctx, addr, newReq())
			if err == nil {
				err = check(resp)
			}
			if err != nil {
				err = fmt.Errorf("%s: %w", addr, err)
			}
			answers <- answer{resp, err}
		}()
	}
	var errs []error
	for range q.addrs {
		a := <-answers
		if a.err == nil {
			return a.resp, nil
		}
		errs = append(errs, a.err)
	}
	return nil, errors.Join(errs...)
}

// ask sends req to the broker at addr alone, bounded by q.timeout.
func (q *asker) ask(ctx context.Context, addr string, req kmsg.Request) (kmsg.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, q.timeout)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DialTimeout(q.timeout), kgo.RequestRetries(0))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	return cl.SeedBrokers()[0].Request(ctx, req)
}

// metadata asks for topics' metadata (nil: every topic).
func (q *asker) metadata(ctx context.Context, topics ...string) (*kmsg.MetadataResponse, error) {
	resp, err := q.first(ctx, func() kmsg.Request {
		req := kmsg.NewPtrMetadataRequest()
		if topics != nil {
			for _, t := range topics {
				rt := kmsg.NewMetadataRequestTopic()
				rt.Topic = kmsg.StringPtr(t)
				req.Topics = append(req.Topics, rt)
			}
		}
		return req
	}, func(kmsg.Response) error { return nil })
	if err != nil {
		return nil, err
	}
	return resp.(*kmsg.MetadataResponse), nil
}

func (q *asker) leader(ctx context.Context, topic string, p int32) (string, error) {
	md, err := q.metadata(ctx, topic)
	if err != nil {
		return "", err
	}
	for _, t := range md.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return "", fmt.Errorf("topic %s: %w", topic, err)
		}
		for _, mp := range t.Partitions {
			if mp.Partition != p {
				continue
			}
			if mp.Leader < 0 {
				return "", fmt.Errorf("%s[%d] has no leader (%v)", topic, p, kerr.ErrorForCode(mp.ErrorCode))
			}
			return strconv.Itoa(int(mp.Leader)), nil
		}
	}
	return "", fmt.Errorf("%s has no partition %d", topic, p)
}

func (q *asker) coordinator(ctx context.Context, typ int8, key string) (string, error) {
	resp, err := q.first(ctx, func() kmsg.Request {
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.CoordinatorType = typ
		req.CoordinatorKey = key
		req.CoordinatorKeys = []string{key}
		return req
	}, func(r kmsg.Response) error {
		resp := r.(*kmsg.FindCoordinatorResponse)
		code := resp.ErrorCode
		if len(resp.Coordinators) > 0 {
			code = resp.Coordinators[0].ErrorCode
		}
		return kerr.ErrorForCode(code)
	})
	if err != nil {
		return "", err
	}
	fc := resp.(*kmsg.FindCoordinatorResponse)
	id := fc.NodeID
	if len(fc.Coordinators) > 0 {
		id = fc.Coordinators[0].NodeID
	}
	return strconv.Itoa(int(id)), nil
}

// ready succeeds when every bootstrap address answers metadata listing n
// brokers, and __consumer_offsets and __transaction_state exist (a
// FindCoordinator of each kind makes them) with every partition's ISR
// complete.
func (q *asker) ready(ctx context.Context, n int) (string, error) {
	for _, addr := range q.addrs {
		resp, err := q.ask(ctx, addr, kmsg.NewPtrMetadataRequest())
		if err != nil {
			return "", fmt.Errorf("%s: %w", addr, err)
		}
		if got := len(resp.(*kmsg.MetadataResponse).Brokers); got != n {
			return "", fmt.Errorf("%s: %d brokers registered, want %d", addr, got, n)
		}
	}
	for _, typ := range []int8{0, 1} {
		if _, err := q.coordinator(ctx, typ, "kord-cluster-ready"); err != nil {
			return "", err
		}
	}
	md, err := q.metadata(ctx, "__consumer_offsets", "__transaction_state")
	if err != nil {
		return "", err
	}
	for _, t := range md.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return "", fmt.Errorf("topic %s: %w", *t.Topic, err)
		}
		for _, mp := range t.Partitions {
			if mp.Leader < 0 || len(mp.ISR) < n {
				return "", fmt.Errorf("%s[%d]: leader %d, ISR %v", *t.Topic, mp.Partition, mp.Leader, mp.ISR)
			}
		}
	}
	return fmt.Sprintf("%d brokers, internal topics in sync", n), nil
}

// insync succeeds when broker id is registered, answers at its own address,
// and is in the ISR of every partition it replicates, as the other brokers
// see it: a broker just thawed still tells its own view from before it was
// frozen.
func (q *asker) insync(ctx context.Context, id int32) (string, error) {
	md, err := q.metadata(ctx)
	if err != nil {
		return "", err
	}
	i := slices.IndexFunc(md.Brokers, func(b kmsg.MetadataResponseBroker) bool { return b.NodeID == id })
	if i < 0 {
		return "", fmt.Errorf("broker %d is not registered (or fenced)", id)
	}
	b := md.Brokers[i]
	addr := fmt.Sprintf("%s:%d", b.Host, b.Port)
	if _, err := q.ask(ctx, addr, kmsg.NewPtrMetadataRequest()); err != nil {
		return "", fmt.Errorf("broker %d at %s: %w", id, addr, err)
	}
	others := &asker{addrs: slices.DeleteFunc(slices.Clone(q.addrs), func(a string) bool { return a == addr }), timeout: q.timeout}
	if len(others.addrs) == len(q.addrs) {
		return "", fmt.Errorf("broker %d's address %s is not in the bootstrap list", id, addr)
	}
	if md, err = others.metadata(ctx); err != nil {
		return "", err
	}
	if !slices.ContainsFunc(md.Brokers, func(b kmsg.MetadataResponseBroker) bool { return b.NodeID == id }) {
		return "", fmt.Errorf("broker %d is not registered (or fenced) as the others see it", id)
	}
	behind := 0
	var first string
	for _, t := range md.Topics {
		for _, mp := range t.Partitions {
			if slices.Contains(mp.Replicas, id) && !slices.Contains(mp.ISR, id) {
				if behind == 0 {
					first = fmt.Sprintf("%s[%d] (ISR %v)", *t.Topic, mp.Partition, mp.ISR)
				}
				behind++
			}
		}
	}
	if behind > 0 {
		return "", fmt.Errorf("broker %d is out of the ISR of %d partitions, %s first", id, behind, first)
	}
	return fmt.Sprintf("broker %d in sync", id), nil
}
