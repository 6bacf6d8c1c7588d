// bench-sessions: the real Go package holding many sessions on one client, shaped like
// bench/sessions-worker.ts, so that `npm run bench` can put the keepalive cost of 10,000 Go sessions
// beside ours. Prints "ready" once the sessions exist; each `window <ms>` line on stdin is answered
// with one JSON object (keepalive responses counted on the client's streams by an interceptor);
// stdin's end closes the sessions.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// countingStream counts the messages a LeaseKeepAlive stream delivers.
type countingStream struct {
	grpc.ClientStream
	n *atomic.Int64
}

func (s countingStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err == nil {
		s.n.Add(1)
	}
	return err
}

func benchSessions(endpoints []string, ttl int, args []string) int {
	fs := flag.NewFlagSet("bench-sessions", flag.ExitOnError)
	sessions := fs.Int("sessions", 1000, "sessions on this process's one client")
	idle := fs.Duration("idle", time.Second, "idle CPU baseline, measured before the sessions exist")
	_ = fs.Parse(args)

	var responses, streams atomic.Int64
	count := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil || !strings.HasSuffix(method, "/LeaseKeepAlive") {
			return s, err
		}
		streams.Add(1)
		return countingStream{s, &responses}, nil
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainStreamInterceptor(count)},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "go-interop:", err)
		return 1
	}
	defer cli.Close()
	cpu0, t0 := cpuTime(), time.Now()
	time.Sleep(*idle)
	idleCPUMsPerSec := ms(cpuTime()-cpu0) / time.Since(t0).Seconds()

	t0 = time.Now()
	ss := make([]*concurrency.Session, *sessions)
	var wg sync.WaitGroup
	var firstErr atomic.Value
	sem := make(chan struct{}, 128)
	for i := range ss {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			s, err := concurrency.NewSession(cli, concurrency.WithTTL(ttl))
			if err != nil {
				firstErr.CompareAndSwap(nil, err)
				return
			}
			ss[i] = s
		}(i)
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		fmt.Fprintln(os.Stderr, "go-interop:", err)
		return 1
	}
	createMs := ms(time.Since(t0))
	fmt.Println("ready")
	lost := func() int {
		n := 0
		for _, s := range ss {
			select {
			case <-s.Done():
				n++
			default:
			}
		}
		return n
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) != 2 || f[0] != "window" {
			fmt.Fprintln(os.Stderr, "go-interop: unknown command", strconv.Quote(in.Text()))
			return 1
		}
		d, _ := strconv.Atoi(f[1])
		r0, c0, t := responses.Load(), cpuTime(), time.Now()
		time.Sleep(time.Duration(d) * time.Millisecond)
		printJSON(map[string]any{
			"impl":                   "go",
			"client":                 clientVersion(),
			"sessions":               *sessions,
			"renewals":               responses.Load() - r0,
			"wallMs":                 ms(time.Since(t)),
			"cpuMs":                  ms(cpuTime() - c0),
			"idleCpuMsPerSec":        idleCPUMsPerSec,
			"keepAliveStreamsOpened": streams.Load(),
			"hubLeases":              *sessions,
			"lost":                   lost(),
			"createMs":               createMs,
		})
	}
	for _, s := range ss {
		_ = s.Close()
	}
	return 0
}
