// bench-locks: the real Go package on many independent locks, shaped like bench/locks-worker.ts so
// that `npm run bench` can run 20 of these processes side by side with 20 of ours. One client, S
// sessions; each session loops NewMutex(random name).Lock -> one scheduler turn -> Unlock. The
// process prints "ready" once its sessions exist, starts on a line from stdin (so that every
// process of a run starts together), and prints one JSON object at the end.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// locksRecord is one held lock: name index, fencing token (the key's CreateRevision), and when it
// was held from and to (wall clock in µs, which JSON numbers hold exactly: the same kernel clock
// in every process of the run).
type locksRecord [4]int64

func benchLocks(endpoints []string, ttl int, args []string) int {
	fs := flag.NewFlagSet("bench-locks", flag.ExitOnError)
	prefix := fs.String("prefix", fmt.Sprintf("bench/go/locks/%d/", time.Now().UnixNano()), "lock names are <prefix><0..names-1>")
	names := fs.Int("names", 1000, "lock names to pick from at random")
	sessions := fs.Int("sessions", 50, "sessions of this process, each looping on its own")
	distinct := fs.Bool("distinct", false, "session i always locks name i, rather than a random name each cycle")
	duration := fs.Duration("duration", 5*time.Second, "how long to loop after the start line")
	_ = fs.Parse(args)

	var rpcs atomic.Int64
	count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		rpcs.Add(1)
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(count)},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "go-interop:", err)
		return 1
	}
	defer cli.Close()
	ss := make([]*concurrency.Session, *sessions)
	for i := range ss {
		if ss[i], err = concurrency.NewSession(cli, concurrency.WithTTL(ttl)); err != nil {
			fmt.Fprintln(os.Stderr, "go-interop:", err)
			return 1
		}
	}
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fmt.Fprintln(os.Stderr, "go-interop: no start line:", err)
		return 1
	}
	var (
		mu       sync.Mutex
		records  []locksRecord
		waits    []float64
		firstErr error
		wg       sync.WaitGroup
	)
	rpcs0 := rpcs.Load()
	cpu0 := cpuTime()
	start := time.Now()
	end := start.Add(*duration)
	for i, s := range ss {
		wg.Add(1)
		go func(i int, s *concurrency.Session) {
			defer wg.Done()
			for time.Now().Before(end) {
				k := rand.IntN(*names)
				if *distinct {
					k = i
				}
				m := concurrency.NewMutex(s, fmt.Sprintf("%s%d", *prefix, k))
				t := time.Now()
				if err := m.Lock(context.Background()); err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
				held := time.Now()
				runtime.Gosched() // the critical section: one scheduler turn
				released := time.Now()
				mu.Lock()
				records = append(records, locksRecord{int64(k), myRev(m), held.UnixMicro(), released.UnixMicro()})
				waits = append(waits, ms(held.Sub(t)))
				mu.Unlock()
				if err := m.Unlock(context.Background()); err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
			}
		}(i, s)
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := cpuTime() - cpu0
	requests := rpcs.Load() - rpcs0
	for _, s := range ss {
		_ = s.Close()
	}
	if firstErr != nil {
		fmt.Fprintln(os.Stderr, "go-interop:", firstErr)
		return 1
	}
	printJSON(map[string]any{
		"impl":      "go",
		"client":    clientVersion(),
		"cycles":    len(records),
		"elapsedMs": ms(elapsed),
		"requests":  requests,
		"cpuMs":     ms(cpu),
		"wait":      summarize(waits),
		"records":   records,
	})
	return 0
}
